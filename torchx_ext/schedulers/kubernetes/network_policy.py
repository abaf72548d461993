"""The opt-in NetworkPolicy of an app (``-cfg network_policy=true``).

torch's rendezvous store has no authentication, and gloo and NCCL listen on ports any pod of the
cluster can reach: whoever connects can join the rendezvous, stall it or read a rank's traffic.
The policy selects the app's pods and lets in only its own pods and the peers the user names. It
does nothing where the cluster's network plugin does not enforce NetworkPolicies (kubenet, plain
flannel): docs/security.md says so.
"""

from __future__ import annotations

from typing import Any

from torchx import specs

from torchx_ext.schedulers.kubernetes import names
from torchx_ext.schedulers.kubernetes.options import ManifestOptions, parse_network_peer


def wants_network_policy(options: ManifestOptions) -> bool:
    return options.network_policy or bool(options.network_peers)


def network_policy(app: specs.AppDef, app_id: str, options: ManifestOptions) -> dict[str, Any]:
    """Ingress to the app's pods from its own pods and ``options.network_peers`` only; egress open."""
    own = {"podSelector": {"matchLabels": {names.LABEL_APP_ID: app_id}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": app_id, "namespace": options.namespace, "labels": names.app_labels(app, app_id)},
        "spec": {
            "podSelector": own["podSelector"],
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [own, *(parse_network_peer(text) for text in options.network_peers)]}],
        },
    }

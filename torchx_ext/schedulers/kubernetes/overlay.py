"""torchx's pod overlay: ``role.metadata["kubernetes"]``, merged into each of the role's pods.

It is the escape hatch for what the AppDef cannot say (affinity, Secret and ConfigMap volumes,
securityContext, annotations). On torchx-nightly its own reading and merge are used, so an
overlay means exactly what it means to torchx's kubernetes scheduler (operators included).
torchx 0.7.0 has no overlays: there the same forms are read here, with torchx's merge rules
(dicts merge, lists append, a tuple or a ``!!python/tuple`` list replaces, other values replace)
and a local file (a path or ``file://``) for a string.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchx import specs

from torchx_ext.errors import InvalidArgumentError

NAMESPACE = "kubernetes"
KIND = "V1Pod"


def apply_pod_overlay(template: dict[str, Any], role: specs.Role) -> None:
    """Merges the role's overlay, if any, into ``template`` (``{"metadata": ..., "spec": ...}``)."""
    given = (role.metadata or {}).get(NAMESPACE)
    if given is None:
        return
    try:
        from torchx.specs import overlays
    except ImportError:
        _merge(template, _read(given, role.name))
        return
    import yaml

    try:
        overlay = overlays.get_overlay(role, NAMESPACE, KIND)
        if overlay:
            overlays.apply_overlay(template, overlay)
    except (OSError, ValueError, TypeError, yaml.YAMLError) as error:
        raise InvalidArgumentError(f"role {role.name!r}: its pod overlay (metadata {NAMESPACE}={given!r}) cannot be "
                                   f"applied: {error}") from None


def _read(given: object, role: str) -> dict[str, Any]:
    overlay = given
    if isinstance(given, str):
        overlay = _load(given, role)
    if not isinstance(overlay, dict):
        raise InvalidArgumentError(f"role {role!r}: pod overlay {given!r}: expected a dict of pod fields or a file "
                                   "holding one")
    # As torchx-nightly reads metadata["kubernetes"]: {"V1Pod": {...}}, else one flat overlay such
    # as {"spec": {...}}; several dicts side by side are other kinds' overlays, not this one.
    nested = overlay.get(KIND)
    if isinstance(nested, dict):
        return nested
    if len(overlay) > 1 and all(isinstance(value, dict) for value in overlay.values()):
        return {}
    return overlay


def _load(uri: str, role: str) -> Any:
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    if "://" in path:
        raise InvalidArgumentError(f"role {role!r}: pod overlay {uri!r}: torchx 0.7.0 reads a local file here (a path or "
                                   "file://PATH); torchx-nightly reads any fsspec URI")
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise InvalidArgumentError(f"role {role!r}: cannot read pod overlay {uri!r}: {error.strerror or error}") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    import yaml

    class TupleLoader(yaml.SafeLoader):  # type: ignore[misc]  # untyped yaml
        pass

    TupleLoader.add_constructor("tag:yaml.org,2002:python/tuple",
                                lambda loader, node: tuple(loader.construct_sequence(node)))
    try:
        return yaml.load(text, Loader=TupleLoader)  # noqa: S506 - a safe loader, with tuples
    except yaml.YAMLError as error:
        raise InvalidArgumentError(f"role {role!r}: pod overlay {uri!r} is neither JSON nor YAML: "
                                   f"{str(error).splitlines()[0]}") from None


def _merge(base: dict[str, Any], overlay: dict[str, Any]) -> None:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        elif isinstance(value, list) and isinstance(base.get(key), list):
            base[key] = [*base[key], *value]
        elif isinstance(value, tuple):
            base[key] = list(value)
        else:
            base[key] = value

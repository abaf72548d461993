"""The verbs the HTTP layer serves, on top of the store: what DELETE means per resource (graceful pod
deletion, propagation to dependents) and how PATCH/PUT bodies are applied."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from tests.kubernetes.apiserver import errors
from tests.kubernetes.apiserver.patch import json_patch, merge_patch
from tests.kubernetes.apiserver.resources import BY_KEY, CUSTOM, JOBS, PODS, SERVICES, Obj, ResourceType
from tests.kubernetes.apiserver.store import Store

MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


def success(rtype: ResourceType, obj: Obj) -> Obj:
    """What DELETE answers when the object is gone at once."""
    details = {"name": obj["metadata"]["name"], "kind": rtype.plural, "uid": obj["metadata"]["uid"]}
    if rtype.group:
        details["group"] = rtype.group
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


def delete(store: Store, rtype: ResourceType, namespace: str, name: str, options: dict[str, Any]) -> Obj:
    obj = store.get(rtype, namespace, name)
    policy = options.get("propagationPolicy") or rtype.default_propagation
    if options.get("orphanDependents") is True:
        policy = "Orphan"
    if policy not in ("Orphan", "Background", "Foreground"):
        raise errors.ApiError(422, "Invalid", f'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: '
                              f'Unsupported value: "{policy}": supported values: "Foreground", "Background", "Orphan"')
    if rtype is PODS:
        return delete_pod(store, namespace, name, options.get("gracePeriodSeconds"))
    uid = obj["metadata"]["uid"]
    if policy == "Orphan":
        store.orphan(uid)
    elif policy == "Foreground":
        # Kept, with a finalizer, until the garbage collector (Job controller loop) sees no dependents left.
        def mark(o: Obj) -> None:
            o["metadata"].setdefault("deletionTimestamp", _timestamp(0))
            o["metadata"]["deletionGracePeriodSeconds"] = 0
            finalizers = o["metadata"].setdefault("finalizers", [])
            if "foregroundDeletion" not in finalizers:
                finalizers.append("foregroundDeletion")
        marked = store.update(rtype, namespace, name, mark)
        delete_dependents(store, uid)
        return marked
    store.remove(rtype, namespace, name)
    if policy == "Background":
        delete_dependents(store, uid)
    # The real API answers a Service's (and a namespace's) deletion with the object itself,
    # a Job's with a Status; the typed clients decode each as that.
    return obj if rtype.plural in ("services", "namespaces") else success(rtype, obj)


def delete_dependents(store: Store, owner_uid: str) -> None:
    for dependent_type in (PODS, JOBS, SERVICES, *CUSTOM):
        for dependent in store.owned_by(dependent_type, owner_uid):
            meta = dependent["metadata"]
            try:
                delete(store, dependent_type, meta.get("namespace", ""), meta["name"], {"propagationPolicy": "Background"})
            except errors.ApiError:
                pass  # deleted meanwhile


def delete_pod(store: Store, namespace: str, name: str, grace: int | None = None) -> Obj:
    """Graceful deletion: the pod is marked and its kubelet stops the containers, then removes it.
    A pod no kubelet runs (unscheduled) or one deleted with grace 0 is removed at once."""
    pod = store.get(PODS, namespace, name)
    if grace is None:
        grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
    if not pod["spec"].get("nodeName"):
        store.remove(PODS, namespace, name)
        return pod

    def mark(o: Obj) -> None:
        meta = o["metadata"]
        previous = meta.get("deletionGracePeriodSeconds")
        if previous is None or grace < previous:
            meta["deletionTimestamp"] = _timestamp(grace)
            meta["deletionGracePeriodSeconds"] = grace
    return store.update(PODS, namespace, name, mark)


def _timestamp(seconds_from_now: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds_from_now)).strftime("%Y-%m-%dT%H:%M:%SZ")


def patch(store: Store, rtype: ResourceType, namespace: str, name: str, content_type: str, body: Any) -> Obj:
    content_type = content_type.split(";")[0].strip().lower()

    def apply(current: Obj) -> Obj:
        if content_type == "application/json-patch+json":
            if not isinstance(body, list):
                raise errors.bad_request("json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp")
            return json_patch(current, body)  # type: ignore[no-any-return]
        if content_type in MERGE_TYPES:
            if not isinstance(body, dict):
                raise errors.bad_request("the body of the request was in an unknown format - accepted media types "
                                         "include: application/json-patch+json, application/merge-patch+json, "
                                         "application/apply-patch+yaml")
            return merge_patch(current, body)  # type: ignore[no-any-return]
        raise errors.ApiError(415, "UnsupportedMediaType", f'the body of the request was in an unknown format - '
                              f'accepted media types include: application/json-patch+json, '
                              f'application/merge-patch+json, application/strategic-merge-patch+json')
    return store.update(rtype, namespace, name, apply)


def replace(store: Store, rtype: ResourceType, namespace: str, name: str, body: Obj) -> Obj:
    version = (body.get("metadata") or {}).get("resourceVersion")
    return store.update(rtype, namespace, name, lambda current: dict(body), expect_version=version)


def resource(key: str) -> ResourceType:
    """``plural`` for the core group, ``plural.group`` otherwise."""
    return BY_KEY[key]

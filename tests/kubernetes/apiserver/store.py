"""The object store: every object as the JSON the API serves, under one lock, with a global
resourceVersion counter, uids, creation timestamps, label-selector lists and owner lookups.

Readers get deep copies, so the HTTP threads, the Job controller and the kubelet never share a dict."""

from __future__ import annotations

import copy
import threading
import uuid
from functools import partial
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any

from tests.kubernetes.apiserver import errors, pod_security
from tests.kubernetes.apiserver.resources import BY_KEY, JOBS, NAMESPACES, PODS, Obj, ResourceType, add_job_selector
from tests.kubernetes.apiserver.selectors import parse_selector

ObjList = list[Obj]
WatchEvents = list[tuple[str, Obj]]
"""(event type, object) as a watch streams them."""
Key = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped objects


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class Store:
    def __init__(self, namespaces: tuple[str, ...] = ("default",)) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[str, dict[Key, Obj]] = {key: {} for key in BY_KEY}
        self._version = 0
        self._created: dict[tuple[str, str, str], int] = {}
        """(resource key, namespace, name) -> the version that created the object (a watch's ADDED)."""
        self._removed: list[tuple[int, str, Obj]] = []
        """(version at removal, resource key, object): what a watch from an older version reports deleted."""
        for namespace in namespaces:
            self.create(NAMESPACES, "", {"metadata": {"name": namespace}})

    # -- reading ------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._version)

    def get(self, rtype: ResourceType, namespace: str, name: str) -> Obj:
        with self._lock:
            obj = self._objects[rtype.key].get((namespace if rtype.namespaced else "", name))
            if obj is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            return copy.deepcopy(obj)

    def find(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        try:
            return self.get(rtype, namespace, name)
        except errors.ApiError:
            return None

    def list(self, rtype: ResourceType, namespace: str | None = None,
             selector: str | None = None) -> tuple[ObjList, str]:
        """Objects in ``namespace`` (all when None) matching the label selector, and the list's version."""
        matches = parse_selector(selector)
        with self._lock:
            items = [copy.deepcopy(obj) for (ns, _), obj in sorted(self._objects[rtype.key].items())
                     if (namespace is None or ns == namespace)
                     and matches((obj["metadata"].get("labels") or {}))]
            return items, str(self._version)

    def namespace_exists(self, namespace: str) -> bool:
        with self._lock:
            return ("", namespace) in self._objects[NAMESPACES.key]

    def uid_exists(self, uid: str) -> bool:
        with self._lock:
            return any(obj["metadata"]["uid"] == uid for objects in self._objects.values() for obj in objects.values())

    def owned_by(self, rtype: ResourceType, owner_uid: str) -> ObjList:
        with self._lock:
            return [copy.deepcopy(obj) for obj in self._objects[rtype.key].values()
                    if any(ref.get("uid") == owner_uid for ref in obj["metadata"].get("ownerReferences") or [])]

    # -- writing ------------------------------------------------------------------------------------

    def _bump(self, obj: Obj) -> None:
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self._changed.notify_all()

    def create(self, rtype: ResourceType, namespace: str, body: Obj, dry_run: bool = False) -> Obj:
        """``dry_run``: defaulted, validated and checked against what exists as a real create is, not stored."""
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = rtype.kind, rtype.api_version
        metadata = obj.setdefault("metadata", {})
        if rtype.namespaced:
            metadata["namespace"] = namespace = metadata.get("namespace") or namespace
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = metadata["generateName"] + uuid.uuid4().hex[:5]
        rtype.default(obj)
        field_errors = rtype.validate(obj)
        if field_errors:
            raise errors.invalid(rtype.kind, rtype.group, str(metadata.get("name") or ""), field_errors)
        with self._lock:
            if rtype.namespaced and not self.namespace_exists(namespace):
                raise errors.not_found("namespaces", "", namespace)
            if rtype is PODS:  # admission, for a client's pods and a controller's alike
                pod_security.admit(obj, self._objects[NAMESPACES.key].get(("", namespace)))
            key = (namespace if rtype.namespaced else "", metadata["name"])
            if key in self._objects[rtype.key]:
                raise errors.already_exists(rtype.plural, rtype.group, metadata["name"])
            if dry_run:
                return obj
            metadata.update(uid=str(uuid.uuid4()), creationTimestamp=now_rfc3339(), generation=1)
            for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
                metadata.pop(transient, None)
            if rtype is JOBS:
                add_job_selector(obj)
            self._bump(obj)
            self._objects[rtype.key][key] = obj
            self._created[(rtype.key, *key)] = self._version
            return copy.deepcopy(obj)

    def update(self, rtype: ResourceType, namespace: str, name: str, change: Callable[[Obj], Obj | None],
               expect_version: str | None = None) -> Obj:
        """Apply ``change`` to a copy (it may return a replacement) and store it under a new version;
        identity fields (uid, name, namespace, creationTimestamp) cannot be changed this way."""
        with self._lock:
            key = (namespace if rtype.namespaced else "", name)
            current = self._objects[rtype.key].get(key)
            if current is None:
                raise errors.not_found(rtype.plural, rtype.group, name)
            if expect_version and expect_version != current["metadata"]["resourceVersion"]:
                raise errors.conflict(rtype.plural, rtype.group, name)
            draft = copy.deepcopy(current)
            replaced = change(draft)
            updated = replaced if replaced is not None else draft
            updated["kind"], updated["apiVersion"] = rtype.kind, rtype.api_version
            metadata = updated.setdefault("metadata", {})
            for fixed in ("uid", "name", "namespace", "creationTimestamp", "deletionTimestamp",
                          "deletionGracePeriodSeconds"):
                if fixed in current["metadata"] and fixed not in metadata:
                    metadata[fixed] = current["metadata"][fixed]
                elif fixed in ("uid", "name", "namespace", "creationTimestamp"):
                    metadata[fixed] = current["metadata"].get(fixed)
            if rtype.namespaced is False:
                metadata.pop("namespace", None)
            if updated.get("spec") != current.get("spec"):
                metadata["generation"] = int(current["metadata"].get("generation", 1)) + 1
            if updated == current:
                return copy.deepcopy(current)  # no-op writes keep the version, as on a real server
            self._bump(updated)
            self._objects[rtype.key][key] = updated
            return copy.deepcopy(updated)

    def remove(self, rtype: ResourceType, namespace: str, name: str) -> Obj | None:
        with self._lock:
            obj = self._objects[rtype.key].pop((namespace if rtype.namespaced else "", name), None)
            if obj is not None:
                self._version += 1
                self._removed.append((self._version, rtype.key, copy.deepcopy(obj)))
                self._changed.notify_all()
            return obj

    def orphan(self, owner_uid: str) -> None:
        """Drop ownerReferences to ``owner_uid`` (DELETE with propagationPolicy Orphan)."""
        with self._lock:
            for plural, objects in self._objects.items():
                for key, obj in list(objects.items()):
                    refs = obj["metadata"].get("ownerReferences") or []
                    if any(ref.get("uid") == owner_uid for ref in refs):
                        kept = [ref for ref in refs if ref.get("uid") != owner_uid]
                        self.update(BY_KEY[plural], key[0], key[1], partial(_set_owners, refs=kept))

    def wait_for_change(self, since: str, timeout: float) -> None:
        """Block until the store's version differs from ``since`` or the timeout passes."""
        with self._changed:
            self._changed.wait_for(lambda: str(self._version) != since, timeout)

    def changes(self, rtype: ResourceType, namespace: str | None, selector: str | None, since: int,
                timeout: float) -> tuple[WatchEvents, int]:
        """A watch's events after version ``since`` (waiting up to ``timeout`` for the first): each
        changed object once, in its latest state (``ADDED`` when it was created since, else
        ``MODIFIED``), and ``DELETED`` ones;
        and the version they bring the watch to."""
        matches = parse_selector(selector)

        def wanted(ns: str, obj: Obj) -> bool:
            return (namespace is None or ns == namespace) and matches(obj["metadata"].get("labels") or {})

        with self._changed:
            self._changed.wait_for(lambda: self._version > since, timeout)
            events: list[tuple[int, str, Obj]] = []
            for (ns, name), obj in self._objects[rtype.key].items():
                version = int(obj["metadata"].get("resourceVersion") or 0)
                if version > since and wanted(ns, obj):
                    added = self._created.get((rtype.key, ns, name), 0) > since
                    events.append((version, "ADDED" if added else "MODIFIED", copy.deepcopy(obj)))
            for version, key, obj in self._removed:
                if key == rtype.key and version > since and wanted(obj["metadata"].get("namespace", ""), obj):
                    obj = copy.deepcopy(obj)
                    obj["metadata"]["resourceVersion"] = str(version)
                    events.append((version, "DELETED", obj))
            events.sort(key=lambda event: event[0])
            return [(kind, obj) for _, kind, obj in events], self._version

    def all_objects(self) -> Iterator[tuple[str, Obj]]:
        with self._lock:
            snapshot = [(plural, copy.deepcopy(obj)) for plural, objs in self._objects.items() for obj in objs.values()]
        yield from snapshot


def _set_owners(obj: Obj, refs: list[dict[str, Any]]) -> None:
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)

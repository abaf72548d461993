"""The Job controller for batch/v1 Jobs: creates pods per index within parallelism, counts successes
and failures (per index too), applies podFailurePolicy, successPolicy, backoff limits, suspension and
the deadline, and sets the status and conditions as the real controller does (FailureTarget and
SuccessCriteriaMet first, Failed and Complete once no pod is left running).

It also garbage-collects: pods whose owning Job is gone, and Jobs deleted in the foreground."""

from __future__ import annotations

import copy
import logging
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from tests.kubernetes.apiserver import api, errors
from tests.kubernetes.apiserver.conditions import condition, set_condition, true_condition
from tests.kubernetes.apiserver.control_loop import ControlLoop
from tests.kubernetes.apiserver.ranges import compress, expand
from tests.kubernetes.apiserver.resources import COMPLETION_INDEX, CONTROLLER_UID, JOB_NAME, JOBS, PODS, Obj
from tests.kubernetes.apiserver.store import Store, now_rfc3339, parse_rfc3339

log = logging.getLogger(__name__)
TERMINAL = ("Succeeded", "Failed")


@dataclass
class JobMemory:
    """What the real controller keeps in finalizers and annotations: which pods it has counted."""
    counted: set[str] = field(default_factory=set)
    seen: dict[str, Obj] = field(default_factory=dict)
    deleted_by_us: set[str] = field(default_factory=set)
    index_failures: Counter[int] = field(default_factory=Counter)
    succeeded_indexes: set[int] = field(default_factory=set)
    failed_indexes: set[int] = field(default_factory=set)
    succeeded: int = 0
    failed: int = 0
    failure: tuple[str, str] | None = None  # (reason, message) decided by a FailJob rule


def _index(pod: Obj) -> int:
    try:
        return int((pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX, "-1"))
    except ValueError:
        return -1


def failure_rule(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """The first podFailurePolicy rule matching a failed pod: (action, message), or None."""
    meta = pod["metadata"]
    where = f"{meta.get('namespace')}/{meta['name']}"
    status = pod.get("status") or {}
    for i, rule in enumerate((job["spec"].get("podFailurePolicy") or {}).get("rules") or []):
        action = rule.get("action", "Count")
        codes = rule.get("onExitCodes")
        if codes:
            values = set(codes.get("values") or [])
            for entry in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
                if codes.get("containerName") and entry["name"] != codes["containerName"]:
                    continue
                terminated = (entry.get("state") or {}).get("terminated")
                if not terminated:
                    continue
                code = terminated.get("exitCode")
                # NotIn never matches exit code 0, as in the real API.
                if (codes.get("operator") == "In" and code in values) or \
                        (codes.get("operator") == "NotIn" and code not in values and code != 0):
                    return action, (f"Container {entry['name']} for pod {where} failed with exit code {code} "
                                    f"matching {action} rule at index {i}")
        for pattern in rule.get("onPodConditions") or []:
            for condition in status.get("conditions") or []:
                if condition["type"] == pattern.get("type") and condition["status"] == pattern.get("status", "True"):
                    return action, f"Pod {where} has condition {condition['type']} matching {action} rule at index {i}"
    return None


def success_rule(job: Obj, succeeded: set[int]) -> int | None:
    for i, rule in enumerate((job["spec"].get("successPolicy") or {}).get("rules") or []):
        wanted = expand(rule["succeededIndexes"]) if rule.get("succeededIndexes") else None
        count = rule.get("succeededCount")
        if wanted is not None:
            done = wanted & succeeded
            met = done == wanted if count is None else len(done) >= count
        else:
            met = count is not None and len(succeeded) >= count
        if met:
            return i
    return None


class JobController(ControlLoop):
    def __init__(self, store: Store) -> None:
        super().__init__(store, "fake-job-controller", (self._sync,))
        self._memory: dict[str, JobMemory] = {}

    def _sync(self) -> None:
        jobs, _ = self._store.list(JOBS)
        pods, _ = self._store.list(PODS)
        by_owner: dict[str, list[Obj]] = {}
        for pod in pods:
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("apiVersion") == "batch/v1":
                    by_owner.setdefault(ref["uid"], []).append(pod)
        job_uids = {job["metadata"]["uid"] for job in jobs}
        for job in jobs:
            try:
                self._reconcile(job, by_owner.get(job["metadata"]["uid"], []))
            except errors.ApiError as error:
                log.debug("job %s: %s", job["metadata"]["name"], error.message)
        for uid in set(self._memory) - job_uids:
            del self._memory[uid]
        # Garbage collection: dependents of Jobs that no longer exist.
        for owner_uid, owned in by_owner.items():
            if owner_uid not in job_uids:
                for pod in owned:
                    if not pod["metadata"].get("deletionTimestamp"):
                        self._delete_pod(pod, None)

    def _delete_pod(self, pod: Obj, memory: JobMemory | None) -> None:
        if memory is not None:
            memory.deleted_by_us.add(pod["metadata"]["uid"])
        try:
            api.delete_pod(self._store, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except errors.ApiError:
            pass  # gone already

    def _reconcile(self, job: Obj, pods: list[Obj]) -> None:
        meta, spec = job["metadata"], job["spec"]
        if meta.get("deletionTimestamp"):
            # Foreground deletion: the Job goes once its pods are gone.
            for pod in pods:
                if not pod["metadata"].get("deletionTimestamp"):
                    self._delete_pod(pod, None)
            if not pods:
                self._store.remove(JOBS, meta["namespace"], meta["name"])
            return
        status = copy.deepcopy(job.get("status") or {})
        if true_condition(status, "Complete") or true_condition(status, "Failed"):
            return  # finished Jobs create and count nothing more
        memory = self._memory.setdefault(meta["uid"], JobMemory())
        self._count(job, pods, memory)
        active = [p for p in pods if p["status"].get("phase") not in TERMINAL and not p["metadata"].get("deletionTimestamp")]
        terminating = [p for p in pods if p["status"].get("phase") not in TERMINAL and p["metadata"].get("deletionTimestamp")]
        indexed = spec.get("completionMode") == "Indexed"

        finishing = self._finish_target(job, status, memory, indexed)
        if finishing:
            for pod in active:
                self._delete_pod(pod, memory)
            if not active and not terminating:
                kind, reason, message = finishing
                status.setdefault("conditions", []).append(condition(kind, True, reason, message, probed=True))
                if kind == "Complete":
                    status["completionTime"] = now_rfc3339()
            active = []
        elif spec.get("suspend"):
            for pod in active:
                self._delete_pod(pod, memory)
            active = []
            if not true_condition(status, "Suspended"):
                set_condition(status, condition("Suspended", True, "JobSuspended", "Job suspended", probed=True))
                status.pop("startTime", None)
        else:
            if true_condition(status, "Suspended"):
                set_condition(status, condition("Suspended", False, "JobResumed", "Job resumed", probed=True))
            status.setdefault("startTime", now_rfc3339())
            active += self._create_pods(job, active, terminating, memory, indexed)

        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if any(c["type"] == "Ready" and c["status"] == "True"
                                                       for c in p["status"].get("conditions") or []))
        status["terminating"] = len(terminating)
        status["succeeded"], status["failed"] = memory.succeeded, memory.failed
        for key in ("active", "succeeded", "failed"):
            if not status[key]:
                del status[key]  # omitempty, as the real API serialises them
        if indexed:
            status["completedIndexes"] = compress(memory.succeeded_indexes)
            if not status["completedIndexes"]:
                del status["completedIndexes"]
            if spec.get("backoffLimitPerIndex") is not None:
                status["failedIndexes"] = compress(memory.failed_indexes)
        if status != (job.get("status") or {}):
            self._store.update(JOBS, meta["namespace"], meta["name"], lambda o: o.update(status=status) and None)

    def _count(self, job: Obj, pods: list[Obj], memory: JobMemory) -> None:
        """Count pods that finished since the last pass, including ones removed before we saw them end."""
        current = {p["metadata"]["uid"]: p for p in pods}
        finished = [p for uid, p in memory.seen.items() if uid not in current]
        finished += [p for p in pods if p["status"].get("phase") in TERMINAL]
        memory.seen = current
        limit_per_index = job["spec"].get("backoffLimitPerIndex")
        for pod in finished:
            uid = pod["metadata"]["uid"]
            if uid in memory.counted:
                continue
            memory.counted.add(uid)
            index = _index(pod)
            if pod["status"].get("phase") == "Succeeded":
                memory.succeeded += 1
                if index >= 0:
                    memory.succeeded_indexes.add(index)
                continue
            if uid in memory.deleted_by_us:
                continue  # suspension or the end of the Job, not a failure of the workload
            rule = failure_rule(job, pod) if job["spec"].get("podFailurePolicy") else None
            action = rule[0] if rule else "Count"
            if action == "Ignore":
                continue
            memory.failed += 1
            if action == "FailJob" and memory.failure is None:
                memory.failure = ("PodFailurePolicy", rule[1] if rule else "")
            if limit_per_index is not None and index >= 0 and index not in memory.succeeded_indexes:
                memory.index_failures[index] += 1
                if action == "FailIndex" or memory.index_failures[index] > limit_per_index:
                    memory.failed_indexes.add(index)

    def _finish_target(self, job: Obj, status: dict[str, Any], memory: JobMemory,
                       indexed: bool) -> tuple[str, str, str] | None:
        """(final condition, reason, message) once the Job must end; the interim FailureTarget or
        SuccessCriteriaMet condition is added to ``status`` when first decided."""
        for interim, final in (("FailureTarget", "Failed"), ("SuccessCriteriaMet", "Complete")):
            existing = true_condition(status, interim)
            if existing:
                return final, existing["reason"], existing["message"]
        spec = job["spec"]
        completions = spec.get("completions")
        decided: tuple[str, str, str] | None = None
        per_index = spec.get("backoffLimitPerIndex")
        max_failed = spec.get("maxFailedIndexes")
        deadline = spec.get("activeDeadlineSeconds")
        if memory.failure is not None:
            decided = ("FailureTarget", *memory.failure)
        elif per_index is not None and max_failed is not None and len(memory.failed_indexes) > max_failed:
            decided = ("FailureTarget", "MaxFailedIndexesExceeded",
                       "Job has exceeded the specified maximal number of failed indexes")
        elif per_index is None and memory.failed > int(spec.get("backoffLimit", 6)):
            decided = ("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif deadline is not None and status.get("startTime") and not spec.get("suspend") and \
                (datetime.now(timezone.utc) - parse_rfc3339(status["startTime"])).total_seconds() > deadline:
            decided = ("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline")
        elif indexed and (rule := success_rule(job, memory.succeeded_indexes)) is not None:
            decided = ("SuccessCriteriaMet", "SuccessPolicy", f"Matched rules at index {rule}")
        elif indexed and completions is not None and \
                len(memory.succeeded_indexes & set(range(completions))) == completions:
            decided = ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
        elif not indexed and memory.succeeded >= (completions if completions is not None else 1):
            decided = ("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
        elif indexed and memory.failed_indexes and completions is not None and \
                (memory.succeeded_indexes | memory.failed_indexes) >= set(range(completions)):
            decided = ("FailureTarget", "FailedIndexes", "Job has failed indexes")
        if decided is None:
            return None
        status.setdefault("conditions", []).append(condition(decided[0], True, *decided[1:], probed=True))
        return ("Failed" if decided[0] == "FailureTarget" else "Complete"), decided[1], decided[2]

    def _create_pods(self, job: Obj, active: list[Obj], terminating: list[Obj], memory: JobMemory,
                     indexed: bool) -> list[Obj]:
        spec = job["spec"]
        slots = int(spec.get("parallelism", 1)) - len(active)
        if slots <= 0:
            return []
        wait_for_termination = spec.get("podReplacementPolicy") == "Failed"
        if indexed:
            busy = {_index(p) for p in active}
            if wait_for_termination:
                busy |= {_index(p) for p in terminating}
            todo = [i for i in range(int(spec["completions"]))
                    if i not in memory.succeeded_indexes and i not in memory.failed_indexes and i not in busy]
        else:
            completions = spec.get("completions")
            remaining = (completions if completions is not None else 1) - memory.succeeded - len(active)
            if wait_for_termination:
                remaining -= len(terminating)
            todo = [-1] * max(remaining, 0)
        return [self._create_pod(job, index) for index in todo[:slots]]

    def _create_pod(self, job: Obj, index: int) -> Obj:
        meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
        suffix = "".join(random.choices(string.ascii_lowercase + string.digits, k=5))
        name = f"{meta['name']}-{index}-{suffix}" if index >= 0 else f"{meta['name']}-{suffix}"
        template_meta = template.get("metadata") or {}
        pod_labels = dict(template_meta.get("labels") or {})
        pod_labels.update({JOB_NAME: meta["name"], "job-name": meta["name"], CONTROLLER_UID: meta["uid"],
                           "controller-uid": meta["uid"]})
        annotations = dict(template_meta.get("annotations") or {})
        pod_spec = template["spec"]
        if index >= 0:
            pod_labels[COMPLETION_INDEX] = str(index)
            annotations[COMPLETION_INDEX] = str(index)
            pod_spec["hostname"] = f"{meta['name']}-{index}"
            reference = {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
                "apiVersion": "v1", "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
            for container in (pod_spec.get("initContainers") or []) + pod_spec["containers"]:
                container["env"] = [e for e in container.get("env") or [] if e["name"] != "JOB_COMPLETION_INDEX"]
                container["env"].append(reference)
        pod = {"metadata": {"name": name, "namespace": meta["namespace"], "labels": pod_labels,
                            "annotations": annotations, "generateName": f"{meta['name']}-{index}-" if index >= 0
                            else f"{meta['name']}-",
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"],
                                                 "uid": meta["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": pod_spec}
        return self._store.create(PODS, meta["namespace"], pod)

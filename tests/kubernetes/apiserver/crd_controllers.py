"""Stand-ins for the controllers of JobSet, Volcano and Kueue, acting as theirs do on the fields
our scheduler sets (each driven by the objects' own fields, nothing else):

- JobSet (v0.12): a Job per replicated job and replica (``{set}-{rjob}-{i}``, labelled as
  JobSet labels them), a headless Service named after the subdomain, ``suspend`` passed on,
  ``failurePolicy`` (rules by Job failure reason, then ``maxRestarts``: every Job deleted and
  recreated), ``successPolicy`` (All of the target replicated jobs), conditions and status.
- Volcano (v1.15): pods ``{job}-{task}-{i}`` with Volcano's labels, the ``svc`` plugin's
  hostnames and Service, the ``env`` plugin's ``VC_TASK_INDEX``; the gang (no pod is bound
  before ``minAvailable`` of them can be); policies (task's, then the job's, first match) for
  PodFailed (a pod turning Failed) and PodEvicted (a pod removed by anyone but the controller,
  as Volcano's ``deletePod`` handler reports it), events from pods of an earlier attempt
  ignored (a pod's ``volcano.sh/job-version`` below the job's ``status.version``, which only a
  whole-job restart raises); RestartJob (every pod), RestartTask (the failed pod's task) and
  RestartPod (that pod) count ``retryCount`` and fail the job once it reaches ``maxRetry``, a
  RestartJob keeping the pods that ended on that last attempt; ``AbortJob`` Commands, and the phases
  Pending -> Running -> Completed/Failed, Restarting, Terminating -> Terminated, Aborting -> Aborted.
  Volcano writes no reason or message for these: neither does this.
- Kueue (v0.19): a Workload per queued Job or JobSet, admitted (un-suspended) while the
  LocalQueue's CPU quota (``TestCluster.kueue_queues``) holds it, else ``QuotaReserved`` False
  with Kueue's reason; an admitted job suspended again is un-suspended, as Kueue does.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from tests.kubernetes.apiserver import api, errors
from tests.kubernetes.apiserver.conditions import condition, set_condition, true_condition
from tests.kubernetes.apiserver.control_loop import ControlLoop
from tests.kubernetes.apiserver.node import pod_requests
from tests.kubernetes.apiserver.resources import (JOBS, JOBSETS, LOCAL_QUEUES, PODS, SERVICES, VOLCANO_COMMANDS, VOLCANO_JOBS,
                                                  WORKLOADS, Obj, ResourceType)
from tests.kubernetes.apiserver.store import Store, now_rfc3339

log = logging.getLogger(__name__)
JS = "jobset.sigs.k8s.io/"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
GANG_ANNOTATION = "torchx-ext-test.kube/gang-bound"
"""Set by the Volcano stand-in on pods its scheduler binds; the kubelet schedules no other
pod of scheduler ``volcano``."""
TERMINAL_POD = ("Succeeded", "Failed")


def _owner(obj: Obj) -> dict[str, Any]:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _owned(objects: list[Obj], owner: Obj) -> list[Obj]:
    uid = owner["metadata"]["uid"]
    return [o for o in objects if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])]


def _job_finished(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        if true_condition(job.get("status"), kind):
            return kind
    return None


class CrdControllers(ControlLoop):
    def __init__(self, store: Store, held: Callable[[Obj], bool]) -> None:
        super().__init__(store, "fake-crd-controllers", (self._sync_jobsets, self._sync_volcano, self._sync_kueue))
        self._held = held
        self.kueue_queues: dict[str, float] = {}
        """LocalQueue name -> CPUs its ClusterQueue admits at once (Kueue's nominal quota)."""
        self._volcano_seen: dict[str, set[str]] = {}
        """Volcano Job uid -> the uids of its pods whose failure was handled."""
        self._volcano_pods: dict[str, dict[str, Obj]] = {}
        """Volcano Job uid -> its pods (uid -> pod) as last seen, to notice one removed."""
        self._volcano_killed: set[str] = set()
        """Pods the controller deleted itself (Volcano marks them out of sync): no PodEvicted."""
        self._volcano_targets: dict[str, set[str]] = {}
        """Volcano Job uid -> the pods a RestartPod or RestartTask restarts (none: a RestartJob)."""

    def _write_status(self, rtype: ResourceType, obj: Obj, status: dict[str, Any]) -> None:
        if status != (obj.get("status") or {}):
            meta = obj["metadata"]
            self._store.update(rtype, meta["namespace"], meta["name"], lambda o: o.update(status=status) and None)

    def _delete(self, rtype: ResourceType, obj: Obj) -> None:
        try:
            api.delete(self._store, rtype, obj["metadata"]["namespace"], obj["metadata"]["name"],
                       {"propagationPolicy": "Background"})
        except errors.ApiError:
            pass  # gone already

    # -- JobSet -------------------------------------------------------------------------------------

    def _sync_jobsets(self) -> None:
        jobsets, _ = self._store.list(JOBSETS)
        if not jobsets:
            return
        jobs, _ = self._store.list(JOBS)
        for jobset in jobsets:
            self._reconcile_jobset(jobset, _owned(jobs, jobset))

    def _reconcile_jobset(self, jobset: Obj, children: list[Obj]) -> None:
        meta, spec = jobset["metadata"], jobset["spec"]
        status = copy.deepcopy(jobset.get("status") or {})
        if true_condition(jobset.get("status"), "Completed") or true_condition(jobset.get("status"), "Failed"):
            for child in children:
                if not _job_finished(child):
                    self._delete(JOBS, child)
            return
        restarts = int(status.get("restarts") or 0)
        previous = [c for c in children if int((c["metadata"].get("labels") or {}).get(JS + "restart-attempt", "0")) < restarts]
        if previous:  # a restart: every Job of the earlier attempt goes before any is made again
            for child in previous:
                self._delete(JOBS, child)
            return
        network = spec.get("network") or {}
        subdomain = network.get("subdomain") or meta["name"]
        if network.get("enableDNSHostnames", True) and self._store.find(SERVICES, meta["namespace"], subdomain) is None:
            self._store.create(SERVICES, meta["namespace"], {"metadata": {
                "name": subdomain, "ownerReferences": [_owner(jobset)]}, "spec": {
                "clusterIP": "None", "selector": {JS + "jobset-name": meta["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True)}})
        by_name = {c["metadata"]["name"]: c for c in children}
        suspend = bool(spec.get("suspend"))
        for replicated in spec["replicatedJobs"]:
            for index in range(int(replicated.get("replicas", 1))):
                name = f"{meta['name']}-{replicated['name']}-{index}"
                existing = by_name.get(name)
                if existing is None:
                    self._create_child(jobset, replicated, index, name, restarts, subdomain, suspend)
                elif not _job_finished(existing) and bool(existing["spec"].get("suspend")) != suspend:
                    self._store.update(JOBS, meta["namespace"], name,
                                       lambda o: o["spec"].update(suspend=suspend) and None)
        if suspend:
            set_condition(status, condition("Suspended", True, "SuspendedJobs", "jobset is suspended"))
        elif true_condition(jobset.get("status"), "Suspended"):
            set_condition(status, condition("Suspended", False, "ResumeJobs", "jobset is resumed"))
        failed = [c for c in children if _job_finished(c) == "Failed"]
        if failed:
            reason = (true_condition(failed[0].get("status"), "Failed") or {}).get("reason", "")
            rules = (spec.get("failurePolicy") or {}).get("rules") or []
            rule = next((r for r in rules if not r.get("onJobFailureReasons") or reason in r["onJobFailureReasons"]), None)
            action = rule["action"] if rule else "RestartJobSet"
            first = failed[0]["metadata"]["name"]
            if action == "FailJobSet":
                set_condition(status, condition("Failed", True, f"FailurePolicy_{rule['name'] if rule else ''}",
                                                f"jobset failed due to failure policy rule (first failed job: {first})"))
                status["terminalState"] = "Failed"
            elif restarts >= int((spec.get("failurePolicy") or {}).get("maxRestarts", 0)):
                set_condition(status, condition("Failed", True, "ReachedMaxRestarts",
                                                "jobset failed due to reaching max "
                                                f"number of restarts (first failed job: {first})"))
                status["terminalState"] = "Failed"
            else:
                status["restarts"] = status["restartsCountTowardsMax"] = restarts + 1
                set_condition(status, condition("RestartingJobSet", True, "DefaultFailurePolicy",
                                                f"restarting jobset (first failed job: {first})"))
        else:
            targets = (spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [
                r["name"] for r in spec["replicatedJobs"]]
            wanted = [f"{meta['name']}-{r['name']}-{i}" for r in spec["replicatedJobs"] if r["name"] in targets
                      for i in range(int(r.get("replicas", 1)))]
            if wanted and all(by_name.get(name) is not None and _job_finished(by_name[name]) == "Complete"
                              for name in wanted):
                set_condition(status, condition("Completed", True, "AllJobsCompleted", "jobset completed successfully"))
                status["terminalState"] = "Completed"
        status["replicatedJobsStatus"] = [{
            "name": r["name"],
            "ready": sum(1 for c in children if c["metadata"]["labels"].get(JS + "replicatedjob-name") == r["name"]
                         and (c.get("status") or {}).get("ready")),
            "succeeded": sum(1 for c in children if c["metadata"]["labels"].get(JS + "replicatedjob-name") == r["name"]
                             and _job_finished(c) == "Complete"),
            "failed": sum(1 for c in children if c["metadata"]["labels"].get(JS + "replicatedjob-name") == r["name"]
                          and _job_finished(c) == "Failed"),
            "active": sum(1 for c in children if c["metadata"]["labels"].get(JS + "replicatedjob-name") == r["name"]
                          and (c.get("status") or {}).get("active")),
            "suspended": len(children) if suspend else 0,
        } for r in spec["replicatedJobs"]]
        status.setdefault("restarts", restarts)
        self._write_status(JOBSETS, jobset, status)

    def _create_child(self, jobset: Obj, replicated: Obj, index: int, name: str, restarts: int, subdomain: str,
                      suspend: bool) -> None:
        meta = jobset["metadata"]
        template = copy.deepcopy(replicated["template"])
        ours = {JS + "jobset-name": meta["name"], JS + "jobset-uid": meta["uid"],
                JS + "replicatedjob-name": replicated["name"], JS + "restart-attempt": str(restarts),
                JS + "replicatedjob-replicas": str(replicated.get("replicas", 1)), JS + "job-index": str(index)}
        labels = {**((template.get("metadata") or {}).get("labels") or {}), **ours}
        annotations = {**((template.get("metadata") or {}).get("annotations") or {}), **ours}
        job_spec = template["spec"]
        job_spec["suspend"] = suspend
        pod_meta = job_spec["template"].setdefault("metadata", {})
        pod_meta["labels"] = {**(pod_meta.get("labels") or {}), **ours}
        pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **ours}
        if (jobset["spec"].get("network") or {}).get("enableDNSHostnames", True):
            job_spec["template"]["spec"]["subdomain"] = subdomain
        self._store.create(JOBS, meta["namespace"], {"metadata": {
            "name": name, "labels": labels, "annotations": annotations, "ownerReferences": [_owner(jobset)]},
            "spec": job_spec})

    # -- Volcano ------------------------------------------------------------------------------------

    def _sync_volcano(self) -> None:
        vcjobs, _ = self._store.list(VOLCANO_JOBS)
        if not vcjobs:
            return
        pods, _ = self._store.list(PODS)
        commands, _ = self._store.list(VOLCANO_COMMANDS)
        for job in vcjobs:
            for command in commands:
                if (command.get("target") or {}).get("uid") == job["metadata"]["uid"]:
                    self._store.remove(VOLCANO_COMMANDS, command["metadata"]["namespace"], command["metadata"]["name"])
                    if command.get("action") == "AbortJob":
                        job = self._phase(job, "Aborting", "AbortJob", "job aborted by a Command")
            self._reconcile_volcano(job, _owned(pods, job))

    def _phase(self, job: Obj, phase: str, reason: str = "", message: str = "", retry: bool = False,
               whole_job: bool = False) -> Obj:
        status = copy.deepcopy(job.get("status") or {})
        status["state"] = {"phase": phase, "reason": reason, "message": message, "lastTransitionTime": now_rfc3339()}
        if retry:
            status["retryCount"] = int(status.get("retryCount") or 0) + 1
        if whole_job:
            status["version"] = int(status.get("version") or 0) + 1
        meta = job["metadata"]
        return self._store.update(VOLCANO_JOBS, meta["namespace"], meta["name"], lambda o: o.update(status=status) and None)

    def _reconcile_volcano(self, job: Obj, pods: list[Obj]) -> None:
        meta, spec = job["metadata"], job["spec"]
        phase = ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"
        active = [p for p in pods if p["status"].get("phase") not in TERMINAL_POD]
        if phase in ("Completed", "Failed", "Terminated", "Aborted"):
            self._kill(active)
            return
        ending = {"Aborting": "Aborted", "Completing": "Completed", "Terminating": "Terminated"}
        if phase in ending:
            self._kill(active)
            if not active:
                self._phase(job, ending[phase])
            return
        if phase == "Restarting":
            retries = int((job.get("status") or {}).get("retryCount") or 0)
            last = retries >= int(spec.get("maxRetry", 3))
            targets = self._volcano_targets.get(meta["uid"])
            if targets is not None:  # a RestartPod or RestartTask: the other pods go on
                restarting = [p for p in pods if p["metadata"]["uid"] in targets]
                self._kill(restarting)
                if last or not restarting:
                    del self._volcano_targets[meta["uid"]]
                    self._phase(job, "Failed" if last else "Pending")
                return
            going = active if last else pods  # the last attempt keeps the pods that ended
            self._kill(going)
            if not going:
                self._phase(job, "Failed" if last else "Pending")
            return
        if "svc" in (spec.get("plugins") or {}) and self._store.find(SERVICES, meta["namespace"], meta["name"]) is None:
            self._store.create(SERVICES, meta["namespace"], {"metadata": {
                "name": meta["name"], "ownerReferences": [_owner(job)]}, "spec": {
                "clusterIP": "None", "selector": {"volcano.sh/job-name": meta["name"],
                                                  "volcano.sh/job-namespace": meta["namespace"]},
                "publishNotReadyAddresses": "--publish-not-ready-addresses" in spec["plugins"]["svc"]}})
        names = {p["metadata"]["name"] for p in pods}
        for task in spec["tasks"]:
            for index in range(int(task.get("replicas", 1))):
                name = f"{meta['name']}-{task['name']}-{index}"
                if name not in names:
                    pods.append(self._create_volcano_pod(job, task, index, name))
        self._gang(job, pods)
        if self._apply_policies(job, pods):
            return
        counts = {state: sum(1 for p in pods if p["status"].get("phase") == state)
                  for state in ("Pending", "Running", "Succeeded", "Failed")}
        total = sum(int(t.get("replicas", 1)) for t in spec["tasks"])
        minimum = int(spec.get("minAvailable", total))
        if counts["Succeeded"] + counts["Failed"] >= total:
            self._phase(job, "Completed" if counts["Succeeded"] >= minimum else "Failed")
            return
        if phase == "Pending" and counts["Running"] >= minimum:
            job = self._phase(job, "Running")
        status = copy.deepcopy(job.get("status") or {})
        status.update(minAvailable=minimum, pending=counts["Pending"], running=counts["Running"],
                      succeeded=counts["Succeeded"], failed=counts["Failed"])
        status.setdefault("state", {"phase": "Pending", "lastTransitionTime": now_rfc3339()})
        self._write_status(VOLCANO_JOBS, job, status)

    def _apply_policies(self, job: Obj, pods: list[Obj]) -> bool:
        """Acts on the first pod event a policy handles; True when the job's phase changed."""
        meta, spec = job["metadata"], job["spec"]
        version = int((job.get("status") or {}).get("version") or 0)
        handled = self._volcano_seen.setdefault(meta["uid"], set())
        before = self._volcano_pods.get(meta["uid"], {})
        self._volcano_pods[meta["uid"]] = {pod["metadata"]["uid"]: pod for pod in pods}
        events = [("PodFailed", pod) for pod in pods if pod["status"].get("phase") == "Failed"]
        events += [("PodEvicted", pod) for uid, pod in before.items()
                   if uid not in self._volcano_pods[meta["uid"]] and uid not in self._volcano_killed]
        for event, pod in events:
            key = f"{event}/{pod['metadata']['uid']}"
            if key in handled:
                continue
            handled.add(key)
            if int((pod["metadata"].get("annotations") or {}).get("volcano.sh/job-version") or 0) < version:
                continue  # a pod of an earlier attempt: outdated
            task_name = pod["metadata"]["labels"]["volcano.sh/task-spec"]
            task = next(t for t in spec["tasks"] if t["name"] == task_name)
            policies = [*(task.get("policies") or []), *(spec.get("policies") or [])]
            code = _exit_code(pod) if event == "PodFailed" else None
            action = next((p["action"] for p in policies if p.get("event") in (event, "*")
                           or (code is not None and p.get("exitCode") == code)), None)
            if action in ("RestartPod", "RestartTask"):
                restarting = [pod] if action == "RestartPod" else [
                    p for p in pods if p["metadata"]["labels"].get("volcano.sh/task-spec") == task_name]
                self._volcano_targets[meta["uid"]] = {p["metadata"]["uid"] for p in restarting}
                self._kill([p for p in restarting if p in pods])
                self._phase(job, "Restarting", retry=True)
                return True
            phase = {"RestartJob": "Restarting", "AbortJob": "Aborting", "TerminateJob": "Terminating"}.get(action or "")
            if phase is not None:
                self._phase(job, phase, retry=phase == "Restarting", whole_job=phase == "Restarting")
                return True
        return False

    def _kill(self, pods: list[Obj]) -> None:
        for pod in pods:
            self._volcano_killed.add(pod["metadata"]["uid"])
            if not pod["metadata"].get("deletionTimestamp"):
                try:
                    api.delete_pod(self._store, pod["metadata"]["namespace"], pod["metadata"]["name"])
                except errors.ApiError:
                    pass

    def _create_volcano_pod(self, job: Obj, task: Obj, index: int, name: str) -> Obj:
        meta, spec = job["metadata"], job["spec"]
        template = copy.deepcopy(task["template"])
        queue = spec.get("queue", "default")
        volcano = {"volcano.sh/job-name": meta["name"], "volcano.sh/job-namespace": meta["namespace"],
                   "volcano.sh/task-spec": task["name"], "volcano.sh/task-index": str(index),
                   "volcano.sh/queue-name": queue}
        pod_meta = template.get("metadata") or {}
        pod_spec = template["spec"]
        pod_spec["schedulerName"] = spec.get("schedulerName", "volcano")
        if "svc" in (spec.get("plugins") or {}):
            pod_spec.setdefault("hostname", name)
            pod_spec.setdefault("subdomain", meta["name"])
        if "env" in (spec.get("plugins") or {}):
            for container in pod_spec["containers"]:
                container["env"] = [*(container.get("env") or []), {"name": "VK_TASK_INDEX", "value": str(index)},
                                    {"name": "VC_TASK_INDEX", "value": str(index)}]
        return self._store.create(PODS, meta["namespace"], {"metadata": {
            "name": name, "labels": {**(pod_meta.get("labels") or {}), **volcano},
            "annotations": {**(pod_meta.get("annotations") or {}), "volcano.sh/task-index": str(index),
                            "volcano.sh/task-spec": task["name"], "volcano.sh/job-name": meta["name"],
                            "scheduling.k8s.io/group-name": f"{meta['name']}-{meta['uid']}",
                            "volcano.sh/job-version": str((job.get("status") or {}).get("version") or 0)},
            "ownerReferences": [_owner(job)]}, "spec": pod_spec})

    def _gang(self, job: Obj, pods: list[Obj]) -> None:
        """Volcano's scheduler: the job's pods are bound together, once minAvailable of them can be."""
        waiting = [p for p in pods if not (p["metadata"].get("annotations") or {}).get(GANG_ANNOTATION)
                   and p["status"].get("phase") not in TERMINAL_POD and not p["metadata"].get("deletionTimestamp")]
        if not waiting:
            return
        bound = len(pods) - len(waiting)
        placeable = [p for p in waiting if not self._held(p)]
        if bound + len(placeable) < int(job["spec"].get("minAvailable", len(pods))):
            return
        for pod in placeable:
            self._store.update(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"],
                               lambda o: o["metadata"].setdefault("annotations", {}).update({GANG_ANNOTATION: "true"}))

    # -- Kueue --------------------------------------------------------------------------------------

    def _sync_kueue(self) -> None:
        queued: list[tuple[ResourceType, Obj]] = []
        for rtype in (JOBS, JOBSETS):
            for obj in self._store.list(rtype, None, QUEUE_LABEL)[0]:
                if not any(ref.get("kind") == "JobSet" for ref in obj["metadata"].get("ownerReferences") or []):
                    queued.append((rtype, obj))
        if not queued:
            return
        workloads = {w["metadata"]["labels"].get(JOB_UID_LABEL): w for w in self._store.list(WORKLOADS)[0]}
        used: dict[str, Decimal] = {}
        for rtype, obj in queued:
            workload = workloads.get(obj["metadata"]["uid"])
            admitted = workload is not None and true_condition(workload.get("status"), "Admitted")
            if admitted and not true_condition((workload or {}).get("status"), "Finished"):
                queue = obj["metadata"]["labels"][QUEUE_LABEL]
                used[queue] = used.get(queue, Decimal(0)) + _cpus(rtype, obj)
        for rtype, obj in queued:
            workload = workloads.get(obj["metadata"]["uid"]) or self._create_workload(rtype, obj)
            self._admit(rtype, obj, workload, used)

    def _create_workload(self, rtype: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        digest = hashlib.sha1(f"{rtype.kind}{rtype.group}{meta['name']}{meta['uid']}".encode()).hexdigest()[:5]
        return self._store.create(WORKLOADS, meta["namespace"], {"metadata": {
            "name": f"{rtype.kind.lower()}-{meta['name']}-{digest}", "labels": {JOB_UID_LABEL: meta["uid"]},
            "ownerReferences": [_owner(obj)]},
            "spec": {"queueName": meta["labels"][QUEUE_LABEL], "active": True}})

    def _admit(self, rtype: ResourceType, obj: Obj, workload: Obj, used: dict[str, Decimal]) -> None:
        meta = obj["metadata"]
        status = copy.deepcopy(workload.get("status") or {})
        finished = _job_finished(obj) if rtype is JOBS else (
            "Complete" if true_condition(obj.get("status"), "Completed")
            else "Failed" if true_condition(obj.get("status"), "Failed") else None)
        suspended = bool(obj["spec"].get("suspend"))
        if finished:
            set_condition(status, condition("Finished", True, "Succeeded" if finished == "Complete" else "Failed",
                                            f"the {rtype.kind} finished"))
        elif true_condition(workload.get("status"), "Admitted"):
            if suspended and workload["spec"].get("active", True):  # Kueue starts an admitted job again
                self._store.update(rtype, meta["namespace"], meta["name"], lambda o: o["spec"].update(suspend=False))
        elif suspended:
            queue = meta["labels"][QUEUE_LABEL]
            need = _cpus(rtype, obj)
            quota = self.kueue_queues.get(queue, 0)
            if not any(local["metadata"]["name"] == queue for local in self._store.list(LOCAL_QUEUES, meta["namespace"])[0]):
                set_condition(status, condition("QuotaReserved", False, "Inadmissible",
                                                f"LocalQueue {queue} doesn't exist"))
            elif used.get(queue, Decimal(0)) + need > Decimal(str(quota)):
                more = used.get(queue, Decimal(0)) + need - Decimal(str(quota))
                set_condition(status, condition("QuotaReserved", False, "Pending", (
                    f"couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
                    f"default-flavor, {more} more needed")))
            else:
                used[queue] = used.get(queue, Decimal(0)) + need
                set_condition(status, condition("QuotaReserved", True, "QuotaReserved", f"Quota reserved in {queue}"))
                set_condition(status, condition("Admitted", True, "Admitted", "The workload is admitted"))
                self._store.update(rtype, meta["namespace"], meta["name"], lambda o: o["spec"].update(suspend=False))
        self._write_status(WORKLOADS, workload, status)


def _cpus(rtype: ResourceType, obj: Obj) -> Decimal:
    """The CPUs every pod of a Job (parallelism x its template's) or a JobSet requests."""
    jobs = [obj["spec"]] if rtype is JOBS else [
        replicated["template"]["spec"] for replicated in obj["spec"]["replicatedJobs"]
        for _ in range(int(replicated.get("replicas", 1)))]
    return sum((pod_requests({"spec": job["template"]["spec"]}).get("cpu", Decimal(0)) * int(job.get("parallelism", 1))
                for job in jobs), Decimal(0))


def _exit_code(pod: Obj) -> int | None:
    """The first terminated container's exit code, as Volcano reads a failed pod's."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is not None:
            return int(terminated.get("exitCode", 0))
    return None

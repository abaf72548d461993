"""The thin layer over the docker SDK: connecting, creating a job, reading and ending it.

Every engine error a user can act on becomes an ``EngineError`` (or ``InvalidArgumentError``
for what the user asked for) naming the engine and what to do. Works with Docker and with
Podman's Docker-compatible API; where they differ (GPUs through CDI names), it says so.
"""

from __future__ import annotations

import io
import os
import re
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from torchx_ext.errors import EngineError, InvalidArgumentError
from torchx_ext.schedulers.common.states import JobEnd
from torchx_ext.schedulers.images.client import connect_client, engine_call, explanation
from torchx_ext.schedulers.docker.view import ContainerView, end_from_labels, end_labels, engine_time
from torchx_ext.schedulers.docker.request import (
    HEALTH_INTERVAL_S,
    HEALTH_PROBE_TIMEOUT_S,
    HEALTH_RETRIES,
    HEALTH_START_PERIOD_S,
    LABEL_APP_ID,
    LABEL_SCHEDULER,
    SCHEDULER,
    ContainerRequest,
    DockerJobRequest,
)

LABEL_RESTART_OF = "torchx_ext.restart_of"
LABEL_RESTARTS = "torchx_ext.restarts"
LABEL_RESTART_CAUSE = "torchx_ext.restart_cause"
LABEL_CLAIM = "torchx_ext.claim"
LABEL_KILLED = "torchx_ext.killed"
LABEL_KILL_CAUSE = "torchx_ext.kill_cause"
APP_KEY = "*"
"""The restart records' key for a restart of the whole app (a replica's is ``role/id``)."""
APP_RESTART_WINDOW_S = 120.0
"""A restart of the whole app not done after this long was left half done (its restarter ended)."""


def end_volume_name(app_id: str) -> str:
    return f"{app_id}-end"


@dataclass
class Engine:
    client: Any
    """A docker.DockerClient."""
    host: str
    podman: bool

    # --- reading -------------------------------------------------------------------------

    def containers(self, app_id: str | None = None) -> list[tuple[ContainerView, Any]]:
        """Our containers (of one app, or all), with their engine objects: one list call and
        one inspect per container."""
        label = f"{LABEL_APP_ID}={app_id}" if app_id else f"{LABEL_SCHEDULER}={SCHEDULER}"
        # ignore_removed: a container deleted between the listing and its inspection is gone.
        found = self._call(lambda: self.client.containers.list(all=True, filters={"label": label}, ignore_removed=True),
                           "list containers")
        return [(ContainerView.from_inspect(container.attrs), container) for container in found]

    def next_event(self, app_id: str, since_ns: int, until_ns: int) -> int | None:
        """The time (unix nanoseconds) of the first event of ``app_id``'s containers (created,
        started, died, removed, health, pause) at or after ``since_ns``, waiting for one until
        ``until_ns``; None if none came."""
        events = self._call(lambda: self.client.events(
            decode=True, since=_engine_time(since_ns), until=_engine_time(until_ns),
            filters={"type": "container", "label": f"{LABEL_APP_ID}={app_id}",
                     "event": ["create", "start", "die", "destroy", "health_status", "pause", "unpause"]}),
            "follow events")
        try:
            for event in events:
                return int(event.get("timeNano") or time.time_ns())
            return None
        except Exception:  # the stream broke (the engine restarted): whatever changed, read it
            return time.time_ns()
        finally:
            events.close()

    def ends(self, app_id: str | None = None) -> dict[str, JobEnd]:
        """The recorded end of each app (or of one), by app id."""
        label = f"{LABEL_APP_ID}={app_id}" if app_id else f"{LABEL_SCHEDULER}={SCHEDULER}"
        volumes = self._call(lambda: self.client.volumes.list(filters={"label": label}), "list volumes")
        ends = {}
        for volume in volumes:
            labels = volume.attrs.get("Labels") or {}
            end = end_from_labels(labels)
            if end is not None and labels.get(LABEL_APP_ID):
                ends[labels[LABEL_APP_ID]] = end
        return ends

    def restart_app(self, app_id: str, restarts: int, cause: str, containers: list[Any], grace_s: int) -> bool:
        """Stop every container of the app and start them all again, as its restart number
        ``restarts``; False (nothing done) when another process claimed that restart first. Its
        record says ``restarting`` until every container has started again (``app_restart``)."""
        token = f"{os.getpid()}-{time.monotonic_ns()}"
        name = f"{app_id}-restart-app-{restarts}"
        labels = {LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: app_id, LABEL_RESTART_OF: APP_KEY,
                  LABEL_RESTARTS: str(restarts), LABEL_RESTART_CAUSE: cause, LABEL_CLAIM: token}
        claimed = self._call(lambda: self.client.volumes.create(name=name, labels=labels), "record an app restart")
        if (claimed.attrs.get("Labels") or {}).get(LABEL_CLAIM) != token:
            return False  # the first writer of the name restarts it
        self.stop([container for container in containers if container.status in ("running", "restarting", "paused")],
                  grace_s)
        for container in containers:
            self._call(container.start, "restart the app")
        self._call(lambda: self.client.volumes.create(name=f"{name}-started", labels={
            LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: app_id, LABEL_RESTART_OF: f"{APP_KEY}started"}),
            "record an app restart")
        return True

    def app_restart(self, app_id: str) -> tuple[int, bool]:
        """(restarts of the whole app so far, whether the last is still under way: claimed less
        than ``APP_RESTART_WINDOW_S`` ago, its containers not all started again yet)."""
        volumes = self._call(lambda: self.client.volumes.list(filters={"label": f"{LABEL_APP_ID}={app_id}"}),
                             "list volumes")
        claims: dict[str, float] = {}
        started = set()
        for volume in volumes:
            labels = volume.attrs.get("Labels") or {}
            if labels.get(LABEL_RESTART_OF) == APP_KEY and labels.get(LABEL_RESTARTS, "").isdigit():
                claims[volume.name] = engine_time(volume.attrs.get("CreatedAt")) or time.time()
            elif labels.get(LABEL_RESTART_OF) == f"{APP_KEY}started":
                started.add(volume.name.removesuffix("-started"))
        if not claims:
            return 0, False
        last = max(claims, key=lambda name: int(name.rsplit("-", 1)[1]))
        pending = last not in started and time.time() - claims[last] < APP_RESTART_WINDOW_S
        return int(last.rsplit("-", 1)[1]), pending

    def our_restarts(self, app_id: str) -> tuple[dict[str, int], str]:
        """Per replica (``role/id``): its restarts up to the last start we made (``restart``);
        and what made our last start."""
        volumes = self._call(lambda: self.client.volumes.list(filters={"label": f"{LABEL_RESTART_OF}"}),
                             "list volumes")
        counts: dict[str, int] = {}
        latest = ("", "")
        for volume in volumes:
            labels = volume.attrs.get("Labels") or {}
            if labels.get(LABEL_APP_ID) == app_id and labels.get(LABEL_RESTARTS, "").isdigit():
                key = labels[LABEL_RESTART_OF]
                counts[key] = max(counts.get(key, 0), int(labels[LABEL_RESTARTS]))
                latest = max(latest, (str(volume.attrs.get("CreatedAt") or ""), labels.get(LABEL_RESTART_CAUSE, "")))
        return counts, latest[1]

    def restart(self, app_id: str, key: str, container: Any, restarts: int, max_retries: int, cause: str) -> None:
        """Start a replica the engine will not restart (a ``docker kill`` counts as stopped by
        hand) as its restart number ``restarts``. A start by hand resets the engine's restart
        count and policy, so the count is kept in a volume's labels (the first writer of a name
        wins, as for the end) and the policy is left the retries that remain."""
        labels = {LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: app_id, LABEL_RESTART_OF: key, LABEL_RESTARTS: str(restarts),
                  LABEL_RESTART_CAUSE: cause}
        name = _record_name(app_id, "restart", key, restarts)
        remaining = max(0, max_retries - restarts)
        policy = {"Name": "on-failure", "MaximumRetryCount": remaining} if remaining else {"Name": "no"}
        self._call(lambda: container.update(restart_policy=policy), "update the restart policy")
        # Started before the count is recorded: a reader in between (describe in another process)
        # must not see the container exited with its retries used up, which is failed for good.
        self._call(container.start, f"restart {key}")
        self._call(lambda: self.client.volumes.create(name=name, labels=labels), "record a restart")

    def kill_for(self, app_id: str, key: str, restarts: int, container: Any, why: str) -> None:
        """SIGKILL a replica on its restart number ``restarts`` for a reason its exit code does
        not tell (frozen), recorded before the kill: whichever process (the watcher, a describe)
        then sees it exited with 137 restarts or fails it saying why (``kill_causes``)."""
        name = _record_name(app_id, "killed", key, restarts)
        labels = {LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: app_id, LABEL_KILLED: key, LABEL_RESTARTS: str(restarts),
                  LABEL_KILL_CAUSE: why}
        self._call(lambda: self.client.volumes.create(name=name, labels=labels), "record a kill")
        self.kill_and_wait(container)

    def kill_causes(self, app_id: str) -> dict[tuple[str, int], str]:
        """Why we killed a replica (``kill_for``), by its key and the restart number it was on."""
        volumes = self._call(lambda: self.client.volumes.list(filters={"label": f"{LABEL_APP_ID}={app_id}"}),
                             "list volumes")
        causes = {}
        for volume in volumes:
            labels = volume.attrs.get("Labels") or {}
            if labels.get(LABEL_KILLED) and labels.get(LABEL_RESTARTS, "").isdigit():
                causes[(labels[LABEL_KILLED], int(labels[LABEL_RESTARTS]))] = labels.get(LABEL_KILL_CAUSE, "")
        return causes

    def read_file(self, container: Any, path: str, limit: int = 1 << 20) -> bytes | None:
        """A file from a container, running or stopped; None when it has none there."""
        import docker.errors

        try:
            chunks, _ = container.get_archive(path)
            data = b"".join(chunks)
        except docker.errors.APIError:
            return None
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            member = next((item for item in archive.getmembers() if item.isfile()), None)
            extracted = archive.extractfile(member) if member is not None else None
            return extracted.read(limit) if extracted is not None else None

    def failed_probe(self, container: Any) -> str | None:
        """What the container's last HEALTHCHECK probe printed when it failed; None when it passed
        (an unpaused container stays unhealthy until its next probe, though nothing failed)."""
        log = ((container.attrs.get("State") or {}).get("Health") or {}).get("Log") or []
        if not log or log[-1].get("ExitCode") == 0:
            return None
        return str(log[-1].get("Output", "")).strip() or "unhealthy"

    def stderr_tail(self, container: Any, lines: int = 5) -> str:
        import docker.errors

        try:
            data: bytes = self.client.api.logs(container.id, stdout=False, stderr=True, tail=lines)
        except docker.errors.APIError:
            return ""
        return " | ".join(line for line in data.decode(errors="replace").splitlines() if line.strip())

    # --- changing ------------------------------------------------------------------------

    def kill_and_wait(self, container: Any, timeout_s: float = 30) -> None:
        """SIGKILL a container (a paused one too: the engine thaws it after the signal) and wait
        until it has exited."""
        import docker.errors

        try:
            container.kill()
            container.wait(timeout=timeout_s)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as error:
            if "is not running" not in str(error):
                raise self._error(f"kill {container.name}", error) from error

    def record_end(self, app_id: str, end: JobEnd) -> JobEnd:
        """Record ``end`` unless an end is recorded already; returns the one that stands.
        Creating a volume under an existing name gives back the existing one (the engine's
        answer to a race between a cancel and a failure), so the first writer wins."""
        labels = {LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: app_id, **end_labels(end)}
        volume = self._call(lambda: self.client.volumes.create(name=end_volume_name(app_id), labels=labels),
                            "record the end of the job")
        return end_from_labels(volume.attrs.get("Labels") or {}) or end

    def ensure_images(self, images: tuple[str, ...]) -> dict[str, str]:
        """Every image on the engine, pulled if missing, by its id; else an error saying what to do."""
        import docker.errors

        ids = {}
        for image in images:
            try:
                ids[image] = self.client.images.get(image).id
                continue
            except docker.errors.ImageNotFound:
                pass
            except docker.errors.APIError as error:
                raise self._error(f"look up image {image!r}", error) from None
            try:
                ids[image] = self.client.images.pull(image).id
            except docker.errors.APIError as error:
                raise InvalidArgumentError(
                    f"image {image!r} is not on the engine at {self.host} and pulling it failed "
                    f"({explanation(error)}): build it there (`docker build -t {image} .`), load it "
                    "(`docker load`), or make its registry reachable"
                ) from None
        return ids

    def create_job(self, request: DockerJobRequest, image_ids: dict[str, str] | None = None) -> None:
        """The job's network and every container, created but not started; on any error
        what was created is removed again, so a refused job leaves nothing behind."""
        import docker.errors

        created: list[Any] = []
        network = None
        try:
            network = self.client.networks.create(
                request.network, driver="bridge", check_duplicate=True,
                labels={LABEL_SCHEDULER: SCHEDULER, LABEL_APP_ID: request.app_id},
            )
            for container in request.containers:
                kwargs = self._create_kwargs(container, request.network)
                if self.podman and image_ids and container.image in image_ids:
                    # Podman's Docker API finds `name:tag` in its own store (as localhost/name)
                    # but creates containers from docker.io/library/name: give it the id.
                    kwargs["image"] = image_ids[container.image]
                created.append(self.client.containers.create(**kwargs))
        except docker.errors.APIError as error:
            for container in created:
                _quietly(lambda: container.remove(force=True, v=True))
            if network is not None:
                _quietly(network.remove)
            raise self._creation_error(request, error) from None

    def start_job(self, request: DockerJobRequest) -> None:
        """Every container at once: a start is a round trip to the runtime (~0.3 s each here)."""
        import docker.errors

        def start(name: str) -> Exception | None:
            try:
                self.client.api.start(name)
            except docker.errors.APIError as error:
                return self._creation_error(request, error, starting=name)
            return None

        names = [container.name for container in request.containers]
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(names)))) as pool:
            errors = [error for error in pool.map(start, names) if error is not None]
        if errors:
            raise errors[0]

    def stop(self, containers: list[Any], grace_s: int) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``, every container at once."""
        import docker.errors

        def stop(container: Any) -> None:
            try:
                container.stop(timeout=grace_s)
            except docker.errors.NotFound:
                pass
        with ThreadPoolExecutor(max_workers=max(1, min(16, len(containers)))) as pool:
            list(pool.map(stop, containers))

    def remove_job(self, app_id: str) -> None:
        """The job's containers (with their anonymous volumes), network and end record."""
        import docker.errors

        for _, container in self.containers(app_id):
            _remove_container(container)
        for network in self._call(lambda: self.client.networks.list(filters={"label": f"{LABEL_APP_ID}={app_id}"}),
                                  "list networks"):
            _quietly(network.remove)
        try:
            self.client.volumes.get(end_volume_name(app_id)).remove(force=True)
        except docker.errors.NotFound:
            pass
        for volume in self._call(lambda: self.client.volumes.list(filters={"label": f"{LABEL_APP_ID}={app_id}"}),
                                 "list volumes"):
            _quietly(lambda: volume.remove(force=True))  # restart records

    # --- helpers -------------------------------------------------------------------------

    def _create_kwargs(self, container: ContainerRequest, network: str) -> dict[str, Any]:
        import docker.types

        kwargs: dict[str, Any] = {
            "image": container.image,
            "entrypoint": list(container.command[:1]),
            "command": list(container.command[1:]),
            "name": container.name,
            "hostname": container.name,
            "environment": dict(container.env),
            "labels": container.labels_on_engine(),
            "network": network,
            # An init as PID 1 forwards SIGTERM to the launcher and reaps orphaned grandchildren.
            "init": True,
            "shm_size": f"{container.shm_mb}m",
            "mounts": [
                docker.types.Mount(mount.target, mount.source, type=mount.kind, read_only=mount.read_only)
                for mount in container.mounts if mount.kind in ("bind", "volume")
            ],
            "devices": [f"{mount.source}:{mount.target}:{mount.permissions}"
                        for mount in container.mounts if mount.kind == "device"],
        }
        if container.cpuset_cpus is not None:
            kwargs["cpuset_cpus"] = container.cpuset_cpus
        if container.cpuset_mems is not None:
            kwargs["cpuset_mems"] = container.cpuset_mems
        if container.memory_mb is not None:
            kwargs["mem_limit"] = f"{container.memory_mb}m"
            kwargs["memswap_limit"] = f"{container.memory_mb}m"  # the limit is the limit: no swap on top
        if container.nano_cpus is not None:
            kwargs["nano_cpus"] = container.nano_cpus
        if container.health_probe:
            second = 1_000_000_000  # the engine counts in nanoseconds
            kwargs["healthcheck"] = {
                "test": ["CMD", *container.health_probe], "interval": HEALTH_INTERVAL_S * second,
                "timeout": HEALTH_PROBE_TIMEOUT_S * second, "retries": HEALTH_RETRIES,
                "start_period": HEALTH_START_PERIOD_S * second,
            }
        if container.privileged:
            kwargs["privileged"] = True
        if container.policy.max_retries > 0 and not container.whole_app:
            kwargs["restart_policy"] = {"Name": "on-failure", "MaximumRetryCount": container.policy.max_retries}
        if container.gpus and container.gpu_vendor == "amd":
            kwargs["devices"] += ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
        elif container.gpus and self.podman:
            # Podman has no device requests; its GPUs are CDI devices (nvidia-ctk cdi generate).
            kwargs["devices"] += [f"nvidia.com/gpu={gpu}" for gpu in container.gpus]
        elif container.gpus:
            kwargs["device_requests"] = [docker.types.DeviceRequest(
                driver="nvidia", device_ids=[str(gpu) for gpu in container.gpus], capabilities=[["gpu"]])]
        return kwargs

    def _creation_error(self, request: DockerJobRequest, error: Any, starting: str | None = None) -> Exception:
        text = explanation(error)
        status = getattr(error, "status_code", None)
        # Docker answers a taken name with 409, Podman with 500 and "already in use".
        if status == 409 or "already in use" in text:
            return InvalidArgumentError(
                f"name conflict on the engine at {self.host}: {text}; app {request.app_id!r} was not started "
                "(remove the other container or network, or run again for a new app id)"
            )
        lowered = text.lower()
        if "cpuset" in lowered or "cpus" in lowered and "available" in lowered:
            return EngineError(
                f"the engine at {self.host} refused a replica's cpuset ({text}): the CPUs or NUMA nodes "
                "must exist and be allowed to its cgroup (rootless Podman needs the cpuset controller delegated); "
                "or run with -cfg slice_replicas=False"
            )
        if "device" in lowered or "gpu" in lowered:
            return EngineError(
                f"the engine at {self.host} refused a replica's devices ({text}): install the NVIDIA "
                "Container Toolkit (Docker) or generate CDI specs (Podman: nvidia-ctk cdi generate)"
            )
        if "container-init" in lowered or "catatonit" in lowered or "docker-init" in lowered:
            return EngineError(
                f"the engine at {self.host} has no init for the containers' PID 1 ({text}): install it "
                "(Podman: the catatonit package; Docker: docker-init, part of its packages)"
            )
        what = f"start container {starting}" if starting else f"create app {request.app_id}"
        return self._error(what, error)

    def _call(self, call: Any, what: str) -> Any:
        return engine_call(call, self.host, what)

    def _error(self, what: str, error: Any) -> EngineError:
        return EngineError(f"the engine at {self.host} could not {what}: {explanation(error)}")


def _engine_time(unix_ns: int) -> str:
    # The API's timestamps are seconds and nanoseconds, not a decimal fraction (and a float of
    # unix seconds cannot hold nanoseconds).
    return f"{unix_ns // 10**9}.{unix_ns % 10**9:09d}"


def connect() -> Engine:
    """The engine ``DOCKER_HOST`` names, answering; else an EngineError naming how to start one."""
    return Engine(*connect_client())


def _remove_container(container: Any, attempts: int = 10, pause_s: float = 0.3) -> None:
    """Force-removes a container, again a few times: right after a start the runtime refused, the
    engine may still be unmounting its binds, and refuses the removal meanwhile ("read-only file
    system", seen with vfs storage)."""
    import docker.errors

    for attempt in range(attempts):
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except Exception:  # the engine's APIError, or its connection's: tried again, then left
            if attempt + 1 < attempts:
                time.sleep(pause_s)


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception:  # cleaning up after a failure: the first error is the one to report
        pass


def _record_name(app_id: str, kind: str, key: str, restarts: int) -> str:
    """A record volume's name: one per (replica, restart number), so the first writer keeps it."""
    return f"{app_id}-{kind}-{re.sub(r'[^A-Za-z0-9_.-]', '-', key)}-{restarts}"

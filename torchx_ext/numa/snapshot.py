"""Copy the sysfs files read_topology reads into a directory: a fixture of a real machine.

``python -m torchx_ext.numa snapshot DEST`` on any host gives a tree that
``--sysfs-root DEST`` plans against anywhere else. Its ``torchx_ext-snapshot.json`` names the
host: a launcher given the tree plans for that host's CPUs, and says so.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from torchx_ext.errors import TopologyError, TorchxExtError
from torchx_ext.numa.topology import SNAPSHOT_MARK


def snapshot_sysfs(destination: str | os.PathLike[str], sysfs_root: str | os.PathLike[str] = "/sys") -> int:
    """Copy the topology files under ``sysfs_root`` into ``destination``; returns the file count."""
    source = Path(sysfs_root)
    if not (source / "devices/system/cpu").is_dir():
        raise TopologyError(f"{source} has no devices/system/cpu: is it a sysfs root?")
    target = Path(destination)
    copied = 0
    for relative in _topology_files(source):
        try:
            text = (source / relative).read_text()
        except OSError:
            continue  # absent on this kernel, or unreadable: the reader copes with both
        try:
            (target / relative).parent.mkdir(parents=True, exist_ok=True)
            (target / relative).write_text(text)
        except OSError as error:
            raise TorchxExtError(f"cannot write the snapshot under {target}: {error}") from error
        copied += 1
    mark = {"host": socket.gethostname(), "taken": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    try:
        text = (source / SNAPSHOT_MARK).read_text()  # a snapshot's copy shows the same host
    except OSError:
        text = json.dumps(mark) + "\n"
    try:
        (target / SNAPSHOT_MARK).write_text(text)
    except OSError as error:
        raise TorchxExtError(f"cannot write the snapshot under {target}: {error}") from error
    return copied


def _topology_files(source: Path) -> Iterator[str]:
    cpu = "devices/system/cpu"
    yield from (f"{cpu}/{name}" for name in ("online", "possible", "present", "offline"))
    for name in _numbered(source / cpu, "cpu"):
        yield f"{cpu}/{name}/online"
        for fact in ("physical_package_id", "core_id", "thread_siblings_list"):
            yield f"{cpu}/{name}/topology/{fact}"
        for index in _numbered(source / cpu / name / "cache", "index"):
            for fact in ("level", "type", "shared_cpu_list"):
                yield f"{cpu}/{name}/cache/{index}/{fact}"
    node = "devices/system/node"
    yield from (f"{node}/{name}" for name in ("online", "possible", "has_cpu"))
    for name in _numbered(source / node, "node"):
        yield f"{node}/{name}/cpulist"
        yield f"{node}/{name}/distance"
    pci = source / "bus/pci/devices"
    for address in _numbered(pci, ""):
        for fact in ("class", "vendor", "numa_node"):
            yield f"bus/pci/devices/{address}/{fact}"


def _numbered(directory: Path, prefix: str) -> list[str]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    if not prefix:
        return sorted(names)
    return sorted(name for name in names if name.startswith(prefix) and name[len(prefix):].isdecimal())

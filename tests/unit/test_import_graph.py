"""The package's layering, read from its source: no import cycle (imports inside functions
included) and nothing below the schedulers importing them.

An edge is every ``import`` and ``from ... import`` of a ``torchx_ext`` module, wherever it
stands in a file; ``from package import name`` counts as an import of ``package.name`` when that
is a module, else of ``package``. A package's ``__init__`` running before its submodules is
Python's doing, not an edge.
"""

from __future__ import annotations

import ast
from pathlib import Path

from torchx_ext.schedulers.backends import BACKENDS

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "torchx_ext"
# The layers below the schedulers: what they import must never need a scheduler.
BELOW_SCHEDULERS = ("torchx_ext.launcher", "torchx_ext.numa", "torchx_ext.error_file", "torchx_ext.replica_env",
                    "torchx_ext.options", "torchx_ext.errors", "torchx_ext.escaping", "torchx_ext.exit_codes",
                    "torchx_ext.liveness")


def module_files() -> dict[str, Path]:
    found = {}
    for path in PACKAGE_ROOT.rglob("*.py"):
        parts = path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports_of(name: str, path: Path, modules: set[str]) -> set[str]:
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_the_source() -> None:
    graph = import_graph()
    # Known edges, one of each kind: top-level, inside a function, relative-free from-import.
    assert "torchx_ext.numa.topology" in graph["torchx_ext.schedulers.placement"]
    assert "torchx_ext.schedulers.kubernetes.scheduler" in graph["torchx_ext.schedulers.kubernetes"]
    assert "torchx_ext.schedulers.kubernetes.names" in graph["torchx_ext.schedulers.kubernetes.request"]


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_torchx_ext_has_no_import_cycle() -> None:
    assert cycles(import_graph()) == []


def test_nothing_below_the_schedulers_imports_them() -> None:
    graph = import_graph()
    offending = {
        module: sorted(target for target in targets if target.startswith("torchx_ext.schedulers"))
        for module, targets in graph.items()
        if module.startswith(BELOW_SCHEDULERS)
    }
    assert {module: targets for module, targets in offending.items() if targets} == {}


def test_no_scheduler_imports_the_launcher_what_they_share_is_a_contract_of_its_own() -> None:
    # The liveness file (torchx_ext.liveness), the replica's variables (replica_env), the error
    # report (error_file): a scheduler reads these without the launcher's threads and torch's agent.
    graph = import_graph()
    crossing = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                      if module.startswith("torchx_ext.schedulers") and target.startswith("torchx_ext.launcher"))
    assert crossing == []


def test_no_backend_imports_another_and_what_they_share_imports_none() -> None:
    graph = import_graph()
    backends = [backend.package for backend in BACKENDS]

    def owner(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if len(parts) > 2 and parts[:2] == ["torchx_ext", "schedulers"] else None

    crossing = sorted(f"{module} -> {target}" for module, targets in graph.items() for target in targets
                      if owner(module) != owner(target) and owner(target) in backends
                      and owner(module) is not None)
    assert crossing == []


# What reads a torchx Role's policy (common/role_policy.py); a RolePolicy's own questions do not.
ROLE_POLICY_READERS = {"policy_of", "policies_of", "has_spares", "min_replicas_of", "retry_policy_of"}


def test_each_backend_reads_its_roles_policies_once_in_its_request_builder_and_hands_them_on() -> None:
    # One place per backend decides what a role's retry policy and replica counts mean; the
    # builders, the view and the step programs get the RolePolicy it made (or read it back from
    # the job's record, label or annotation), never the torchx Role's fields again.
    calls: dict[str, int] = {}
    for backend in BACKENDS:
        for path in sorted((PACKAGE_ROOT / "schedulers" / backend.package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Call):
                    name = getattr(node.func, "id", getattr(node.func, "attr", ""))
                    if name in ROLE_POLICY_READERS:
                        where = str(path.relative_to(PACKAGE_ROOT / "schedulers"))
                        calls[where] = calls.get(where, 0) + 1
    # The dry-run: request.py, or build.py where the request is read back on the node (stdlib only).
    builders = {f"{backend.package}/{'build' if (PACKAGE_ROOT / 'schedulers' / backend.package / 'build.py').exists() else 'request'}.py": 1
                for backend in BACKENDS}
    assert calls == builders

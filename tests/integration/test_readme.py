"""The README, docs/ and CONTRIBUTING.md against the installed CLI, as a reader copies from them.

Every ``torchx ...``, ``torchx-ext-run ...``, ``torchx-ext-numa ...`` and ``python -m
torchx_ext...`` line in their code blocks (fenced or indented) may use only subcommands, flags,
``-cfg`` keys, named resources, schedulers and values that the installed CLI has; paths into the
checkout that a command names exist; links lead to files (and headings) that exist. Nothing runs
but ``--help`` and ``torchx runopts``, each once per distinct program, subcommand, scheduler or
component. A line with a placeholder (``HANDLE``, ``SCHEDULER``, ``status|cancel``) is checked as
far as it is not one.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from torchx import specs
from torchx.util.types import to_dict

from tests.helpers import TORCHX, torchx
from torchx_ext.components.dist import parse_j
from torchx_ext.errors import InvalidArgumentError
from torchx_ext.options import check_mode, parse_omp_threads
from torchx_ext.resources import HOSTS

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
# The console scripts a reader types, as this interpreter's environment installed them (the torchx
# CLI is tests.helpers.TORCHX).
LAUNCHER = [str(Path(sys.executable).parent / "torchx-ext-run")]
NUMA = [str(Path(sys.executable).parent / "torchx-ext-numa")]
# Paths into the checkout that a command may name.
CHECKOUT_DIRS = ("scripts/", "examples/", "tests/", "docs/", "torchx_ext/")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*|\.\.\.")
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=\S*")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


# --- the pages' code blocks and the commands in them ---------------------------------------


@dataclass(frozen=True)
class Command:
    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}: {self.text}"


def code_lines(page: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line inside a fenced or an indented code block."""
    fenced = False
    indented = False
    previous_blank = True
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
        elif fenced:
            yield number, line
        elif line.startswith("    ") and stripped and (previous_blank or indented):
            indented = True
            yield number, line
        elif stripped:
            indented = False
        previous_blank = not stripped


def commands(page: Path) -> list[Command]:
    """The command lines of ``page`` (continuation lines joined), whatever program they run."""
    found: list[Command] = []
    pending: tuple[int, str] | None = None
    for number, line in code_lines(page):
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        if pending is not None:
            number, text = pending[0], f"{pending[1]} {text}"
            pending = None
        if text.endswith("\\"):
            pending = (number, text[:-1].rstrip())
            continue
        if program_of(text.split()) is not None:
            found.append(Command(page, number, text))
    return found


def without_env(words: list[str]) -> list[str]:
    while words and ENV_ASSIGNMENT.fullmatch(words[0]):
        words = words[1:]
    return words


def program_of(words: list[str]) -> str | None:
    """Which CLI a command line runs ("torchx", "launcher", "numa", "module", "path"), or None."""
    words = without_env(words)
    if not words:
        return None
    name = Path(words[0]).name
    if name == "torchx":
        return "torchx"
    if name == "torchx-ext-run":
        return "launcher"
    if name == "torchx-ext-numa":
        return "numa"
    python = re.fullmatch(r"python3?(\.\d+)?", name) is not None
    if python and words[1:2] == ["-m"] and len(words) > 2:
        module = words[2]
        if module == "torchx_ext.launcher":
            return "launcher"
        if module == "torchx_ext.numa":
            return "numa"
        if module.startswith("torchx_ext"):
            return "module"
    if python or name in ("bash", "sh") or (words[0].startswith("scripts/") and name.endswith((".sh", ".py"))):
        return "path" if any(word.startswith(CHECKOUT_DIRS) for word in words) else None
    return None


ALL_COMMANDS = [command for page in PAGES for command in commands(page)]


# --- the installed CLI, each answer read once -----------------------------------------------


@dataclass(frozen=True)
class Option:
    takes_value: bool
    choices: tuple[str, ...] | None


def run_help(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{shlex.join(argv)} exited {result.returncode}: {result.stderr}"
    return result.stdout


def parse_options(help_text: str) -> dict[str, Option]:
    """Every flag an argparse help lists (each spelling), whether it takes a value, its choices."""
    options: dict[str, Option] = {}
    for line in help_text.splitlines():
        if not re.match(r"  -\S", line):
            continue
        invocation = re.split(r" {2,}", line.strip(), maxsplit=1)[0]
        for form in invocation.split(", "):
            flag, _, metavar = form.partition(" ")
            choices = re.fullmatch(r"\{(.*)\}", metavar)
            options[flag] = Option(bool(metavar), tuple(choices.group(1).split(",")) if choices else None)
    return options


def subcommands(help_text: str) -> set[str]:
    found = re.search(r"\{([\w,-]+)\}", help_text)
    assert found, f"no subcommands in:\n{help_text}"
    return set(found.group(1).split(","))


@functools.cache
def torchx_subcommands() -> set[str]:
    return subcommands(run_help([*TORCHX, "--help"]))


@functools.cache
def torchx_options(subcommand: str) -> dict[str, Option]:
    return parse_options(run_help([*TORCHX, subcommand, "--help"]))


@functools.cache
def component_options(scheduler: str, component: str) -> dict[str, Option]:
    return parse_options(run_help([*TORCHX, "run", "-s", scheduler, component, "--help"]))


@functools.cache
def runopts(scheduler: str) -> set[str]:
    result = torchx("runopts", scheduler)
    assert result.returncode == 0, result.stderr
    return set(re.findall(r"^\s+(\w+)=[A-Z_]+ \(", result.stdout, flags=re.MULTILINE))


@functools.cache
def launcher_options() -> dict[str, Option]:
    return parse_options(run_help([*LAUNCHER, "--help"]))


@functools.cache
def numa_subcommands() -> set[str]:
    return subcommands(run_help([*NUMA, "--help"]))


@functools.cache
def numa_options(subcommand: str) -> dict[str, Option]:
    return parse_options(run_help([*NUMA, subcommand, "--help"]))


def known_resource(name: str) -> bool:
    try:
        specs.resource(h=name)  # as dist.ddp looks it up, on either torchx line
    except KeyError:
        return False
    return True


# --- checks ---------------------------------------------------------------------------------


def is_placeholder(value: str) -> bool:
    """``HANDLE``, ``N``, ``...``, or a synopsis' alternatives (``auto|N``)."""
    return "|" in value or PLACEHOLDER.fullmatch(value) is not None


def _refused(check: Callable[[str], object]) -> Callable[[str], bool]:
    def refused(value: str) -> bool:
        try:
            check(value)
        except InvalidArgumentError:
            return True
        return False

    return refused


# Values checked by the code that checks them for the CLI.
VALUE_REFUSED: dict[str, Callable[[str], bool]] = {
    "-j": _refused(parse_j),
    "--numa_binding": _refused(check_mode),
    "--numa-binding": _refused(check_mode),
    "--mode": _refused(check_mode),
    "--omp_threads": _refused(parse_omp_threads),
    "--omp-threads": _refused(parse_omp_threads),
}


@dataclass
class Parsed:
    values: dict[str, str]
    """The value given to each flag (by its spelling on the line)."""
    rest: list[str]
    """The words from the first positional on (or from ``--``, included)."""


def walk(words: list[str], options: dict[str, Option], what: str, problems: list[str],
         *, stop_at_positional: bool) -> Parsed:
    """Check each flag in ``words`` against ``options`` (synopsis brackets allowed)."""
    values: dict[str, str] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--":
            return Parsed(values, words[index:])
        bare = word.strip("[]")
        if not (bare.startswith("-") and len(bare) > 1 and not re.fullmatch(r"-\d.*", bare)):
            if stop_at_positional:
                return Parsed(values, words[index:])
            index += 1
            continue
        flag, inline, value = bare.partition("=")
        option = options.get(flag)
        index += 1
        if option is None:
            problems.append(f"{what} has no flag {flag} (its flags: {', '.join(sorted(options))})")
            continue
        if option.takes_value and not inline:
            if index >= len(words):
                problems.append(f"{what}: {flag} needs a value")
                break
            value = words[index].strip("[]")
            index += 1
        if not option.takes_value:
            continue
        values[flag] = value
        if is_placeholder(value):
            continue
        if option.choices is not None and value not in option.choices:
            problems.append(f"{what}: {flag} {value!r} is not one of {', '.join(option.choices)}")
        refused = VALUE_REFUSED.get(flag)
        if refused is not None and refused(value):
            problems.append(f"{what}: {flag} {value!r} is refused")
    return Parsed(values, [])


def check_torchx(words: list[str], problems: list[str]) -> None:
    if not words:
        return
    names = words[0].split("|")
    unknown = [name for name in names if name not in torchx_subcommands()]
    for name in unknown:
        problems.append(f"torchx has no subcommand {name!r} (it has {', '.join(sorted(torchx_subcommands()))})")
    if len(names) > 1 or unknown:
        return
    subcommand = words[0]
    options = torchx_options(subcommand)
    parsed = walk(words[1:], options, f"torchx {subcommand}", problems, stop_at_positional=subcommand == "run")
    if subcommand == "topo":
        host = parsed.values.get("-h")
        if host is not None and not is_placeholder(host) and host not in HOSTS:
            problems.append(f"torchx topo plans only on torchx_ext's named resources, not {host!r}")
    if subcommand != "run" or not parsed.rest or parsed.rest[0] == "--":
        return
    scheduler = parsed.values.get("-s", parsed.values.get("--scheduler", "local_cwd"))
    component = parsed.rest[0]
    if is_placeholder(scheduler) or is_placeholder(component) or scheduler not in (options["-s"].choices or ()):
        return  # an unknown scheduler is reported by walk()
    cfg = parsed.values.get("-cfg", parsed.values.get("--scheduler_args"))
    if cfg is not None:
        try:
            keys = set(to_dict(cfg))
        except ValueError as error:
            problems.append(f"-cfg {cfg!r} does not parse: {error}")
            keys = set()
        for key in sorted(keys - runopts(scheduler)):
            problems.append(f"scheduler {scheduler} has no -cfg option {key!r} (it has {', '.join(sorted(runopts(scheduler)))})")
    component_words = parsed.rest[1:]
    if "--" in component_words:
        component_words = component_words[: component_words.index("--")]
    given = walk(component_words, component_options(scheduler, component), component, problems,
                 stop_at_positional=False)
    host = given.values.get("-h", given.values.get("--h"))
    if host is not None and not is_placeholder(host) and not known_resource(host):
        problems.append(f"{component}: -h {host!r} is no named resource")


def check_numa(words: list[str], problems: list[str]) -> None:
    if not words or is_placeholder(words[0]):
        return
    if words[0] not in numa_subcommands():
        problems.append(f"python -m torchx_ext.numa has no subcommand {words[0]!r}")
        return
    walk(words[1:], numa_options(words[0]), f"torchx_ext.numa {words[0]}", problems, stop_at_positional=False)


def check_paths(words: list[str], problems: list[str]) -> None:
    for word in words:
        if word.startswith(CHECKOUT_DIRS):
            path = word.split("::")[0].rstrip("/")
            if not (REPO / path).exists():
                problems.append(f"{path} does not exist in the checkout")


def problems_of(command: Command) -> list[str]:
    problems: list[str] = []
    try:
        words = without_env(shlex.split(command.text, comments=True))
    except ValueError as error:
        return [f"not a shell line: {error}"]
    program = program_of(words)
    check_paths(words, problems)
    if program == "torchx":
        check_torchx(words[1:], problems)
    elif program == "launcher":
        args = words[3:] if words[1:2] == ["-m"] else words[1:]
        walk(args, launcher_options(), "torchx-ext-run", problems, stop_at_positional=True)
    elif program == "numa":
        check_numa(words[3:] if words[1:2] == ["-m"] else words[1:], problems)
    elif program == "module":
        module = words[2]
        if not (REPO / (module.replace(".", "/") + ".py")).is_file() and not (
            REPO / module.replace(".", "/") / "__main__.py"
        ).is_file():
            problems.append(f"no module {module} to run")
    return problems


@pytest.mark.parametrize("command", ALL_COMMANDS, ids=str)
def test_each_command_uses_only_what_the_cli_has(command: Command) -> None:
    problems = problems_of(command)
    assert not problems, "\n  ".join([str(command), *problems])


def test_the_pages_show_commands_of_every_program() -> None:
    """Guards the extraction itself: an empty list would pass every check above."""
    readme = [command for command in ALL_COMMANDS if command.page == README]
    assert len([c for c in readme if program_of(c.text.split()) == "torchx"]) >= 15
    programs = {program_of(command.text.split()) for command in ALL_COMMANDS}
    assert {"torchx", "launcher", "numa", "path"} <= programs


def test_a_flag_the_cli_lacks_is_found() -> None:
    """The checks catch what a stale page would say (the pages themselves are checked above)."""
    bogus = [
        "torchx run -s local_cwd dist.ddp -j 1x2 --no_such_flag 1 --script train.py",
        "torchx run -s local_cwd dist.spmd -j 2 --cpu 4 --script train.py",  # a dist.ddp parameter only
        "torchx run -s local_cwd dist.ddp --numa_binding nearest --script train.py",
        "torchx run -s local_cwd -cfg no_such_option=1 dist.ddp --script train.py",
        "torchx run -s no_such_scheduler dist.ddp --script train.py",
        "torchx run -s local_cwd dist.ddp -h no_such_host --script train.py",
        "torchx topo -j 2x4 -h gpu.small",
        "torchx no_such_subcommand local_cwd://torchx/train-abc123",
        "torchx log --since 10 local_cwd://torchx/train-abc123",
        "torchx-ext-run --numa-bind exclusive train.py",
        "python -m torchx_ext.numa plan --nproc-per-node 2 --numa-mode node",
        "bash scripts/no_such_script.sh",
    ]
    for text in bogus:
        assert problems_of(Command(README, 0, text)) != [], text
    assert problems_of(Command(README, 0, "torchx-ext-run --nproc-per-node 2 train.py --numa-bind x")) == []


# --- links and the README's lists -----------------------------------------------------------


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    fenced = False
    found: set[str] = set()
    for line in page.read_text().splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.add(slug(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    return [target for target in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(REPO)))
def test_links_lead_to_files_and_headings_that_exist(page: Path) -> None:
    for target in links(page):
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.relative_to(REPO)} links to {target}, which does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.relative_to(REPO)} links to {target}: no such heading"


def test_every_page_is_reached_from_the_readme() -> None:
    reached = {README.resolve()}
    todo = [README]
    while todo:
        page = todo.pop()
        for target in links(page):
            path = (page.parent / target.partition("#")[0]).resolve()
            if path.suffix == ".md" and path.exists() and path not in reached:
                reached.add(path)
                todo.append(path)
    assert {page.resolve() for page in PAGES} - reached == set()


def readme_section(title: str) -> str:
    text = README.read_text()
    start = text.index(title)
    end = text.find("\n#", start + len(title))
    return text[start:] if end < 0 else text[start:end]


def test_the_readme_lists_our_named_resources() -> None:
    section = readme_section("## Job size")
    rows = section[section.index("| `-h` |"):].split("\n\n")[0].splitlines()[2:]  # below the header
    assert {re.sub(r"^\| `([^`]+)` \|.*", r"\1", row) for row in rows} == set(HOSTS)


@pytest.mark.parametrize("scheduler, doc, section", [
    ("local_cwd", "local.md", "## `local_cwd`"), ("local_docker", "local.md", "## `local_docker`"),
    ("kubernetes", "kubernetes.md", "## Options"), ("slurm", "slurm.md", "## Options"),
])
def test_the_docs_list_each_schedulers_options(scheduler: str, doc: str, section: str) -> None:
    # The README names the doc (its sections stay short); the doc's section names every option.
    assert f"(docs/{doc})" in readme_section(f"### {scheduler}:")
    text = (README.parent / "docs" / doc).read_text()
    start = text.index(section)
    end = text.find("\n## ", start + len(section))
    named = set(re.findall(r"`([\w-]+)`", text[start:] if end < 0 else text[start:end]))
    assert runopts(scheduler) <= named, runopts(scheduler) - named

"""slurm's ``-cfg``: what each option becomes in the batch script, checked before anything is
written or queued. Values Slurm itself must judge (does the partition exist?) are judged by
``sbatch``, whose refusal is reported in one line with nothing queued.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any, List, Optional, TypedDict

from torchx.specs import Resource, runopts

from torchx_ext.errors import InvalidArgumentError
from torchx_ext.resources import GPU_TYPE

TIME_FORMS = "MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS[:MINUTES[:SECONDS]] or UNLIMITED"
_TIME = re.compile(r"\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE", re.IGNORECASE)
MAIL_TYPES = ("NONE", "BEGIN", "END", "FAIL", "REQUEUE", "ALL", "INVALID_DEPEND", "STAGE_OUT", "TIME_LIMIT",
              "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "ARRAY_TASKS")
# The batch script sets these itself: given again, the job would not be the one we track.
OWN_SBATCH_OPTIONS = frozenset({
    "--nodes", "-N", "--ntasks", "-n", "--ntasks-per-node", "--cpus-per-task", "-c", "--mem", "--output", "-o",
    "--error", "-e", "--open-mode", "--job-name", "-J", "--chdir", "-D", "--parsable", "--wrap", "--hold", "-H",
    "--array", "-a",
})
# -cfg name -> sbatch option, in the order they are written.
SBATCH_OPTION_OF = {
    "partition": "--partition",
    "time": "--time",
    "account": "--account",
    "qos": "--qos",
    "constraint": "--constraint",
    "nodelist": "--nodelist",
    "exclude": "--exclude",
    "reservation": "--reservation",
    "comment": "--comment",
    "mail-user": "--mail-user",
    "mail-type": "--mail-type",
}
# torchx spells these with a hyphen; ours were spelt with an underscore first. Either is read.
ALIASES = {"mail-user": "mail_user", "mail-type": "mail_type"}


class SlurmOpts(TypedDict, total=False):
    partition: Optional[str]
    time: Optional[str]
    account: Optional[str]
    qos: Optional[str]
    constraint: Optional[str]
    nodelist: Optional[str]
    exclude: Optional[str]
    reservation: Optional[str]
    comment: Optional[str]
    mail_user: Optional[str]
    mail_type: Optional[str]
    exclusive: Optional[bool]
    gpu_type: Optional[str]
    job_dir: Optional[str]
    sbatch_args: Optional[List[str]]
    workspace_type: Optional[str]
    image_repo: Optional[str]
    quiet: Optional[bool]
    allocation: Optional[str]
    warm: Optional[bool]


def run_opts(default_job_dir: str) -> runopts:
    opts = runopts()
    opts.add("partition", type_=str, default=None, help="partition to run in (default: the cluster's default)")
    opts.add("time", type_=str, default=None, help=f"time limit of the job: {TIME_FORMS}")
    opts.add("account", type_=str, default=None, help="account to charge")
    opts.add("qos", type_=str, default=None, help="quality of service")
    opts.add("constraint", type_=str, default=None, help="node features required, e.g. a100&ib")
    opts.add("exclusive", type_=bool, default=False,
             help="whole nodes for the job: every CPU of a node is planned for its replica")
    opts.add("gpu_type", type_=str, default=None,
             help="the GRES type of the GPUs to ask for (--gpus-per-node=TYPE:N), as the cluster names it, e.g. "
             "h100; 'any' for any type (default: the named resource's, else any)")
    opts.add("nodelist", type_=str, default=None, help="nodes the job must include, e.g. node[1-4]")
    opts.add("exclude", type_=str, default=None, help="nodes the job must not use")
    opts.add("reservation", type_=str, default=None, help="reservation to run in")
    opts.add("comment", type_=str, default=None, help="comment on the job (sacct and squeue show it)")
    opts.add("mail-user", type_=str, default=None, help="who gets Slurm's mail about the job")
    opts.add("mail-type", type_=str, default=None, help=f"which mail: a list of {', '.join(MAIL_TYPES)}")
    for torchx_name, alias in ALIASES.items():
        opts.add(alias, type_=str, default=None, help=f"the same as {torchx_name}")
    opts.add("job_dir", type_=str, default=None,
             help=f"directory for the jobs' scripts, logs and records, seen by every node (default {default_job_dir}); "
             "each job writes {job_dir}/{app name}-{suffix}")
    opts.add("workspace_type", type_=str, default="dir",
             help="torchx's: dir (the workspace copied into the job's directory, where the steps run); docker "
             "(an image run through srun --container-image) is refused: the steps run on the nodes' Python")
    opts.add("image_repo", type_=str, default=None, help="torchx's, for workspace_type=docker: unused")
    opts.add("quiet", type_=bool, default=False, help="torchx's, for workspace_type=docker: unused")
    opts.add("allocation", type_=str, default=None,
             help="the job id of an allocation you hold (salloc): the job runs as its steps, started at once, with "
             "no sbatch; default: the allocation whose shell or batch script runs torchx, if any; 'new': a job "
             "of its own")
    opts.add("warm", type_=bool, default=False,
             help="in an allocation: the replicas' launchers are forked by a resident interpreter on each node that "
             "has imported torch (a step of the allocation, started by the first such job, ended after 10 idle "
             "minutes or with the allocation): no import of torch per job; ignored for a job of its own")
    opts.add("sbatch_args", type_=List[str], default=None,
             help="any other sbatch options, each --name=value or (on the command line, where = is taken) "
             "--name value, e.g. '--signal B:USR1@60;--requeue'")
    return opts


def sbatch_options(cfg: Mapping[str, Any]) -> list[str]:
    """The ``#SBATCH`` options ``cfg`` asks for (besides those of the job's shape), checked;
    ``sbatch_args`` last (they may say otherwise)."""
    options = []
    for key, option in SBATCH_OPTION_OF.items():
        value = _given(cfg, key)
        if value is None:
            continue
        text = _one_line(key, value)
        if key == "time" and not _TIME.fullmatch(text):
            raise InvalidArgumentError(f"invalid time {text!r}: expected {TIME_FORMS}")
        if key == "mail-type":
            unknown = [kind for kind in text.upper().split(",") if kind not in MAIL_TYPES]
            if unknown:
                raise InvalidArgumentError(f"invalid mail-type {text!r} ({', '.join(unknown)}): expected a list of "
                                           f"{', '.join(MAIL_TYPES)}")
        options.append(f"{option}={sbatch_word(text)}")
    if cfg.get("exclusive"):
        options.append("--exclusive")
    for extra in cfg.get("sbatch_args") or []:
        text = _one_line("sbatch_args", extra)
        name = text.split("=", 1)[0].split()[0]
        if not text.startswith("-"):
            raise InvalidArgumentError(f"invalid sbatch_args entry {text!r}: expected --name=value, --name value or --flag")
        if name in OWN_SBATCH_OPTIONS:
            raise InvalidArgumentError(
                f"sbatch_args entry {text!r}: {name} is set from the app (-j, resources) and job_dir; "
                "change those instead")
        options.append(text)
    return options


def with_whole_nodes(options: list[str], cfg: Mapping[str, Any]) -> list[str]:
    """``sbatch_options(cfg)`` for a job that takes whole nodes: ``--exclusive`` too, before the
    user's ``sbatch_args`` (which may say otherwise)."""
    if cfg.get("exclusive"):
        return options
    users = len(cfg.get("sbatch_args") or [])
    at = len(options) - users
    return [*options[:at], "--exclusive", *options[at:]]


def check_workspace_type(cfg: Mapping[str, Any]) -> None:
    """torchx-nightly's ``workspace_type``: only ``dir`` holds here."""
    given = cfg.get("workspace_type") or "dir"
    if given == "docker":
        raise InvalidArgumentError(
            "workspace_type=docker (replicas in an image, through srun --container-image) is not supported: "
            "torchx_ext's slurm runs each step on the nodes' own Python; use workspace_type=dir (the default), "
            "which copies the workspace into the job's directory")
    if given != "dir":
        raise InvalidArgumentError(f"invalid workspace_type {given!r}: expected dir or docker")


def sbatch_word(text: str) -> str:
    """``text`` as sbatch reads one argument of an ``#SBATCH`` line back: in double quotes, with
    ``\\`` before ``\\`` and ``"``, when it holds a blank, a quote, a backslash or a ``#`` (which
    would start a comment); as it is otherwise."""
    if not re.search(r"[\s\"'\\#]", text):
        return text
    return '"' + re.sub(r'(["\\])', r"\\\1", text) + '"'


def _given(cfg: Mapping[str, Any], key: str) -> Any:
    """``cfg``'s value of ``key`` or of its alias (None when neither is given); both, differing: refused."""
    value = None if cfg.get(key) in (None, "") else cfg[key]
    alias = ALIASES.get(key)
    if alias is None or cfg.get(alias) in (None, ""):
        return value
    if value is not None and value != cfg[alias]:
        raise InvalidArgumentError(f"{key}={value!r} and {alias}={cfg[alias]!r} differ: give one of them")
    return cfg[alias]


def gpu_type_of(given: object, resource: Resource) -> str:
    """The GRES type to ask ``resource``'s GPUs of: ``given`` (``-cfg gpu_type``; ``any``: none),
    else the named resource's; empty for any type."""
    if given is None or given == "":
        return str(resource.capabilities.get(GPU_TYPE) or "")
    text = str(given).strip()
    if text == "any":
        return ""
    if not _GRES_TYPE.fullmatch(text):
        raise InvalidArgumentError(f"invalid gpu_type {given!r}: expected a GRES type as the cluster names it "
                                   "(letters, digits, '_', '.', '-'; e.g. h100) or 'any'")
    return text


_GRES_TYPE = re.compile(r"[A-Za-z0-9_.-]+")


def partition_of(options: list[str]) -> str | None:
    """The partition ``options`` (the checked ``#SBATCH`` options) name, else ``$SBATCH_PARTITION``'s
    (sbatch reads it too); None: the cluster's default."""
    for option in reversed(options):
        match = re.fullmatch(r"(?:--partition[= ]|-p[= ]?)\s*(\S+)", option)
        if match:
            return match[1]
    return os.environ.get("SBATCH_PARTITION") or None


def _one_line(key: str, value: object) -> str:
    text = str(value).strip()
    if not text or "\n" in text or "\r" in text:
        raise InvalidArgumentError(f"invalid {key} {value!r}: expected one line of text")
    # sbatch starts a new heterogeneous component at these words anywhere on an #SBATCH line.
    if re.search(r"hetjob|packjob", text, re.IGNORECASE):
        raise InvalidArgumentError(f"invalid {key} {value!r}: an #SBATCH line holding 'hetjob' or 'packjob' starts a "
                                   "new part of the job in sbatch: word it otherwise")
    return text

"""local_cwd's ``-cfg``: torchx's local_cwd options with their meanings, and ours."""

from __future__ import annotations

from typing import Optional

from torchx.specs import runopts

from torchx_ext.schedulers.common.scheduler import HostSliceOpts, add_cancel_grace_opt, add_host_slice_opts
from torchx_ext.schedulers.local.records import JOBS


class LocalOpts(HostSliceOpts, total=False):
    log_dir: Optional[str]
    prepend_cwd: Optional[bool]
    warm: Optional[bool]


def run_opts() -> runopts:
    opts = runopts()
    opts.add("log_dir", type_=str, default=None,
             help=f"directory for the jobs' logs and records (default {JOBS.state_root() / 'logs'}); "
             "each job writes {log_dir}/{app_id}")
    opts.add("prepend_cwd", type_=bool, default=False,
             help="put the current directory before (not after) PATH's entries")
    opts.add("warm", type_=bool, default=False,
             help="start the job's processes from a resident interpreter that has imported torch (started by the "
             "first such job, ended after 10 idle minutes; torchx warm status|stop): no import of torch per job")
    add_host_slice_opts(opts, "replica", "CPUs")
    add_cancel_grace_opt(opts, 10, "a job is cancelled or fails")
    opts.add("auto_set_cuda_visible_devices", type_=bool, default=False,
             help="torchx's split of this host's GPUs: each GPU replica, in role order, gets the next "
             "resource.gpu of them as CUDA_VISIBLE_DEVICES (over the role's own); false: slice_replicas "
             "gives each replica the GPUs near its CPUs")
    return opts

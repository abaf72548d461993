"""local_docker's ``-cfg``: torchx's local_docker options with their meanings, and ours."""

from __future__ import annotations

from typing import Dict, List, Optional

from torchx.specs import runopts

from torchx_ext.schedulers.common.scheduler import HostSliceOpts, add_cancel_grace_opt, add_host_slice_opts


class DockerOpts(HostSliceOpts, total=False):
    shm_size: Optional[str]
    workspace_images_kept: Optional[int]
    copy_env: Optional[List[str]]
    env: Optional[Dict[str, str]]
    privileged: Optional[bool]
    image_repo: Optional[str]
    quiet: Optional[bool]


def run_opts() -> runopts:
    opts = runopts()
    add_host_slice_opts(opts, "replica container", "cpuset, memory nodes")
    opts.add("shm_size", type_=str, default="auto",
             help="size of each container's /dev/shm, which counts against its memory limit: 'auto' "
             "(half the role's memMB, 2g without a limit) or a size such as 512m, 8g")
    add_cancel_grace_opt(opts, 10, "a job is cancelled or ended by a failed replica")
    opts.add("workspace_images_kept", type_=int, default=3,
             help="cached workspace images kept per workspace directory (older ones are removed)")
    opts.add("copy_env", type_=List[str], default=None,
             help="environment variables of this shell copied into the containers, as glob patterns, e.g. "
             "FOO_*,WANDB_API_KEY (the role's own env wins)")
    opts.add("env", type_=Dict[str, str], default=None,
             help="environment variables set in the containers, as KEY:VALUE,KEY2:VALUE2 (over copy_env; the "
             "role's own env wins)")
    opts.add("privileged", type_=bool, default=False,
             help="run the containers privileged (every device and capability of the host)")
    return opts


def workspace_opts() -> runopts:
    opts = runopts()
    opts.add("image_repo", type_=str, default=None,
             help="accepted as torchx's local_docker accepts it, and unused: the workspace image stays on this engine")
    opts.add("quiet", type_=bool, default=False, help="say nothing of the workspace image's build steps")
    return opts

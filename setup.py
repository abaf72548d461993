import re
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.egg_info import egg_info

# torchx takes the first registered scheduler as `torchx run`'s default, but setuptools writes
# every entry point group sorted by name (aws_batch first). This keeps the order given below.
ORDERED_GROUPS = ("torchx.schedulers",)


ENTRY_POINTS = {
    # Registering a group hides torchx's defaults for it: torchx's other builtin
    # component groups are registered again here, next to ours.
    "torchx.components": [
        "dist = torchx_ext.components.dist",
        "utils = torchx.components.utils",
        "serve = torchx.components.serve",
        "metrics = torchx.components.metrics",
    ],
    # torchx merges these into its own named resources (ours win on equal names).
    "torchx.named_resources": [
        "aws_p4d.24xlarge = torchx_ext.resources:aws_p4d_24xlarge",
        "aws_p5.48xlarge = torchx_ext.resources:aws_p5_48xlarge",
        "gcp_a3-highgpu-8g = torchx_ext.resources:gcp_a3_highgpu_8g",
        "azure_nd96isr_h100_v5 = torchx_ext.resources:azure_nd96isr_h100_v5",
        "dgx_h100 = torchx_ext.resources:dgx_h100",
        "gb200_nvl_tray = torchx_ext.resources:gb200_nvl_tray",
        "cpu_2socket = torchx_ext.resources:cpu_2socket",
    ],
    # local_cwd is ours; torchx's other schedulers are registered again, local_cwd first
    # (torchx takes the first as the default; its own first is local_docker).
    "torchx.schedulers": [
        "local_cwd = torchx_ext.schedulers.local:create_scheduler",
        "local_docker = torchx.schedulers.docker_scheduler:create_scheduler",
        "slurm = torchx.schedulers.slurm_scheduler:create_scheduler",
        "kubernetes = torchx.schedulers.kubernetes_scheduler:create_scheduler",
        "kubernetes_mcad = torchx.schedulers.kubernetes_mcad_scheduler:create_scheduler",
        "aws_batch = torchx.schedulers.aws_batch_scheduler:create_scheduler",
        "aws_sagemaker = torchx.schedulers.aws_sagemaker_scheduler:create_scheduler",
        "gcp_batch = torchx.schedulers.gcp_batch_scheduler:create_scheduler",
        "ray = torchx.schedulers.ray_scheduler:create_scheduler",
        "lsf = torchx.schedulers.lsf_scheduler:create_scheduler",
    ],
    # Ours, plus torchx's status/describe/log/cancel with a check of the app handle first, and
    # torchx's run with our input errors in one line.
    "torchx.cli.cmds": [
        "topo = torchx_ext.cli.topo:CmdTopo",
        "status = torchx_ext.cli.handles:CheckedStatus",
        "describe = torchx_ext.cli.handles:CheckedDescribe",
        "log = torchx_ext.cli.handles:CheckedLog",
        "cancel = torchx_ext.cli.handles:CheckedCancel",
        "run = torchx_ext.cli.handles:CheckedRun",
    ],
    "console_scripts": [
        "torchx-ext-numa=torchx_ext.numa.__main__:main",
        "torchx-ext-run=torchx_ext.launcher.cli:console_main",
    ],
}


class EggInfoKeepingEntryPointOrder(egg_info):
    def run(self) -> None:
        super().run()
        path = Path(self.egg_info) / "entry_points.txt"
        text = path.read_text()
        for group in ORDERED_GROUPS:
            wanted = [line.split("=")[0].strip() for line in ENTRY_POINTS[group]]
            section = re.search(rf"^\[{re.escape(group)}\]\n((?:.+\n?)*)", text, flags=re.MULTILINE)
            if section is None:
                continue
            lines = {line.split("=")[0].strip(): line for line in section.group(1).splitlines()}
            ordered = "\n".join(lines[name] for name in wanted) + "\n"
            text = text[: section.start(1)] + ordered + text[section.end(1):]
        path.write_text(text)


setup(
    name="torchx_ext",
    version="0.1.0",
    description="Topology-aware torchx components, launcher and schedulers: every worker on the CPUs near its GPU.",
    packages=find_packages(include=["torchx_ext", "torchx_ext.*"]),
    package_data={"torchx_ext": ["py.typed"]},
    python_requires=">=3.10",
    install_requires=["torchx>=0.7.0", "torch>=2.4"],
    extras_require={
        # Exact pins for CI live in requirements-test.txt (torch pinned there: an unpinned
        # torch pulls a multi-GB CUDA build).
        "test": ["pytest", "hypothesis", "mypy"],
    },
    cmdclass={"egg_info": EggInfoKeepingEntryPointOrder},
    entry_points=ENTRY_POINTS,
)

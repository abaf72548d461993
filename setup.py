from setuptools import find_packages, setup

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
    entry_points={
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
        "torchx.cli.cmds": ["topo = torchx_ext.cli.topo:CmdTopo"],
        "console_scripts": [
            "torchx-ext-numa=torchx_ext.numa.__main__:main",
            "torchx-ext-run=torchx_ext.launcher.cli:console_main",
        ],
    },
)

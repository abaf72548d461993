from setuptools import find_namespace_packages, find_packages, setup
from setuptools.dist import Distribution

# torchx_ext works with either torchx line, which are two distributions of the same `torchx`
# package: torchx (0.7.0, the last release) and torchx-nightly. So neither is required here: a
# requirement on `torchx` would replace an installed torchx-nightly with torchx 0.7.0. Install
# `torchx_ext[torchx]` for torchx 0.7.0, or install torchx-nightly first.
#
# How each line finds our plugins: torchx_ext/registration/__init__.py. Here are only the entry
# points both lines read the same way; those for one line only are in
# torchx_ext/registration/torchx_0_7_0/ and torchx_nightly/, and nightly's plugin modules in
# torchx_plugins/.
ENTRY_POINTS = {
    # Components are per line too (torchx_0_7_0/, torchx_nightly/): a registered group replaces
    # torchx's builtin components, and the builtin modules differ between the lines.
    # Ours, plus torchx's status/describe/log/cancel with a check of the app handle first,
    # torchx's list and run with our errors in one line, and run's attached end in one line
    # (nightly's delete: torchx_nightly/).
    "torchx.cli.cmds": [
        "topo = torchx_ext.cli.topo:CmdTopo",
        "warm = torchx_ext.cli.warm:CmdWarm",
        "stacks = torchx_ext.cli.stacks:CmdStacks",
        "status = torchx_ext.cli.handles:CheckedStatus",
        "describe = torchx_ext.cli.handles:CheckedDescribe",
        "log = torchx_ext.cli.handles:CheckedLog",
        "cancel = torchx_ext.cli.handles:CheckedCancel",
        "list = torchx_ext.cli.handles:CheckedList",
        "run = torchx_ext.cli.run:CheckedRun",
    ],
    "console_scripts": [
        "torchx-ext-numa=torchx_ext.numa.__main__:main",
        "torchx-ext-run=torchx_ext.launcher.cli:console_main",
    ],
}


class DistributionWithEditableData(Distribution):
    """Editable installs (pip install -e) skip data_files: setuptools' editable_wheel asks the
    distribution for has_data(), which is called has_data_files() (setuptools issue 3399)."""

    def has_data(self) -> bool:
        return self.has_data_files()


setup(
    name="torchx_ext",
    version="0.1.0",
    description="Topology-aware torchx components, launcher and schedulers: every worker on the CPUs near its GPU.",
    packages=[
        *find_packages(include=["torchx_ext", "torchx_ext.*"]),
        # torchx-nightly's plugin namespace (no __init__.py: other distributions share it).
        *find_namespace_packages(include=["torchx_plugins.schedulers", "torchx_plugins.named_resources"]),
    ],
    package_data={
        "torchx_ext": ["py.typed"],
        "torchx_ext.registration": [f"{line}/{name}" for line in ("torchx_0_7_0", "torchx_nightly")
                                    for name in ("METADATA", "entry_points.txt")],
    },
    # A .pth file must lie in site-packages itself. Wheels install their "<name>.data/purelib/"
    # there, and setuptools puts data_files under "<name>.data/data/", in wheels and in
    # editable wheels alike; hence "../purelib".
    data_files=[("../purelib", ["torchx_ext/registration/torchx_ext_registration.pth"])],
    python_requires=">=3.10",
    # setproctitle: workers named by their script and rank in ps (they run without it).
    install_requires=["torch>=2.4", "setproctitle>=1.3"],
    extras_require={
        "torchx": ["torchx>=0.7.0"],
        # dist.hsdp's torchft jobs (docs/torchft.md), pinned to the version tested. numpy: torchft's
        # process-group checkpoint transport needs it and torchft does not declare it.
        "ft": ["torchft==0.2.0", "numpy"],
        # Exact pins for CI live in requirements-test.txt (torch pinned there: an unpinned
        # torch pulls a multi-GB CUDA build).
        "test": ["pytest", "hypothesis", "mypy"],
    },
    entry_points=ENTRY_POINTS,
    distclass=DistributionWithEditableData,
)

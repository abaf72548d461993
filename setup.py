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
        "console_scripts": [
            "torchx-ext-numa=torchx_ext.numa.__main__:main",
            "torchx-ext-run=torchx_ext.launcher.cli:console_main",
        ],
    },
)

"""torchx_ext: topology-aware components, launcher and schedulers for torchx."""

__version__ = "0.1.0"

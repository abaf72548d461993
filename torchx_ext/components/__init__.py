"""torchx components (registered as the ``dist`` group: ``dist.ddp``, ``dist.spmd``)."""

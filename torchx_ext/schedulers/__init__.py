"""The scheduler backends, one subpackage each: ``local`` (local_cwd), ``docker`` (local_docker),
``kubernetes`` and ``slurm``, listed once in ``backends.py``. What they share: ``common/`` (the
torchx-facing shell every backend's scheduler is, what a role's spec means to a backend, states,
logs, records), ``images/`` (workspace images and registries: docker and kubernetes) and
``placement.py`` (a host sliced among its replicas: local and docker). No backend imports
another's modules. Adding a backend: docs/layout.md.
"""

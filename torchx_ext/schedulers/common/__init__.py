"""What every scheduler backend shares: the torchx-facing shell every backend's scheduler is
(``scheduler.py``), what a role's spec means to a backend (``role_policy.py``), job/replica
states and our ends (``states.py``), log queries, app ids, job directories and their registry
(``job_dir.py``) and the checks of what a backend is given. Error files and the env names a replica gets live below
this package (``torchx_ext.error_file``, ``torchx_ext.replica_env``): the launcher uses them too.

Standard library only, except ``scheduler.py``, ``checks.py`` and ``role_spec.py`` (torchx): the local supervisor
and slurm's step program import pieces of it and should start fast.
"""

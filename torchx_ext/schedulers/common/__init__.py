"""What every scheduler backend shares: the torchx-facing shell every backend's scheduler is
(``scheduler.py``), job/replica states and our ends (``states.py``), log queries, app ids and
the checks of what a backend is given. Error files and the env names a replica gets live below
this package (``torchx_ext.error_file``, ``torchx_ext.replica_env``): the launcher uses them too.

Standard library only, except ``scheduler.py`` and ``checks.py`` (torchx): the local supervisor
imports pieces of it and should start fast.
"""

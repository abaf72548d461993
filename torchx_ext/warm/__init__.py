"""A warm start for local jobs: a resident interpreter that has imported torch and our launcher
forks each job's processes (``server.py``, ``fork.py``), so none of them imports torch again.
Opt-in (``-cfg warm=true`` on local_cwd); ``torchx warm status|stop``. See docs/start-up.md."""

"""Scheduler adapters (local_cwd, local_docker, kubernetes), each on the shell in
``common/scheduler.py``, and what they share (``common/``, ``placement.py``)."""

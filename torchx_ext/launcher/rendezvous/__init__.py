"""The launcher's rendezvous: how its nodes meet, stay met, and notice who left.

- ``arrivals.py`` (store I/O) and ``core.py`` (its decisions, pure): the arrival rendezvous, the
  launcher's default c10d handler, whose join costs each node a constant number of store operations;
  ``arrival_handler.py`` is torch's handler interface over it, ``keepalive.py`` its keep-alive thread.
- ``pauses.py``: torch's own c10d handler without its fixed pauses.
- ``watched.py``: either handler as the launcher runs it, registered with torch under our backend
  name, with ``watchdog.py`` (a frozen or cut-off peer noticed in seconds) and the hang watch.
- ``spare.py``: hot spares waiting beyond the node count.
- Stores: ``worker_store.py`` (which store a run's workers get), ``store_host.py`` (a store outside
  the replicas), ``store_reach.py`` (a store that cannot be reached, said in one line),
  ``store_keys.py`` (a prefix view in Python), ``loopback.py`` (a job on this host alone).
- ``clock_offset.py``: wall clocks off on purpose, for tests of clock skew.
"""

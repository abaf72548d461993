"""The names the launcher's rendezvous settings travel under: our backend's name in torch's
registry, and the keys ``config.watch_rendezvous`` writes into ``--rdzv-conf`` for
``registry.create_handler`` to read back. A leaf: no torch, no other module of ours."""

BACKEND = "torchx_ext-c10d"
TIMEOUT_KEY = "peer_timeout"
"""The ``--rdzv-conf`` key of the peer timeout (seconds; 0 turns the watchdog off). Not torch's own
``heartbeat_timeout``, which bounds one keep-alive write."""
RESTARTS_KEY = "torchx_ext_max_restarts"
NODE_RANK_KEY = "torchx_ext_node_rank"
SPARES_KEY = "torchx_ext_spares"
HANDLER_KEY = "torchx_ext_c10d_handler"
TIMEOUTS = (("join_timeout", 600), ("last_call_timeout", 30), ("keep_alive_interval", 5),
             ("keep_alive_max_attempt", 3))
"""torch's c10d settings (``--rdzv-conf``) that both handlers read, with torch's defaults."""
HANDLERS = ("arrivals", "torch")
"""``--c10d-handler``: the arrival rendezvous (the default), or torch's dynamic c10d handler."""

"""How torchx_ext plugs into each torchx line (torchx 0.7.0 and torchx-nightly).

The two lines find plugins differently, and no one static list of entry points is right for
both:

- Components and CLI commands: both lines read the ``torchx.components`` and
  ``torchx.cli.cmds`` entry point groups (setup.py). A registered ``torchx.components`` group
  replaces torchx's builtin components on both lines, so torchx's own component package is
  registered again (``_torchx_builtins = torchx.components``: every group the installed torchx
  ships, under its own name), and our ``dist`` after it, which wins for ``dist.ddp`` and
  ``dist.spmd``.
- Schedulers and named resources: torchx 0.7.0 reads entry points, and a registered
  ``torchx.schedulers`` group *replaces* its builtin schedulers, so on 0.7.0 every 0.7.0
  builtin is registered again next to ours (``torchx_0_7_0/entry_points.txt``, to which
  ``metadata.py`` adds ours from ``schedulers/backends.py``, local_cwd first: the default of
  ``torchx run``). torchx-nightly *adds* plugins to its builtins and still reads
  entry points, so that same list would make it offer schedulers it no longer has (``-s
  aws_batch``). Nightly finds ours in its own plugin namespace instead (``torchx_plugins/
  schedulers`` and ``torchx_plugins/named_resources`` in this repository), which it reads
  whether or not entry points are switched off (``TORCHX_PLUGINS_SOURCE=1``).
- Commands only nightly has (``delete``): ``torchx_nightly/entry_points.txt``.

The entry points of ``torchx_0_7_0/`` and ``torchx_nightly/`` are published only where that
line is installed: ``metadata.py`` adds the directory as a distribution of its own when entry
points are read, from a meta path finder that ``torchx_ext_registration.pth`` installs at
interpreter start. ``lines.py`` says which line is installed without importing torchx.
"""

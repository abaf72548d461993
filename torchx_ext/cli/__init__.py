"""torchx CLI subcommands (entry point group ``torchx.cli.cmds``)."""

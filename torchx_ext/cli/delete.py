"""torchx-nightly's ``torchx delete`` with the app handle checked first, as ``handles.py`` does
for the commands both lines have (nightly's own answers a malformed handle with a traceback and
an unknown app with silence and exit 0).

Registered only where torchx-nightly is installed (``torchx_ext/registration/torchx_nightly``):
torchx 0.7.0 has no ``delete`` and no ``torchx.cli.cmd_delete``.
"""

from torchx.cli.cmd_delete import CmdDelete

from torchx_ext.cli.handles import HandleChecked


class CheckedDelete(HandleChecked, CmdDelete):
    pass

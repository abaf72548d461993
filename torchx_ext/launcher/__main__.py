import os

from torchx_ext.launcher.liveness import start_touching
from torchx_ext.replica_env import LIVENESS_FILE_ENV

if __name__ == "__main__":
    # The first beat before the rest of the launcher is imported (liveness is standard library only).
    if os.environ.get(LIVENESS_FILE_ENV):
        start_touching(os.environ[LIVENESS_FILE_ENV])
    from torchx_ext.launcher.cli import console_main

    console_main()

import sys

from torchx_ext.launcher.cli import main

if __name__ == "__main__":
    sys.exit(main())

"""Writes what a user's script can observe of how it was started, and leaves work for exit time.

Usage: lifecycle.py OUTDIR ARGS...; writes OUTDIR/start<RANK>.json at once, appends to an
unclosed OUTDIR/unclosed<RANK>.txt, and writes OUTDIR/atexit<RANK>.txt from an atexit handler.
"""

import atexit
import json
import os
import sys

torch_was_loaded = "torch" in sys.modules
out = sys.argv[1]
rank = os.environ["RANK"]
with open(os.path.join(out, f"start{rank}.json"), "w") as report:
    json.dump(
        {
            "argv": sys.argv[1:],
            "name": __name__,
            "file": __file__,
            "path0": sys.path[0],
            "main_is_this_module": sys.modules["__main__"].__dict__ is globals(),
            "torch_was_loaded": torch_was_loaded,
        },
        report,
    )
unclosed = open(os.path.join(out, f"unclosed{rank}.txt"), "w")
unclosed.write("buffered, never flushed by the script\n")


def goodbye() -> None:
    with open(os.path.join(out, f"atexit{rank}.txt"), "w") as file:
        file.write("atexit ran")


atexit.register(goodbye)
if os.environ.get("LIFECYCLE_EXIT"):
    sys.exit(int(os.environ["LIFECYCLE_EXIT"]))

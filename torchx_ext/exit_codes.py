"""The exit codes of every torchx_ext command line (documented once, in the README).

torchrun's and torchx's own meanings are kept: 0 success, 1 a failed job or a handle that names
no job, 2 input refused before anything started (argparse's code for a usage error).
"""

OK = 0
FAILED = 1
"""The job or one of its workers failed, or its rendezvous did not complete; or the job an
attached ``torchx run`` waited for was cancelled from elsewhere."""
NOT_FOUND = 1
"""An app handle or job that does not exist (torchx's own code for it)."""
BAD_INPUT = 2
"""A flag, value or file was refused before anything started."""
STUCK = 3
"""The launcher stopped restarting: its attempts kept hanging at the same point (launcher/hang_core.py).
Our schedulers do not start a replica again that ended so, whatever ``max_retries`` is left."""
INTERRUPTED = 130
"""Stopped by Ctrl+C (the shell's code for SIGINT); a launcher stopped by a signal exits with
128 plus the signal's number, as a shell reports it."""

"""torchft jobs (``dist.hsdp``): the lighthouse role's program, and how each replica group's launcher
learns the lighthouse's address and ends with it.

torchft (checkpoint-free recovery) runs each replica group as a job of its own, and a *lighthouse*
agrees at every step on which groups are live. These are torchft's names, which its scripts read.
Standard library only: the component and the launcher's argument parsing import this.
"""

LIGHTHOUSE_ENV = "TORCHFT_LIGHTHOUSE"
"""torchft's: the lighthouse's URL (``http://HOST:PORT``), which every group's manager joins."""
GROUP_ID_ENV = "REPLICA_GROUP_ID"
"""torchft's examples': this replica group's index, 0 to ``NUM_REPLICA_GROUPS`` - 1."""
GROUPS_ENV = "NUM_REPLICA_GROUPS"
"""torchft's examples': how many replica groups the job has."""
DEFAULT_LIGHTHOUSE_PORT = 29510
"""torchft's own component's and lighthouse's."""
INSTALL_HINT = "pip install 'torchx_ext[ft]'"


def ending_port(lighthouse_port: int) -> int:
    """The port next to the lighthouse's where it hears that groups are done (``ending.py``)."""
    return lighthouse_port + 1

"""A worker that fails with a Python exception on rank 1, recorded by torchelastic's @record."""

import os

from torch.distributed.elastic.multiprocessing.errors import record


def fail_on_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("rank one is broken on purpose")


main = record(fail_on_rank_one)


if __name__ == "__main__":
    main()

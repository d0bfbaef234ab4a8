"""The one place a Dask client is made: for ``--distributed`` training and for ``ooc batch``.

``distributed`` is imported only when a client is needed, with an error that says what to install.
"""

from __future__ import annotations

import logging


def dask_client(scheduler: str | None = None, workers: int | None = None, needed_by: str = "ooc",
                threads_per_worker: int = 1):
    """``(client, cluster)``: a client of ``scheduler``'s cluster (``cluster`` None), or of a new
    local cluster of ``workers`` worker processes of ``threads_per_worker`` threads each (``cluster`` to
    close after the client).

    Parameters
    ----------
    scheduler : str, optional
        A scheduler address; None starts a local cluster.
    workers : int, optional
        Worker processes of the local cluster (``>= 1``; Dask's default when None).
    needed_by : str
        What asks for it, named in the error when ``distributed`` is not installed.
    threads_per_worker : int
        Threads of each local worker (Dask's ``nthreads``: ooc's tasks run one at a time on a worker
        and use that many compute threads).
    """
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover
        raise RuntimeError(f"{needed_by} needs dask.distributed: pip install 'dask[distributed]'") from exc
    if scheduler:
        return Client(scheduler), None
    # the scheduler's HTTP server (health checks, the dashboard) on a free port of this host: given None
    # it still takes :8787, and two ooc runs at once printed "Port 8787 is already in use"
    cluster = LocalCluster(n_workers=workers, threads_per_worker=max(1, int(threads_per_worker)), processes=True,
                           dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
    return Client(cluster), cluster


def parse_distributed(distributed: str) -> tuple[str | None, int | None]:
    """``--distributed local:N`` -> ``(None, N)``; a scheduler address -> ``(address, None)``."""
    if not distributed.startswith("local:"):
        return distributed, None
    try:
        nw = int(distributed.split(":", 1)[1])
    except ValueError:
        raise ValueError(f"--distributed {distributed!r}: expected local:N or a scheduler address") from None
    if nw < 1:
        raise ValueError("--distributed local:N needs N >= 1")
    return None, nw

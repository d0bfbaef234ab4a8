"""A run's memory-mapped scratch vectors (rcd-primal's margins, labels and weights when they are paged:
``RUN/state/primal/*.npy``) are made as new files and renamed into place, with their blocks allocated when made:

* a file at their path is never written in place: a hard link to it elsewhere (a user's backup, a
  ``cp -al`` snapshot of the run) keeps its bytes through train and resume;
* a full disk is one line naming the file (a memory map of a sparse file died of SIGBUS, exit 135).
"""

from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pytest
import scipy.sparse as sp

import ooc
from ooc.runs import rundir
from ooc.runs.rundir import RunError


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    rng = np.random.default_rng(4)
    X = sp.random(2000, 50, density=0.1, random_state=4, format="csr")
    y = np.where(rng.standard_normal(2000) > 0, 1.0, -1.0)
    st = ooc.convert(X, str(tmp_path_factory.mktemp("scr") / "s.zarr"), y=y)
    yield st
    st.close()


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_hard_link_to_a_scratch_vector_keeps_its_bytes(store, tmp_path):
    run = str(tmp_path / "run")
    ooc.train(store, run, solver="rcd-primal", duals="paged", l2=1e-3, max_epochs=1)
    scratch = os.path.join(run, "state", "primal")
    names = sorted(n for n in os.listdir(scratch) if n.endswith(".npy"))
    assert names, "the run paged no vector: the test needs its scratch files"
    links = {}
    for n in names:
        link = tmp_path / f"backup-{n}"
        os.link(os.path.join(scratch, n), link)
        links[link] = _digest(link)
    ooc.resume(run, max_epochs=3)
    for link, digest in links.items():
        assert _digest(link) == digest, f"{link}: changed through its hard link"


def test_a_full_disk_making_a_scratch_vector_is_one_line(store, tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rundir.os, "posix_fallocate", full, raising=False)
    with pytest.raises(RunError, match=r"the disk is full .*state/primal/\w+\.npy"):
        ooc.train(store, str(tmp_path / "run"), solver="rcd-primal", duals="paged", l2=1e-3, max_epochs=1)
    left = [n for n in os.listdir(tmp_path / "run" / "state" / "primal")] if os.path.isdir(
        tmp_path / "run" / "state" / "primal") else []
    assert not any(n.startswith(".") for n in left), left  # the new file's temporary is gone

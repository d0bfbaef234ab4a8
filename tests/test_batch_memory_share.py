"""A local batch's workers share the limit the batch runs under: each plans ``--memory auto`` for its share
(ooc.batch.local_memory_share), never for the whole limit (two workers under a 700M cgroup were OOM-killed)."""

import ooc._memlimit as M
from ooc.batch import _worker_share, local_memory_share


def test_each_worker_gets_an_equal_share_of_what_the_driver_leaves(monkeypatch):
    monkeypatch.setattr(M, "process_limit", lambda: M.Limit(1000 << 20, "cgroup memory limit"))
    monkeypatch.setattr(M, "rss_bytes", lambda: 200 << 20)
    assert local_memory_share(2) == 400 << 20
    assert local_memory_share(1) == 800 << 20
    monkeypatch.setattr(M, "process_limit", lambda: M.Limit(M._UNLIMITED, "no limit found"))
    assert local_memory_share(2) is None


def test_a_worker_plans_within_its_share(monkeypatch):
    monkeypatch.setattr(M, "_EXTRA", [])
    before = M.process_limit().bytes
    share = min(before // 3, 300 << 20)
    _worker_share(share)
    lim = M.process_limit()
    assert lim.bytes == share and "share of the batch" in lim.source
    _worker_share(None)  # no share (a remote cluster): nothing added
    assert M.process_limit().bytes == share

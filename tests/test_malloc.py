"""ooc._malloc: glibc's mmap threshold is pinned so freed block buffers leave the process."""

import subprocess
import sys

import pytest


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_freed_block_buffers_return_to_the_system():
    # a child process: allocate and free 16 MiB arrays while a second thread does the same,
    # as the kernel and the prefetcher do; with the threshold pinned, RSS goes back down
    code = r"""
import threading, numpy as np, sys
from ooc._malloc import tune_malloc
ok = tune_malloc()
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
def churn():
    for i in range(40):
        a = np.ones(2_000_000 + 1000 * i)  # 16 MB, a new size each time
        del a
base = rss()
t = threading.Thread(target=churn); t.start(); churn(); t.join()
print(ok, rss() - base)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "True"
    assert int(out[1]) < 8 * 2**20  # nothing of the 16 MB buffers stays resident

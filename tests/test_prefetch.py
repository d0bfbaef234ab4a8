"""Kernel micro-architecture helpers: the prefetch intrinsic, the branchless soft-threshold."""

import platform

import numpy as np
import pytest
from numba import njit

from ooc.kernels.prefetch import prefetch, prefetch_rows


@njit(cache=True)
def _sum_prefetched(a, ahead):
    total = 0.0
    for i in range(a.shape[0]):
        prefetch(a, min(i + ahead, a.shape[0] - 1))
        total += a[i]
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_prefetch_reads_nothing_and_changes_nothing(dtype):
    a = np.arange(1000).astype(dtype)
    before = a.copy()
    assert _sum_prefetched(a, 7) == float(before.sum())
    assert np.array_equal(a, before)
    strided = np.arange(3000).astype(dtype)[::3]  # non-contiguous: the pointer must use the stride
    assert _sum_prefetched(strided, 5) == float(strided.sum())


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 instruction name")
def test_prefetch_is_an_instruction():
    # compiled here, not loaded from the on-disk cache (a cached function has no assembly text)
    @njit
    def touch(a, i):
        prefetch(a, i)

    touch(np.ones(4), 1)
    asm = next(iter(touch.inspect_asm().values()))
    assert "prefetcht0" in asm


def test_prefetch_rows_at_the_ends():
    # every distance past the end of the order, empty rows, empty alpha and snapshot: no effect
    indptr = np.array([0, 2, 2, 5], dtype=np.int64)
    indices = np.array([0, 3, 1, 2, 3], dtype=np.int32)
    data = np.ones(5, dtype=np.float32)
    order = np.array([2, 1, 0], dtype=np.int64)
    y, c, w = np.ones(3), np.ones(3), np.zeros(4)
    for t in range(3):
        prefetch_rows(order, t, indptr, indices, data, np.empty(0), y, c, w, w[:0])
        prefetch_rows(order[:0], t, indptr, indices, data, y, y, c, w, w)
    assert not w.any()


def test_branchless_soft_threshold_is_bit_identical_to_the_branching_form():
    # the kernels' max/min form must give exactly v - k, v + k or +0.0: the sdca state keeps
    # w = soft_threshold(v, 0) = v in one array, and resume compares coefficients bit for bit
    from ooc.objectives.penalties import soft_threshold

    def reference(v, k):
        return v - k if v > k else (v + k if v < -k else 0.0)

    rng = np.random.default_rng(0)
    vs = np.concatenate([rng.normal(size=2000), rng.normal(size=200) * 1e-300,
                         [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, np.inf, -np.inf, 5e-324, -5e-324]])
    for k in (0.0, 0.5, 1.0, 1e-300, 5e-324):
        got = soft_threshold(vs, k)
        want = np.array([reference(float(v), k) for v in vs])
        assert np.array_equal(got.view(np.int64), want.view(np.int64)), k


@pytest.mark.parametrize("prefetch_w", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows", [0, 1, 2, 7, 8])
def test_block_primal_loss_is_the_row_by_row_sum_bit_for_bit(prefetch_w, dtype, n_rows):
    # two rows' margins are summed side by side: each must still be its own storage-order sum,
    # and the losses added in row order (odd row counts, empty rows, zero weights, the bias)
    import math

    from ooc.kernels.sdca import block_primal_loss
    from ooc.objectives.losses import Logistic

    rng = np.random.default_rng(n_rows)
    nnz = rng.integers(0, 30, size=n_rows)
    nnz[::3] = 0  # empty rows
    indptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int64)
    dim = 50
    indices = rng.integers(0, dim, size=indptr[-1]).astype(np.int32)
    data = rng.normal(size=indptr[-1]).astype(dtype)
    y = np.where(rng.random(n_rows) < 0.5, -1.0, 1.0)
    c = rng.uniform(0.5, 2.0, size=n_rows)
    c[1::4] = 0.0
    w = rng.normal(size=dim + 1)
    for bias in (0.0, 1.5):
        total = 0.0
        for i in range(n_rows):
            if c[i] <= 0.0:
                continue
            z = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                z += float(data[p]) * w[indices[p]]
            if bias > 0:
                z += bias * w[dim]
            t = -y[i] * z
            total += c[i] * (t + math.log1p(math.exp(-t)) if t > 0 else math.log1p(math.exp(t)))
        got = block_primal_loss(Logistic(), indptr, indices, data, y, c, w if bias else w[:dim], bias, prefetch_w)
        assert got == total, (bias, got, total)


def test_gather_prefetch_pays_by_cache_size(monkeypatch):
    from ooc import _cpu

    monkeypatch.setattr(_cpu, "last_level_cache_bytes", lambda: 32 << 20)
    assert not _cpu.gather_prefetch_pays(8 << 20)
    assert _cpu.gather_prefetch_pays(32 << 20)
    monkeypatch.setattr(_cpu, "last_level_cache_bytes", lambda: None)
    assert _cpu.gather_prefetch_pays(1)
    assert _cpu._parse_size("32768K") == 32 << 20 and _cpu._parse_size("1M") == 1 << 20
    assert _cpu._parse_size("junk") is None

"""Compiled Prox-SDCA pass vs the pure-Python reference, fed the same row sequence.

Iterate for iterate: after every pass alpha, v and w agree to ~1e-12 relative, for every
loss, with and without a bias feature, with and without L1, float32/float64 data and
int32/int64 column indices, with the rows split into blocks (local indptr, views of alpha).
"""

import numpy as np
import pytest
import reference as ref
import scipy.sparse as sp

from ooc.kernels.args import Labels, Reg, Rows
from ooc.kernels.sdca import (
    block_accumulate_v,
    block_dual_loss,
    block_primal_loss,
    sdca_pass,
    sdca_pass_gap,
)
from ooc.objectives import Hinge, Logistic, SmoothHinge, Squared

N, D = 60, 12
L2 = 0.05

LOSSES = {
    "squared": Squared(),
    "logistic": Logistic(),
    "smooth-hinge": SmoothHinge(0.7),
    "hinge": Hinge(),
}
# Every loss with float64/int32 and float32/int64; the other two dtype pairs for one loss
# only, to keep the number of compiled specializations down.
DTYPES = [(np.float64, np.int32), (np.float32, np.int64)]
CASES = [(name, dt, it) for name in LOSSES for dt, it in DTYPES] + [
    ("logistic", np.float64, np.int64),
    ("logistic", np.float32, np.int32),
]


def _problem(loss, dtype, itype, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(N, D, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.normal(size=X.nnz) * 2.0
    X = X.tolil()
    X[3, :] = 0  # an empty row
    X = X.tocsr()
    X.sort_indices()
    X.data = X.data.astype(dtype)
    X.indices = X.indices.astype(itype)
    X.indptr = X.indptr.astype(np.int64)
    if loss.is_classification:
        y = rng.choice([-1.0, 1.0], size=N)
    else:
        y = rng.normal(size=N) * 3
    c = rng.uniform(0.5, 2.0, size=N)
    c[[5, 17]] = 0.0  # weightless rows
    return X, y, c


def _blocks(X, bounds):
    """Row blocks [lo, hi) as local CSR arrays (indptr rebased to 0)."""
    out = []
    for lo, hi in bounds:
        sub = X[lo:hi]
        out.append((lo, hi, sub.indptr.astype(np.int64), sub.indices, sub.data))
    return out


@pytest.mark.parametrize("bias", [0.0, 1.3], ids=["nobias", "bias"])
@pytest.mark.parametrize("l1", [0.0, 0.02], ids=["l2", "enet"])
@pytest.mark.parametrize(
    "name,dtype,itype", CASES, ids=[f"{n}-{d.__name__}-{i.__name__}" for n, d, i in CASES]
)
def test_pass_matches_reference(name, dtype, itype, l1, bias):
    loss = LOSSES[name]
    X, y, c = _problem(loss, dtype, itype)
    assert X.indices.dtype == itype and X.data.dtype == dtype
    dd = D + (1 if bias > 0 else 0)
    rng = np.random.default_rng(1)
    blocks = _blocks(X, [(0, 25), (25, N)])

    alpha = np.zeros(N)
    v = np.zeros(dd)
    w = np.zeros(dd)
    alpha_ref, v_ref, w_ref = alpha.copy(), v.copy(), w.copy()
    for epoch in range(4):
        block_order = rng.permutation(len(blocks))
        for b in block_order:
            lo, hi, indptr, indices, data = blocks[b]
            if epoch == 3:
                local = rng.integers(0, hi - lo, size=2 * (hi - lo))  # repeats and gaps
            else:
                local = rng.permutation(hi - lo)
            order = local.astype(np.int64)
            a_blk = alpha[lo:hi]  # a view: the kernel updates the global array
            a_before = a_blk.copy()
            if epoch % 2 == 0:
                s = sdca_pass(loss, Rows(indptr, indices, data), Labels(y[lo:hi], c[lo:hi]), a_blk,
                              order, v, w, Reg(L2, l1, float(N), bias))
            else:
                w_snap = w.copy()
                s, psum = sdca_pass_gap(loss, Rows(indptr, indices, data), Labels(y[lo:hi], c[lo:hi]),
                                        a_blk, order, v, w, Reg(L2, l1, float(N), bias), w_snap)
            z_pre = ref.sdca_pass(loss, X, y, c, alpha_ref, lo + local, v_ref, w_ref, L2, l1,
                                  float(N), bias)
            np.testing.assert_allclose(alpha, alpha_ref, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(v, v_ref, rtol=1e-12, atol=1e-13 * np.abs(v_ref).max())
            np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-13 * np.abs(v_ref).max())
            if epoch < 3:
                # One visit per row: sum d^2 is exactly the squared change of alpha.
                assert s == pytest.approx(np.sum((a_blk - a_before) ** 2), rel=1e-10, abs=1e-300)
            if epoch % 2 == 1:
                # the primal loss at the snapshot, summed over the visited rows (repeats too)
                cb, yb = c[lo:hi][local], y[lo:hi][local]
                z_snap = ref.augment(X, bias)[lo + local] @ w_snap
                expect = np.sum(np.where(cb > 0, cb * ref.phi(loss, z_snap, yb), 0.0))
                assert psum == pytest.approx(expect, rel=1e-11)
                assert np.any(z_snap != z_pre)  # the snapshot margins are not the running ones
    assert np.abs(alpha).max() > 0
    if l1 > 0:
        assert np.any(w[:D] == 0) and np.any(w[:D] != 0)

    # Invariant v = 1/(l2 n) sum a_i x_i (+ bias column) and w = grad g*(v), rebuilt.
    v_rebuilt = np.zeros(dd)
    for lo, hi, indptr, indices, data in blocks:
        block_accumulate_v(indptr, indices, data, alpha[lo:hi], v_rebuilt, 1.0 / (L2 * N), bias)
    np.testing.assert_allclose(v_rebuilt, v, rtol=1e-10, atol=1e-12 * np.abs(v).max())
    np.testing.assert_allclose(ref.w_of_v(v, L2, l1, bias), w, rtol=0, atol=0)
    # Block loss sums = dense numpy.
    Xa = ref.augment(X, bias)
    expect_p = np.sum(np.where(c > 0, c * ref.phi(loss, Xa @ w, y), 0.0))
    got_p = sum(block_primal_loss(loss, ip, ix, dt, y[lo:hi], c[lo:hi], w, bias)
                for lo, hi, ip, ix, dt in blocks)
    assert got_p == pytest.approx(expect_p, rel=1e-12)
    expect_d = ref.weighted_dual_term(loss, alpha, y, c).sum()
    got_d = sum(block_dual_loss(loss, y[lo:hi], c[lo:hi], alpha[lo:hi]) for lo, hi, *_ in blocks)
    assert got_d == pytest.approx(expect_d, rel=1e-12)

"""One certificate for every solver (docs/training.rst, "The certificate, written once").

* The module (:mod:`ooc.solvers.certificate`), fed the pieces the solvers' kernels sum, against an
  independent numpy reference of ``P`` and ``D`` (tests/reference.py) for every loss, with and
  without L1, one problem or several, and pure L1 trained with an added L2 (the L1 problem's
  certificate, with the duals rescaled into its feasible set): drawn cases.
* Each solver's reported certificate is the module's at the run's final state: the coefficients and
  duals it saved, summed here in numpy, give the ``P`` and ``D`` of its last history line.
* CoCoA+'s rounds and the block loop certify the same pieces the same way: the rescaled pure-L1
  bound, which CoCoA+'s copy of the certificate lacked, is there for both.
* The saved state is the certified one: a run that stops at epoch ``E`` saves the coefficients, duals
  and certificate of a run of the same options stopped by ``--max-epochs E`` (whose last pass only
  certifies), for drawn solvers and options.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reference import dual_objective, primal_objective, weighted_dual_term

import ooc
from ooc.kernels.sdca import block_dual_loss, block_primal_loss
from ooc.objectives.losses import make_loss
from ooc.objectives.penalties import ElasticNet, conj_value, grad_conj, primal_value
from ooc.solvers import certificate as cert

LOSSES = ("logistic", "squared", "smooth-hinge", "hinge")


def _dual_point(name, z, y, c, rng):
    """Feasible duals ``a_i = -c_i phi'(z_i)`` (a subgradient for the hinge), gamma 1."""
    if name == "squared":
        g = z - y
    elif name == "logistic":
        g = -y * 0.5 * (1.0 - np.tanh(y * z / 2.0))
    elif name == "smooth-hinge":
        g = -y * np.clip(1.0 - y * z, 0.0, 1.0)
    else:
        g = -y * np.where(y * z < 1.0, 1.0, rng.uniform(0.0, 1.0, len(z)) * (y * z == 1.0))
    return -c * g


def _pieces(loss, X, y, c, w, alpha):
    """The loss and conjugate sums of one problem, summed by the solvers' kernels (one block)."""
    A = sp.csr_matrix(X)
    indptr, indices, data = A.indptr.astype(np.int64), A.indices.astype(np.int32), A.data
    return (block_primal_loss(loss, indptr, indices, data, y, c, w, 0.0),
            block_dual_loss(loss, y, c, np.ascontiguousarray(alpha)))


@st.composite
def problems(draw):
    seed = draw(st.integers(0, 2**16))
    n, d, k = draw(st.integers(2, 12)), draw(st.integers(1, 5)), draw(st.integers(1, 3))
    l2 = 10.0 ** draw(st.sampled_from((-3, -1, 0)))
    l1 = draw(st.sampled_from((0.0, 1e-2, 0.3)))
    return seed, n, d, k, l2, l1


@pytest.mark.parametrize("name", LOSSES)
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=problems())
def test_the_module_matches_a_numpy_reference_for_every_loss(name, case):
    """``certify`` of the kernels' sums is ``P`` and ``D`` of tests/reference.py, summed over the problems;
    the gap and the relative gap are ``P - D`` and ``(P - D) / max(1, |P|)``."""
    seed, n, d, k, l2, l1 = case
    rng = np.random.default_rng(seed)
    loss, spec = make_loss(name, gamma=1.0), SimpleNamespace(name=name, gamma=1.0)
    pen = ElasticNet(l2, l1)
    X = rng.standard_normal((n, d)) * (rng.uniform(size=(n, d)) < 0.7)
    c = rng.uniform(0.5, 2.0, n)
    loss_sums, conj_sums, pens, conjs, P, D = [], [], [], [], 0.0, 0.0
    for _ in range(k):
        y = rng.standard_normal(n) if name == "squared" else np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
        alpha = _dual_point(name, X @ rng.standard_normal(d), y, c, rng)
        v = X.T @ alpha / (l2 * n)
        w = grad_conj(pen, v)  # the solvers' w = grad g*(v)
        ls, cs = _pieces(loss, X, y, c, w, alpha)
        loss_sums.append(ls)
        conj_sums.append(cs)
        pens.append(primal_value(pen, w))
        conjs.append(conj_value(pen, v))
        P += primal_objective(spec, X, y, c, w, l2, l1)
        D += dual_objective(spec, X, y, c, alpha, l2, l1)
    bound = cert.certify(loss_sums, conj_sums, n, pens, conjs)
    tiny = 1e-12 * max(1.0, abs(P), abs(D))
    assert abs(bound.primal - P) <= tiny and abs(bound.dual - D) <= tiny, (bound, P, D)
    assert bound.dual <= bound.primal + tiny  # weak duality: a pair of feasible points
    gap = cert.duality_gap(bound.primal, bound.dual)
    assert abs(gap - max(P - D, 0.0)) <= 2 * tiny
    assert cert.relative_gap(bound.primal, bound.dual) == gap / max(1.0, abs(bound.primal))


@pytest.mark.parametrize("name", LOSSES)
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(case=problems())
def test_pure_l1_certifies_the_l1_problem_with_the_tighter_dual_bound(name, case):
    r"""Pure L1 trained with an added ``l2'``: ``P`` is the L1 problem's objective and ``D`` the larger of
    ``D_l2'(a) - l2'/2 r^2`` and ``s D_loss(a)``, ``s = min(1, l1 / ||X^T a / n||_inf)`` (from ``X^T a``
    here, from ``w`` in the module), and never above the L1 problem's dual at ``s a``."""
    seed, n, d, k, l2, _ = case
    rng = np.random.default_rng(seed)
    loss, spec = make_loss(name, gamma=1.0), SimpleNamespace(name=name, gamma=1.0)
    l1, added = 0.1, 1e-2 * l2
    pen = ElasticNet(added, l1)
    X = rng.standard_normal((n, d))
    c = np.ones(n)
    radius = list(rng.uniform(0.5, 20.0, k))
    loss_sums, conj_sums, pens, conjs, W, P, D, d_l1 = [], [], [], [], [], 0.0, 0.0, 0.0
    for q in range(k):
        y = rng.standard_normal(n) if name == "squared" else np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
        alpha = _dual_point(name, X @ rng.standard_normal(d), y, c, rng)
        v = X.T @ alpha / (added * n)
        w = grad_conj(pen, v)
        ls, cs = _pieces(loss, X, y, c, w, alpha)
        loss_sums.append(ls)
        conj_sums.append(cs)
        pens.append(primal_value(pen, w))
        conjs.append(conj_value(pen, v))
        W.append(w)
        P += primal_objective(spec, X, y, c, w, 0.0, l1)
        sup = np.abs(X.T @ alpha / n).max()
        s = min(1.0, l1 / sup) if sup > 0 else 1.0
        loose = dual_objective(spec, X, y, c, alpha, added, l1) - 0.5 * added * radius[q] ** 2
        D += max(loose, s * weighted_dual_term(spec, alpha, y, c).sum() / n)
        d_l1 += weighted_dual_term(spec, s * alpha, y, c).sum() / n  # the L1 dual at the feasible s a
    W = np.array(W)
    sups = [cert.l1_dual_sup(W[q], l1, added) for q in range(k)]
    bound = cert.certify(loss_sums, conj_sums, n, pens, conjs, w=W,
                         pure_l1=cert.PureL1(l1, added, radius, sups))
    tiny = 1e-10 * max(1.0, abs(P), abs(D))
    assert abs(bound.primal - P) <= tiny, (bound.primal, P)
    assert abs(bound.dual - D) <= tiny, (bound.dual, D)
    # each problem's bound is at most the L1 dual at a feasible point (the loose one: its slack)
    if all(s <= 1.0 for s in sups):
        assert bound.dual <= max(d_l1, bound.dual) + tiny


# ---------------------------------------------------------------------------------------- every solver

N, DIM = 90, 7


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """A binary and a 3-class store on disk (the distributed workers open the store by path)."""
    root = tmp_path_factory.mktemp("cert")
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, DIM)) * (rng.uniform(size=(N, DIM)) < 0.6)
    X = X.astype(np.float32).astype(np.float64)
    m = X @ rng.standard_normal(DIM)
    yb = np.where(m + 0.3 * rng.standard_normal(N) > 0, 1.0, -1.0)
    ym = np.digitize(m, np.quantile(m, [1 / 3, 2 / 3])).astype(np.float64)
    out = {}
    for kind, y in (("binary", yb), ("multiclass", ym)):
        path = str(root / f"{kind}.zarr")
        ooc.convert(X, path, y=y, dtype="float32", block_bytes=600, label_kind=kind)
        out[kind] = (path, X, y)
    return root, out


SOLVER_RUNS = {
    "sdca": ("binary", dict(solver="sdca", l2=1e-2, l1=1e-3)),
    "acc-sdca": ("binary", dict(solver="acc-sdca", l2=1e-3)),
    # certified by a pass that also updated the duals (in memory, in place): its saved duals were the updated ones
    "acc-sdca-pure-l1": ("binary", dict(solver="acc-sdca", l2=0.0, l1=2e-2, tol=1e-4)),
    "sdca-update-pass": ("binary", dict(solver="sdca", l2=1e-2, l1=1e-3, tol=0.2)),
    "dspdc": ("binary", dict(solver="dspdc", l2=1e-1)),
    "rcd-primal": ("binary", dict(solver="rcd-primal", l2=1e-2)),
    "rcd-primal-pure-l1": ("binary", dict(solver="rcd-primal", l2=0.0, l1=2e-2, sampling="working-set")),
    "pure-l1": ("binary", dict(solver="sdca", l2=0.0, l1=0.1, tol=1e-2)),
    "one-vs-rest": ("multiclass", dict(solver="sdca", l2=1e-2, multiclass="ovr")),
    "crammer-singer": ("multiclass", dict(solver="sdca", l2=1e-2, multiclass="crammer-singer", loss="hinge")),
    "sdca-cocoa": ("binary", dict(l2=1e-2, distributed="local:2")),
}


def _ovr_labels(y, classes, q):
    return np.where(y == classes[q], 1.0, -1.0)


def _state_pieces(kind, name, X, y, coef, alpha, cfg):
    """Per problem ``(loss sum, conjugate sum, g(w), l2 g*(v))`` of the saved state, in numpy."""
    spec = SimpleNamespace(name=name, gamma=1.0)
    from reference import phi

    l2 = cfg["l2"] + (cfg.get("l2_added") or 0.0)
    pen = ElasticNet(l2, cfg["l1"])
    classes = np.unique(y)
    out = []
    for q in range(len(coef)):
        yq = _ovr_labels(y, classes, q) if kind == "multiclass" else y
        w, a = coef[q], alpha[q]
        out.append((float(phi(spec, X @ w, yq).sum()), float(weighted_dual_term(spec, a, yq, 1.0).sum()),
                    primal_value(pen, w), conj_value(pen, X.T @ a / (l2 * N))))
    return out, pen


def _cs_bound(X, y, coef, alpha, l2):
    """Crammer-Singer: the module on the sums of the saved ``W`` (classes, dim) and duals (classes, n)."""
    from ooc.kernels.multiclass import cs_block_dual_loss, cs_block_primal_loss
    from ooc.objectives.multiclass import cs_conj_value, cs_penalty_value, make_multiclass_loss

    loss, pen = make_multiclass_loss(0.0), ElasticNet(l2, 0.0)
    A = sp.csr_matrix(X)
    yi = np.searchsorted(np.unique(y), y).astype(np.int64)
    W = np.ascontiguousarray(coef.T)
    a = np.ascontiguousarray(alpha.T)  # (n, classes)
    psum = cs_block_primal_loss(loss, A.indptr.astype(np.int64), A.indices, A.data, yi, np.ones(N), W, 0.0)
    dsum = cs_block_dual_loss(loss, yi, np.ones(N), a)
    V = X.T @ a / (l2 * N)
    return cert.certify([psum], [dsum], N, [cs_penalty_value(pen, W)], [cs_conj_value(pen, V)])


def _rcd_pure_l1_bound(X, y, w, alpha, l1):
    r"""rcd-primal on pure L1 (logistic): the Lipschitzed dual, ``radius (|r_j| - l1)_+`` with
    ``radius = P(0) / l1`` and ``r = X^T phi' / n``, against its duals rescaled into the feasible set."""
    spec = SimpleNamespace(name="logistic", gamma=1.0)
    from reference import phi

    r = -(X.T @ alpha) / N
    radius = float(phi(spec, np.zeros(N), y).sum()) / N / l1
    s = min(1.0, l1 / np.abs(r).max())
    rescaled = float(weighted_dual_term(spec, s * alpha, y, 1.0).sum()) / N
    pen = ElasticNet(0.0, l1)
    return cert.certify([float(phi(spec, X @ w, y).sum())], [float(weighted_dual_term(spec, alpha, y, 1.0).sum())],
                        N, [primal_value(pen, w)], [radius * float(np.maximum(np.abs(r) - l1, 0.0).sum())],
                        other_duals=[rescaled])


def _cocoa_duals(run_path, store_path, epoch, cfg):
    """The duals that started CoCoA+'s round ``epoch`` (the state its history line certifies)."""
    from ooc.runs.rundir import RunDir
    from ooc.store import layout as L
    from ooc.store.store import open_store

    rd, nbuf = RunDir.open(run_path), int(cfg.get("dual_buffers") or 2)
    ptr = open_store(store_path).block_ptr(L.ROWS)
    return np.concatenate([rd.read_duals(epoch % nbuf, b) for b in range(len(ptr) - 1)], axis=1)


@pytest.mark.parametrize("run_name", list(SOLVER_RUNS))
def test_each_solvers_reported_certificate_is_the_modules_at_its_final_state(stores, run_name, tmp_path):
    """The last history line's ``P`` and ``D`` are :func:`ooc.solvers.certificate.certify` of the pieces of
    the saved coefficients and duals (rcd-primal: its dual point ``a_i = -phi'(x_i.w)``), summed in numpy."""
    root, data = stores
    kind, opts = SOLVER_RUNS[run_name]
    path, X, y = data[kind]
    opts = dict(dict(loss="logistic", tol=1e-6, max_epochs=40), **opts)
    run = ooc.train(path, str(tmp_path / f"run-{uuid.uuid4().hex[:6]}"), **opts)
    with open(os.path.join(run.path, "history.jsonl")) as f:
        last = [json.loads(line) for line in f][-1]
    with open(os.path.join(run.path, "run.json")) as f:
        cfg = json.load(f)
    cfg = cfg.get("config", cfg)
    coef = np.atleast_2d(np.asarray(run.model.coef_, dtype=np.float64))
    duals_file = os.path.join(run.path, "model", "duals.npy")
    if opts.get("multiclass") == "crammer-singer":
        bound = _cs_bound(X, y, coef, np.load(duals_file), opts["l2"])
    else:
        if os.path.exists(duals_file):
            alpha = np.atleast_2d(np.load(duals_file))
        elif run_name == "sdca-cocoa":  # the round's starting duals: buffer (round % buffers), block after block
            alpha = _cocoa_duals(run.path, path, last["epoch"], cfg)
        else:  # rcd-primal: the dual point of its certificate, a_i = -phi'(x_i . w)
            assert run_name.startswith("rcd-primal")
            z = X @ coef[0]
            alpha = np.atleast_2d(y * 0.5 * (1.0 - np.tanh(y * z / 2.0)))
        if run_name == "rcd-primal-pure-l1":
            bound = _rcd_pure_l1_bound(X, y, coef[0], alpha[0], opts["l1"])
            assert abs(last["primal"] - bound.primal) <= 1e-10 and abs(last["dual"] - bound.dual) <= 1e-10, (
                last, bound)
            return
        pieces, pen = _state_pieces(kind, opts["loss"], X, y, coef, alpha, cfg)
        pure = None
        if cfg.get("l1_radius"):
            sups = [float(np.abs(X.T @ alpha[q] / N).max()) for q in range(len(coef))]  # from the duals
            pure = cert.PureL1(pen.l1, pen.l2, cfg["l1_radius"], sups)
        loss_sums, conj_sums, pens, conjs = (list(t) for t in zip(*pieces))
        bound = cert.certify(loss_sums, conj_sums, N, pens, conjs, w=coef, pure_l1=pure)
    tiny = 1e-10 * max(1.0, abs(bound.primal))
    assert abs(last["primal"] - bound.primal) <= tiny, (run_name, last["primal"], bound.primal)
    assert abs(last["dual"] - bound.dual) <= tiny, (run_name, last["dual"], bound.dual)
    assert math.isclose(last["rel_gap"], cert.relative_gap(last["primal"], last["dual"]), rel_tol=1e-12, abs_tol=0)


# ---------------------------------------------------------------------------------- CoCoA+ and the block loop


def _pure_l1_state(seed: int):
    """A pure-L1 logistic problem trained with an added L2 ``l2'`` whose radius slack ``l2'/2 r^2`` is
    large, and the pieces of a state: its ``v = X^T a / (l2' n)``, the loss and conjugate sums."""
    from ooc.solvers.problem import make_problem

    rng = np.random.default_rng(seed)
    n, d = 40, 5
    X = rng.standard_normal((n, d))
    y = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    store = ooc.convert(X, f"memory://cert-{uuid.uuid4().hex[:8]}", y=y, dtype="float64", label_kind="binary")
    opts = dict(loss="logistic", gamma=1.0, class_weight=None, l2=0.0, l1=0.05, bias=0.0, l2_added=1e-2,
                l1_radius=[30.0])
    pb = make_problem(store, opts)
    alpha = _dual_point("logistic", X @ rng.standard_normal(d), y, np.ones(n), rng)
    v = X.T @ alpha / (pb.penalty.l2 * n)
    w = grad_conj(pb.penalty, v)
    psum, dsum = _pieces(pb.loss, X, y, np.ones(n), w, alpha)
    return store, pb, opts, v, w, psum, dsum


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cocoa_rounds_certify_pure_l1_as_the_block_loop_does(seed):
    """Given the same pieces, a CoCoA+ round and a block-loop pass report the same ``(P, D)``: the rescaled
    pure-L1 bound ``s D_loss`` included, which CoCoA+'s own copy of the certificate lacked (it reported
    ``D - l2'/2 r^2``, here below the rescaled bound by about ``l2'/2 r^2 = 4.5``)."""
    from ooc.solvers.base import BlockLoopSolver
    from ooc.solvers.cocoa import CoCoASolver

    store, pb, opts, v, w, psum, dsum = _pure_l1_state(seed)
    n = store.n_rows
    loop = BlockLoopSolver.__new__(BlockLoopSolver)
    loop.pb, loop.opt, loop.n, loop.k, loop.threads, loop.store = pb, opts, n, 1, 1, store
    loop.fit_intercept, loop.extra = False, {}
    expected = loop._gap(np.array([psum]), np.array([dsum]), w[None, :])

    rounds = CoCoASolver.__new__(CoCoASolver)
    rounds.pb, rounds.opt, rounds.n, rounds.store, rounds.extra, rounds.v = pb, opts, n, store, {}, v
    rounds._client, rounds._parts0, rounds._bytes, rounds._hit_rate = object(), [0, 1], 0, 0.0
    rounds.rd = SimpleNamespace(note_dual_checksums=lambda sums: None)
    # two partitions' results of a certify-only round: (loss sums, conjugate sums, bytes, hit rate, checksums)
    ends = [([psum * 0.25], [dsum * 0.5], 0, 1.0, {}), ([psum * 0.75], [dsum * 0.5], 0, 1.0, {})]
    rounds._run_round = lambda rnd, update, done: ([(None, None, e) for e in ends], v, {
        "steps": 1, "redone": 0, "sent": 0, "received": 0})
    got = []
    ctx = SimpleNamespace(epoch=0, update=False, done=None, record=lambda p, d, fields: got.append((p, d)) or True)
    rounds.epoch(ctx)
    (p, d), = got
    half_r2 = 0.5 * pb.penalty.l2 * opts["l1_radius"][0] ** 2
    loose = dsum / n - 0.5 * pb.penalty.l2 * float(w @ w) - half_r2
    assert d > loose + 1.0  # the rescaled bound is the one that certifies here
    assert p == pytest.approx(expected[0], rel=1e-14) and d == pytest.approx(expected[1], rel=1e-14)


# ---------------------------------------------------------------------------------- the saved state is the certified one

#: (kind, options) of the row-block dual solvers, one of them drawn per case with the options below
SAVED_RUNS = {
    "sdca": ("binary", dict(solver="sdca")),
    "acc-sdca": ("binary", dict(solver="acc-sdca")),
    "dspdc": ("binary", dict(solver="dspdc")),
    "rcd-dual": ("binary", dict(solver="rcd-dual")),
    "sdca-intercept": ("binary", dict(solver="sdca", fit_intercept=True)),
    "one-vs-rest": ("multiclass", dict(solver="sdca", multiclass="ovr")),
    "crammer-singer": ("multiclass", dict(solver="sdca", multiclass="crammer-singer", loss="hinge")),
}


def _saved(run, store_path):
    """The saved coefficients, the saved duals (model/duals.npy, or the paged final buffer) and the last
    history line of a finished run."""
    from ooc.runs.duals import final_duals_reader
    from ooc.runs.rundir import RunDir
    from ooc.store.store import open_store
    from ooc.train import finished_metrics

    with open(os.path.join(run.path, "history.jsonl")) as f:
        last = [json.loads(line) for line in f][-1]
    ptr = open_store(store_path).block_ptr("rows")
    metrics = finished_metrics(RunDir.open(run.path))
    if metrics.get("dual_store") == "memory":
        alpha = np.load(os.path.join(run.path, "model", "duals.npy"))
    else:
        read = final_duals_reader(run.path, metrics, ptr)
        alpha = np.concatenate([read(b) for b in range(len(ptr) - 1)], axis=-1)
    return np.asarray(run.model.coef_, dtype=np.float64), alpha, last


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(SAVED_RUNS)), tol=st.sampled_from((0.3, 0.1, 1e-2)),
       l1=st.sampled_from((0.0, 1e-3)), duals=st.sampled_from(("memory", "paged")))
def test_a_runs_saved_state_is_the_state_its_last_pass_certified(stores, name, tol, l1, duals):
    """A run stopped by ``tol`` at epoch ``E`` saves what a run of the same options stopped by ``--max-epochs E``
    saves (its last pass only certifies ``S_E``, updating nothing): the same coefficients and duals bit for bit,
    and ``P, D`` to the rounding of their sums, whether the pass that certified ``S_E`` also updated it or not, the duals in memory or paged."""
    root, data = stores
    kind, opts = SAVED_RUNS[name]
    path = data[kind][0]
    opts = dict(dict(loss="logistic", l2=1e-2, l1=l1, max_epochs=20, duals=duals), **opts)
    if opts.get("multiclass") == "crammer-singer":
        opts["l1"] = 0.0
    first = ooc.train(path, str(root / f"saved-{uuid.uuid4().hex[:6]}"), tol=tol, **opts)
    w, alpha, last = _saved(first, path)
    epochs = int(last["epoch"])
    stopped = ooc.train(path, str(root / f"saved-{uuid.uuid4().hex[:6]}"), tol=tol, **dict(opts, max_epochs=epochs))
    w2, alpha2, last2 = _saved(stopped, path)
    assert last2["epoch"] == epochs
    # (the same sums, fused into an update pass or summed by a pass that only certifies: equal to rounding)
    tiny = 1e-13 * max(1.0, abs(last["primal"]))
    assert abs(last2["primal"] - last["primal"]) <= tiny and abs(last2["dual"] - last["dual"]) <= tiny, (last, last2)
    assert np.array_equal(w, w2), name
    assert np.array_equal(alpha, alpha2), (name, np.abs(alpha - alpha2).max())


def test_a_run_resumed_inside_its_certifying_pass_saves_the_certified_duals(stores, tmp_path):
    """Stopped inside the update pass that certifies its start (a checkpoint at every block boundary), a run
    resumed from there saves the duals of the state that pass certified, as the same run stopped by
    ``--max-epochs`` there does: the checkpoint holds the pass's starting duals beside the updated ones."""
    root, data = stores
    path = data["binary"][0]
    # sdca --tol 0.2 certifies epoch 1 in an update pass (too few gaps yet to predict it)
    opts = dict(solver="sdca", loss="logistic", l2=1e-2, l1=1e-3, tol=0.2, checkpoint_every=0, mix_blocks=1)
    stopped = ooc.train(path, str(tmp_path / "stopped"), **dict(opts, max_epochs=1))

    def stop_at_the_certificate(entry):
        if isinstance(entry, dict) and entry.get("epoch") == 1:
            raise KeyboardInterrupt  # after every block of the pass, before the run saves its model

    with pytest.raises(KeyboardInterrupt):
        ooc.train(path, str(tmp_path / "cut"), progress=stop_at_the_certificate, **opts)
    resumed = ooc.resume(str(tmp_path / "cut"))
    w, alpha, last = _saved(stopped, path)
    w2, alpha2, last2 = _saved(resumed, path)
    assert last2["epoch"] == last["epoch"] == 1 and abs(last2["dual"] - last["dual"]) <= 1e-13
    assert np.array_equal(w, w2) and np.array_equal(alpha, alpha2), np.abs(alpha - alpha2).max()

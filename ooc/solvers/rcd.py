r"""Randomized coordinate descent on the dual (``rcd-dual``, Quartz) and on the primal
(``rcd-primal``, NSync), with the samplings of :mod:`ooc.schedule.sampling`, and the ``auto`` rule.

Problem (``docs/training.rst``), ``X`` is ``n x d`` with rows = examples (the papers' ``X`` is ``d x n``)::

    P(w) = 1/n sum_i c_i phi(x_i . w, y_i) + l2/2 ||w||^2 + l1 ||w||_1

``rcd-dual`` (Csiba & Richtarik, Alg. 2 = Quartz with a serial sampling, ESO ``v_i = ||x_i||^2``)
    Row layout. A drawn example ``i`` moves by the maximiser of
    ``-c_i phi*(-(a_i+h)/c_i) - h x_i.w - ||x_i||^2 h^2 / (2 l2 n)``
    (:func:`ooc.objectives.losses.dual_step`: closed form for squared and (smooth) hinge), then
    ``v += h x_i / (l2 n)``, ``w = soft_threshold(v, l1/l2)``. For the logistic loss with
    uniform or importance sampling it takes the paper's step-size variant (Sec. 7, from
    Quartz): ``a_i <- a_i + eta_i (-c_i phi'(x_i.w) - a_i)`` with ``eta_i = theta / q_i`` and
    ``theta = min_l q_l l2 n / (c_l beta ||x_l||^2 + l2 n)``; under importance sampling
    ``eta_i = l2 n / (c_i beta ||x_i||^2 + l2 n)``, under uniform the smallest of these.
    (The paper prints ``Delta = eta (phi' + a)`` with ``eta = theta``: the sign is wrong for its
    own convention ``w = X a / (lambda n)``, where ``a* = -phi'(z*)``, and the step of Quartz
    is ``theta / q_i``, not ``theta``.) Options ``rcd_step='exact'|'quartz'`` override.
    The duality gap of the state at the start of each epoch is computed fused with the next
    pass (:mod:`ooc.solvers.base`), with the coordinate gaps ``G_i`` of every example.

``rcd-primal`` (Csiba & Richtarik, Alg. 1 = NSync with a serial sampling, ESO ``u_j = ||X_{:j}||^2``)
    Column layout; keeps the margins ``z = X w`` (``(k, n)`` floats, with the labels and
    weights: in memory when they fit in a quarter of ``memory``, otherwise in memory-mapped
    files under ``RUN/state/primal/`` that the OS pages by row range). A drawn feature ``j``
    takes the proximal step ``w_j <- soft_threshold(w_j - g_j / M_j, l1 / M_j)`` with
    ``g_j = 1/n sum_i c_i phi'(z_i) x_ij + l2 w_j`` and ``M_j = (beta u_j + l2 n) / n``
    (``u_j = sum_i c_i x_ij^2``; the paper's ``1/u'_j``, exact minimisation for the squared
    loss), then ``z += (w_j' - w_j) X_{:j}``. Smooth losses only (squared, logistic, smooth
    hinge). The intercept (bias ``B``) is a virtual dense column of value ``B``, sampled like
    the others. Each epoch ends with a pass over the row layout that recomputes ``z = X w``
    exactly (no drift), and certifies the gap of ``w`` against the dual point
    ``a_i = -c_i phi'(z_i)``: ``P(w) - D(a) = sum_j G_j`` with the coordinate gaps
    ``G_j = h_j(r_j) + l1 |w_j| + l2/2 w_j^2 + w_j r_j``, ``r_j = 1/n sum_i c_i phi'(z_i) x_ij``
    and ``h_j`` the conjugate of ``g_j = l1|.| + l2/2 (.)^2``. Pure L1 (``l2 = 0``) uses the
    Lipschitzing trick (Perekrestenko et al. Sec. 4.1, from Duenner et al.): ``g_j`` restricted
    to ``|w_j| <= B_rad = P(0) / l1`` (NSync is monotone, so ``l1 ||w||_1 <= P(w) <= P(0)``
    and no iterate nor the optimum leaves the box), whose conjugate ``B_rad (|r| - l1)_+`` is
    finite: Lasso and L1-logistic get a duality gap. That bound is loose when ``l1`` is
    small (``B_rad`` is huge), so pure L1 also evaluates the dual point rescaled into the
    feasible set (celer, skglm, the gap-safe rules of Fercoq, Gramfort & Salmon):
    ``a_i = -s c_i phi'(z_i)`` with ``s = min(1, l1 / ||r||_inf)``, where the penalty's
    conjugate is 0 and ``D = -1/n sum_i c_i phi*(s phi'(z_i))`` (one more ``O(n)`` loop over
    the margins after the pass; it tends to the optimal dual as ``w`` converges). The larger
    of the two duals certifies. (With ``l2 = 0`` the unpenalised intercept keeps the
    Lipschitzing term with the same radius: the certificate then assumes ``|w_B| <= B_rad``.)

``rcd-primal`` on threads (one problem, a fixed or per-epoch sampling; :mod:`ooc.kernels.rcd_threads`)
    A drawn *heavy* column (``HEAVY_NNZ`` nonzeros or more) takes the exact step with its rows cut
    over the threads; from ``LIGHT_ROUND_THREADS`` threads on, the draws between two heavy ones go
    over the threads in rounds, each row's curvature multiplied by the threads touching it (a step
    safe for every draw); below, one thread steps them. The gap pass splits the rows, each thread
    with its own ``A^T phi'``. One-vs-rest puts the classes on the threads (the same bits).

``rcd-primal --sampling working-set`` (pure L1; ``auto``'s choice for ``--l2 0``)
    Not random: after the gap pass of an epoch (the certificate above, which also gives every
    ``r_j``), the working set is the support of ``w`` and the features with the largest
    ``|r_j| / l1`` (``> 1``: ``w_j = 0`` violates optimality), ``max(100, 2 |support|)`` of
    them (skglm's rule; celer ranks by the same dual-feasibility margin). The epoch then
    solves the problem restricted to their columns (and the intercept) until its gap, with its
    own rescaled dual point, is at most 0.3 times the full problem's gap: by proximal Newton
    steps when the loss has a second derivative (squared, logistic, smooth hinge: GLMNET, as
    LIBLINEAR ``-s 6`` and skglm's ProxNewton; the exponentials are computed once per row and
    step, the quadratic model's CD passes need none; prox-CD passes where the line search
    accepts no step), else by cyclic prox-CD passes (a registered loss without ``curv``; the
    gap checked every 5 passes), at most 500 steps or passes. The columns are gathered from
    the column blocks once per epoch and kept while they fit in half the block cache, read
    again for each pass otherwise (same iterates). The working set is a function of ``w``, so
    a resume repeats it exactly. An "epoch" here is one outer iteration: the history gives its
    ``ws_size`` and the ``inner_epochs`` that produced the state.

Epochs and the out-of-core draw
    An epoch is ``n`` coordinate updates (dual) or ``dim`` (primal: ``d`` features, plus the
    intercept). The paper's serial sampling draws each update i.i.d. with probability
    ``p_i``. Out of core the draw is two-level: blocks get probabilities ``P(b) = sum_{i in b}
    p_i``; the number of the epoch's updates that fall in each block is drawn once,
    ``(m_b) ~ Multinomial(n_updates, P)``; blocks are visited in a seeded shuffled order, and
    in block ``b`` (resident) ``m_b`` coordinates are drawn i.i.d. with
    ``P(i | b) = p_i / P(b)`` (sum tree). Each update is therefore coordinate ``i`` with the
    paper's marginal probability ``P(b) P(i | b) = p_i``, and the multiset of an epoch's
    updates has exactly the law of ``n_updates`` i.i.d. draws from ``p`` (a multinomial
    split first by block, then within it); only their order is changed: grouped by block,
    which is what lets one read of a block serve all its updates. Blocks with ``m_b = 0``
    are not read by ``rcd-primal`` (``rcd-dual`` reads every row block each pass: the fused
    gap needs them).
    The adaptive samplings need the state: ``gap-per-epoch`` uses the coordinate gaps of
    the state at the start of the epoch inside a block (exact), and the block gap masses
    for ``P(b)`` (exact for ``rcd-primal``; for ``rcd-dual`` the masses of the previous
    epoch's state, the fused gap computing them only during the pass). The per-step
    samplings (``adaptive``, ``ada-gap``, ...) keep the resident block's scores in sum trees,
    rescore the coordinate just moved after each step and the whole block a few times per
    pass (:mod:`ooc.kernels.rcd_lazy`: ``O(nnz_i + log m)`` per step, not a pass per step),
    mixed with a uniform share ``gap_floor`` so that no coordinate starves; across blocks
    they use the gap masses. With one block (data that fit) the fixed samplings are the
    paper's exactly.

Gap-guided paging (``paging='gap'``)
    Each epoch records the duality-gap mass of every block (``sum G_i`` over its
    coordinates). With ``paging='gap'`` the next epoch draws blocks with
    ``P(b) = (1 - f) mass_b / sum mass + f base_b`` (``f = gap_floor``, default 0.1, ``base``
    the blocks' shares under the fixed sampling: no block starves), and inside a block the
    fixed sampling; the marginal is still ``P(b) P(i | b)``.

The ``auto`` rule (:func:`ooc.solvers.registry.auto_solver`; ``ooc info`` reports ``C_P``, ``C_D``)
    1. Crammer-Singer multiclass -> ``sdca``.
    2. ``l1 > 0`` and ``l2 = 0`` (Lasso, L1-logistic) -> ``rcd-primal`` (the dual is not
       defined; needs a smooth loss), with ``--sampling working-set`` unless another sampling
       or paging was asked for.
    3. Otherwise the face-off (Csiba & Richtarik, Thm. 2 and eq. 15-16): with importance
       sampling the total work is ``T_P = nnz + beta/(l2 n) C_P`` for the primal and
       ``T_D = nnz + beta/(l2 n) C_D`` for the dual, with ``C_P = sum_j ||X_{:j}||_0
       ||X_{:j}||^2`` and ``C_D = sum_i ||x_i||_0 ||x_i||^2`` (our orientation). If
       ``C_P < C_D``, the loss is smooth and the store has its column layout ->
       ``rcd-primal``; else the dual side -> ``sdca`` (Prox-SDCA, dual coordinate ascent
       with shuffled passes, which in practice beats i.i.d. draws), or ``rcd-dual`` when a
       non-uniform ``--sampling`` is asked for.
    4. On the dual side with a smooth loss and uniform sampling, ``acc-sdca`` instead of
       ``sdca`` when the condition number ``R^2 / (gamma l2)`` exceeds ``10 n`` (``gamma``
       = 1 / smoothness: 4 logistic, 1 squared, ``--gamma`` smooth hinge), i.e. when
       ``l2 < R^2 / (10 gamma n)``: that is where the accelerated outer loop runs (below it
       acc-sdca is plain Prox-SDCA) and where it needed several times fewer passes in
       ``scripts/bench_acc_sdca.py``. The hinge stays with ``sdca`` (its smoothed
       acceleration was slower in our measurements).

    ``dgpd`` and ``dspdc`` are never chosen automatically: DGPD pays off when both the primal
    and the dual solutions are sparse (hinge-type loss and a large ``l1``), which store
    statistics cannot tell in advance.

Resume is exact: every random number is a pure function of ``(seed, epoch, block)``, and the
state at a block boundary (``w``, duals or margins, the epoch's block counts and gaps) is in
the checkpoint.
"""

from __future__ import annotations

from ..schedule.sampling import PER_STEP, normalize_sampling

PAGINGS = ("shuffled", "gap")
#: Coordinates at a time of rcd-primal's gap pass's elementwise expressions (their temporaries: O(slice), not O(d)).
GAP_SLICE = 1 << 16


def sampling_options(options: dict, k: int) -> tuple[str, str, float]:
    sampling = normalize_sampling(options.get("sampling") or "uniform")
    paging = options.get("paging") or "shuffled"
    if paging not in PAGINGS:
        raise ValueError(f"paging {paging!r}: expected one of {', '.join(PAGINGS)}")
    if sampling in PER_STEP and k > 1:
        raise ValueError(f"--sampling {sampling} recomputes the distribution after every step and is "
                         "implemented for one problem (binary or regression), not one-vs-rest")
    return sampling, paging, float(options.get("gap_floor", 0.1))

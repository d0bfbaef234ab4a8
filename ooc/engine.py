"""The one run loop: every solver is driven by :func:`run`.

A solver supplies its state and an epoch step; the engine owns everything around them,
written once here: starting fresh or from the last checkpoint, the checkpoint cadence and
its metadata, the history line of every certified state, the relative gap and what
"converged" means, progress calls, the result dict, and the cleanup of the solver's
threads on any exit (an error, ``KeyboardInterrupt``, a full disk).

The contract (:class:`ooc.solvers.base.StoreSolver` documents the methods):

* Epoch ``e`` starts from the state ``S_e`` reached after ``e`` epochs. The solver's
  :meth:`epoch` step certifies ``S_e`` by calling :meth:`EpochContext.record` with
  ``P(S_e)`` and ``D(S_e)`` once (not again when it resumes inside an epoch whose state a
  split solver certified before the checkpoint), and, when the run goes on, updates the state
  towards ``S_(e+1)``. A *split* solver (rcd-primal, dgpd) certifies first and updates
  only when :meth:`~EpochContext.record` says the run goes on; a *fused* solver (the
  row-block dual solvers, CoCoA+) sums the certificate of ``S_e`` during the same pass
  that updates it and keeps ``S_e`` (its duals and the snapshot of ``w``) intact until
  the pass is certified, so the result can be ``S_e`` even after its update ran.
* "Converged" always means ``gap <= tol * max(1, |P|)`` (docs/training.rst): the run then returns
  ``S_e``. With ``e = max_epochs`` the pass only certifies (no update) and the run returns
  that state, converged or not.
* Fused solvers that set ``predicts_certified`` get certify-only passes when the last two
  gaps predict that ``S_e`` is already within ``tol`` (:func:`predicts_converged`); a wrong
  prediction records nothing and the same epoch is run again with its update.
* Checkpoints: one at the start, one at the end of every epoch, and, between, whenever the
  solver calls :meth:`EpochContext.tick` at a safe point and ``checkpoint_every`` seconds
  have passed. The engine's metadata (``seq, epoch, seconds, state_seconds, history_len,
  bytes_read``) is merged with the solver's own (:meth:`checkpoint_state`).
* A run's final state is always durable (docs/training.rst, "Runs, checkpoints and resume"):
  when the checkpoint of an epoch end was skipped (``epoch_checkpoint_optional``), the state the run
  stops at (converged, ``max_epochs``, early stop) is checkpointed as it stands after its
  certifying pass, the history line of that certificate left out of the checkpoint so that a
  resume certifies it again from there (no epoch is run again). A stop signal (Ctrl-C,
  SIGTERM) meanwhile waits for the next safe point (:func:`ooc.interrupts.defer`), where the
  state is checkpointed before the run stops.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import numpy as np

from . import interrupts
from .numtext import distinct
from .objectives.losses import loss_spec
from .solvers.certificate import GAP_ROUNDING, duality_gap, relative_gap  # noqa: F401  (GAP_ROUNDING re-exported)


class Certificate(NamedTuple):
    """The objectives of a state and how far it is from optimal.

    ``gap = P - D`` (``inf`` when ``D`` is not finite; 0 when ``D`` is above ``P`` by no more than
    :data:`ooc.solvers.certificate.GAP_ROUNDING`), and the relative gap ``gap / max(1, |P|)`` that ``tol``
    is compared with: :func:`ooc.solvers.certificate.duality_gap`, :func:`~ooc.solvers.certificate.relative_gap`.
    """

    primal: float
    dual: float

    @property
    def gap(self) -> float:
        return duality_gap(self.primal, self.dual)

    @property
    def rel_gap(self) -> float:
        return relative_gap(self.primal, self.dual)


class Diverged(RuntimeError):
    """A state whose objective is not a finite number: the run cannot certify anything from it.

    A primal objective that is NaN or infinite (or a NaN dual) comes from values the arithmetic
    cannot hold: labels or features so large that a loss overflows (a squared loss of a label
    1e200), or steps that blew up. The run stops with one line naming the cause instead of going
    on to ``max_epochs`` and reporting ``primal inf`` as a finished run; its last checkpoint stays.
    """


class FalseCertificate(RuntimeError):
    """A dual objective above the primal by more than rounding: weak duality says ``D(a) <= P(w)``
    for every feasible pair, so the solver computed one of them from something other than the state
    it would save. Nothing is certified from it (the run stops; its last checkpoint stays)."""


def check_gap(cert: Certificate, epoch: int, solver: str) -> None:
    """Raise :class:`FalseCertificate` if ``cert``'s gap is negative (beyond :data:`GAP_ROUNDING`)."""
    if not cert.gap < 0.0:
        return
    raise FalseCertificate(f"internal error: solver {solver!r} certified epoch {epoch} with a dual objective "
                           f"{cert.dual!r} above its primal {cert.primal!r} (a negative gap, which no correct "
                           "certificate has); please report it; another --solver trains the same problem")


def check_finite(cert: Certificate, epoch: int) -> None:
    """Raise :class:`Diverged` unless ``cert``'s primal objective is finite and its dual is a number
    (``-inf`` is a dual's honest value where the dual point is infeasible: pure L1)."""
    if math.isfinite(cert.primal) and not math.isnan(cert.dual):
        return
    raise Diverged(f"training diverged at epoch {epoch}: the primal objective is {cert.primal!r} and the dual "
                   f"{cert.dual!r} (non-finite values: labels or feature values too large for the loss to be "
                   "computed, e.g. a squared loss of a label near 1e200; rescale the data or the labels)")


def check_state(arrays: dict, epoch: int) -> None:
    """Raise :class:`Diverged` if a solver state's in-memory arrays hold NaN or infinite values: a state
    that blew up is named, not written (a checkpoint holding one is refused when read back)."""
    for name, a in arrays.items():
        if isinstance(a, np.ndarray) and a.dtype.kind == "f" and not np.isfinite(a).all():
            raise Diverged(f"training diverged at epoch {epoch}: the solver's {name!r} holds non-finite values "
                           "(labels or feature values too large for the loss to be computed, e.g. a value near "
                           "1e200 whose square overflows; rescale the data or the labels)")


def predicts_converged(recent: list[float], tol: float) -> bool:
    """Whether the state a pass starts from is predicted to be certified.

    The gaps of the last two states give the contraction per pass ``r = g_e / g_(e-1)``
    (dual coordinate methods converge linearly). When ``g_e r <= tol`` the next pass only
    evaluates the gap: it then reads each block and sums the losses, skipping the coordinate
    updates, which would be thrown away once the state is certified. A wrong prediction
    costs that cheap pass, after which the state is updated as usual (the iterates never
    depend on it).
    """
    if len(recent) < 2 or not all(math.isfinite(g) and g > 0.0 for g in recent):
        return False
    r = recent[-1] / recent[-2]
    return r < 1.0 and recent[-1] * r <= tol


class Stall(NamedTuple):
    """Why a run stopped short of ``tol`` (:func:`diagnose`).

    ``kind`` is ``"rate"`` (the gap shrinks linearly; ``more_epochs`` would reach ``tol``),
    ``"slow"`` (it shrinks, too slowly to be worth resuming), ``"loose"`` (the objective stopped
    moving but the gap did not: the certificate lags), ``"stalled"`` (neither moves) or
    ``"few"`` (too few certified states to tell) or ``"exact"`` (``tol = 0``); ``text`` says it
    in one clause. ``at_least``: where the rate is not settled (:func:`diagnose`), the epochs
    that are needed at the least (``more_epochs`` then an estimate that may fall short); None
    where it is settled. ``gap``: the last certified relative gap (None where no rate was read).
    """

    kind: str
    text: str
    more_epochs: int | None = None
    at_least: int | None = None
    gap: float | None = None


#: An epoch end's checkpoint that may be skipped waits until the last one is older than its write time over
#: this share, so writing them takes at most about this share of the run. Measured on bench_threads' one-vs-rest
#: problem (58 x 2**18 weights, 145 MB a checkpoint, 0.5 s of copies, CRCs, writes and read-back): written at
#: every epoch end, 2 threads took 8.1-8.3 s against 6.4-6.5 s without them, the second core busy writing.
CHECKPOINT_SHARE = 0.05

#: states of the history the diagnosis looks at, and the most extra epochs it calls "resume"
DIAGNOSE_WINDOW = 5
DIAGNOSE_MAX_FACTOR = 10
#: fewest certified states a rate is read from (with 3, a first state far off the trend misled it)
DIAGNOSE_MIN_STATES = 4
#: A rate is settled when the per-epoch log-rates of the window, the last half and the last quarter of the
#: run agree within this ratio, over at least SETTLED_STATES states. Measured on 1619 stops of sdca and
#: acc-sdca runs (logistic, squared, smooth-hinge at l2 1e-2..1e-4, 300 and 1500 rows, tol 1e-3..1e-8):
#: where settled, the epochs needed were at most 1.23 times the advice (ADVICE_MARGIN of the
#: estimate); a looser 0.7 let through runs that needed 2.7 times it.
SETTLED_AGREEMENT = 0.85
SETTLED_STATES = 6


def rel_gap_of(entry: dict) -> float:
    """An entry's relative gap as a float: a history line or metrics read back hold ``null`` for a gap
    that was not finite (strict JSON), which is ``inf`` here."""
    v = entry.get("rel_gap")
    return math.inf if v is None else float(v)


def _rate(first: dict, last: dict) -> float:
    """The gap's mean factor per epoch from state ``first`` to state ``last`` (0: not known)."""
    epochs = max(int(last["epoch"]) - int(first["epoch"]), 1)
    g0, g1 = float(first["rel_gap"]), float(last["rel_gap"])
    return (g1 / g0) ** (1.0 / epochs) if g0 > 0 and g1 > 0 else 0.0


def _epochs_to(tol: float, gap: float, rate: float, rounding) -> int:
    """Epochs from ``gap`` to ``tol`` at ``rate`` per epoch (0 < rate < 1), rounded by ``rounding``."""
    return max(int(rounding(math.log(tol / gap) / math.log(rate))), 0)


#: What :func:`diagnose`'s three rates are measured over, in their order.
_RATE_SPANS = (f"the last {DIAGNOSE_WINDOW} certified states", "the last half of the run", "the last quarter of the run")


def _unsettled(rates: list[float], falling: list[float]) -> str:
    """Why the three rates of :func:`diagnose` (window, half, quarter) are not one settled rate: the span
    the falling ones moved between (printed apart: :func:`ooc.numtext.distinct`), and each span over
    which the gap did not fall (a rate of 1 or more) or that holds no earlier state to measure from (0)."""
    lo, hi = min(falling), max(falling)
    parts = []
    if lo != hi:
        a, b, _ = distinct(lo, hi, 1.0)
        parts.append(f"it moved between {a} and {b} per epoch over the last half of the run")
    for r, span in zip(rates, _RATE_SPANS):
        if r >= 1.0 - 1e-9:
            parts.append(f"the gap did not fall over {span}")
        elif r <= 0.0:
            parts.append(f"{span} holds no earlier state to measure a rate from")
    return "; ".join(parts)


def diagnose(history: list[dict], tol: float, unsteady: str | None = None) -> Stall:
    r"""Why the last certified state of ``history`` is not within ``tol``, from its last states.

    Over the last ``DIAGNOSE_WINDOW`` states, the gap's rate per epoch
    ``r = (g_last / g_first)^(1 / epochs)``: with ``r < 1`` the gap falls and the linear rate of
    coordinate methods predicts ``log(tol / g_last) / log r`` more epochs (``"rate"``, or
    ``"slow"`` when that is more than ``DIAGNOSE_MAX_FACTOR`` times the epochs run). The rate
    predicted is the slowest of those over the window, the last half and the last quarter of the
    epochs run (those that fall): rates slow down (a linear rate's constant that shrinks, a
    sublinear phase, acc-sdca's momentum whose gaps go up and down), and a fast last window had
    named 514 more epochs where 6900 were needed. With ``r >= 1`` the gap stalled: ``"loose"`` when
    the primal changed by less than ``tol`` (relative) in the window (the iterate is at its optimum
    as far as the objective shows; the dual bound is what lags), else ``"stalled"``.

    The estimate is *settled* when those three rates agree (:data:`SETTLED_AGREEMENT`, over at least
    :data:`SETTLED_STATES` states) and a linear rate is to be expected: ``unsteady`` None. Otherwise
    (``unsteady`` says why none is: a hinge loss's gap falls ever more slowly, CoCoA+'s rounds
    change with the workers; or the rates disagree, or the states are few) the rate is still
    changing, and the estimate may fall short by any factor: the text says so and gives a lower
    bound, ``at_least``, the epochs at the fastest rate between two consecutive states of the last
    half of the run (at least its last ``DIAGNOSE_WINDOW``).
    """
    if not tol > 0.0:
        return Stall("exact", "--tol 0 asks for a zero gap, which no run certifies")
    states = [h for h in history if math.isfinite(rel_gap_of(h))]
    if len(states) < DIAGNOSE_MIN_STATES:
        return Stall("few", f"only {len(states)} certified state(s): too few epochs to tell a rate")
    win = states[-DIAGNOSE_WINDOW:]
    first, last = win[0], win[-1]
    epochs = max(int(last["epoch"]) - int(first["epoch"]), 1)
    g1 = float(last["rel_gap"])
    rate = _rate(first, last)
    if 0.0 < rate < 1.0 - 1e-9:
        run = int(last["epoch"]) - int(states[0]["epoch"])
        rates, half = [rate], None
        for part in (2, 4):  # the trailing half and quarter of the epochs run
            start = next(h for h in states if int(h["epoch"]) >= int(last["epoch"]) - run // part)
            half = start if half is None else half
            rates.append(_rate(start, last) if start is not last else 0.0)
        falling = [r for r in rates if 0.0 < r < 1.0 - 1e-9]
        rate = max(falling)  # the slowest
        more = max(_epochs_to(tol, g1, rate, math.ceil), 1)
        why = unsteady
        if why is None and len(states) < SETTLED_STATES:
            why = f"only {len(states)} certified states"
        if why is None and (len(falling) < len(rates)
                            or math.log(rate) / math.log(min(falling)) < SETTLED_AGREEMENT):
            why = _unsettled(rates, falling)
        shown = distinct(rate, 1.0)[0]  # a rate just below 1 is not "1"
        if why is None:
            what = (f"the gap shrinks by {shown} per epoch, steadily over the last half of the run: an "
                    f"estimated {more} more epochs reach tol")
            at_least = None
        else:
            tail = states[states.index(half):]
            tail = states[-max(len(tail), DIAGNOSE_WINDOW):]
            steps = [r for r in (_rate(a, b) for a, b in zip(tail, tail[1:])) if 0.0 < r < 1.0 - 1e-9]
            # less one: a hinge's gap may drop at once when the last margins settle (measured: 2 in 10977 stops)
            at_least = max(min(_epochs_to(tol, g1, min(steps), math.floor) - 1, more), 1) if steps else 1
            what = (f"the gap shrinks by {shown} per epoch (its recent, slowest rate), but that rate is not "
                    f"settled ({why}): at least {at_least} more epochs reach tol, perhaps many more than the "
                    f"{more} estimated at that rate")
        if more > DIAGNOSE_MAX_FACTOR * max(int(last["epoch"]), 1):
            return Stall("slow", what + " (a slow rate)", more, at_least, g1)
        return Stall("rate", what, more, at_least, g1)
    moved = abs(float(first["primal"]) - float(last["primal"])) / max(1.0, abs(float(last["primal"])))
    if moved <= tol:
        return Stall("loose", f"the objective moved by {moved:.2g} (relative) in the last {epochs} epochs while "
                              f"the gap stayed at {g1:.3g}: the certificate (dual bound) is what lags", gap=g1)
    return Stall("stalled", f"the gap stalled at {g1:.3g} over the last {epochs} epochs", gap=g1)


#: The largest relative gap a stalled run is told may be at the precision of the data (a larger --tol then
#: the fix): a thousand times float32's unit roundoff (1.2e-7), above what pairwise sums of a float32
#: store's products round to at any row count (log2(n) roundoffs: 4e-6 at 2**32 rows), with room for the
#: conditioning of the problem. A gap above it (squared loss with --fit-intercept reported 1 for 100 epochs)
#: is a run that needs more epochs or another solver: a larger --tol would only accept a wrong model.
PRECISION_GAP = 1e-4

#: The resume command names this many times the epochs estimated: a settled rate's estimate fell short
#: by up to 1.23 times this margin (SETTLED_AGREEMENT); 1.2 had fallen short by 1.6 times.
ADVICE_MARGIN = 2.0


def unsteady(o: dict) -> str | None:
    """Why no linear rate of the gap is to be expected for the run of options ``o`` (None: one is)."""
    if not loss_spec(o["loss"]).smooth:
        return f"the {o['loss']} loss is not smooth: its gap falls ever more slowly"
    if o.get("distributed"):
        return "CoCoA+'s rounds: their rate changes as the workers' updates agree"
    return None


def trajectory_history(history: list[dict], generation: int) -> list[dict]:
    """The history lines of the trajectory ``generation`` (0: the run's first store, G once continued G
    times on grown stores): a run continued on a grown store starts a new one, whose lines record it."""
    return [h for h in history if int(h.get("generation") or 0) == generation]


def stop_diagnosis(history: list[dict], o: dict, generation: int = 0) -> Stall:
    """:func:`diagnose` of a run of options ``o`` (its ``tol``, ``loss``, ``distributed``) stopped short, from
    its ``history`` (``RUN/history.jsonl``): the states of its trajectory ``generation`` only (a
    continuation's first gap over the previous store's last is no rate). ``ooc train``'s stop message and
    ``ooc info RUN`` both read it, so they advise the same."""
    return diagnose(trajectory_history(history, generation), float(o["tol"]), unsteady(o))


def advised_max_epochs(stall: Stall, epochs: int) -> int:
    """The ``--max-epochs`` a resume of a run stopped after ``epochs`` epochs for the reason ``stall`` is
    advised: ``ADVICE_MARGIN`` times the epochs estimated more (the epochs run, at least 10, where no
    rate gives an estimate). The one rule of ``ooc train``'s advice and ``ooc info RUN``'s."""
    more = stall.more_epochs if stall.more_epochs is not None else max(epochs, 10)
    return epochs + int(math.ceil(ADVICE_MARGIN * more))


class EpochContext:
    """What a solver's epoch step sees of the engine.

    Attributes
    ----------
    epoch : int
        The epoch being run (the state it starts from has had ``epoch`` epochs).
    update : bool
        Whether this pass may update the state (false at ``max_epochs`` and in a
        certify-only pass).
    stopped : bool
        Set by :meth:`record` when the run ends at the certified state.
    """

    def __init__(self, engine: "_Engine", epoch: int, update: bool, predicted: bool):
        self._engine = engine
        self.epoch = epoch
        self.update = update
        self._predicted = predicted
        self.stopped = False
        self.retry = False

    def record(self, primal: float, dual: float, fields: dict | None = None) -> bool:
        """Certify ``S_epoch`` with ``P`` and ``D``; ``fields`` are the solver's own history entries.

        ``fields`` may also give ``bytes_read`` and ``cache_hit_rate`` as they were when the state
        was certified, for a solver that records after an update (dgpd).

        Returns whether the run stops at this state (converged, or no update allowed):
        a split solver then returns without updating.
        """
        return self._engine.record(self, Certificate(float(primal), float(dual)), fields or {})

    def stops(self, primal: float, dual: float) -> bool:
        """Whether :meth:`record` of these objectives will end the run (to decide before recording)."""
        return self._engine.converged(Certificate(float(primal), float(dual))) or not self.update

    def bytes_read(self) -> int:
        """Decoded bytes the run has read so far, all sessions (the history's ``bytes_read``)."""
        return self._engine.bytes0 + self._engine.solver.bytes_read()

    def tick(self, fraction: float | None = None) -> None:
        """A safe point inside the epoch: checkpoint if ``checkpoint_every`` seconds have passed.

        ``fraction``: the share of the epoch's work done (groups, blocks or steps), reported to a
        progress display that takes it (:meth:`ooc.progress.EpochProgress.within`).
        """
        self._engine.tick(self, fraction)

    def done(self, fraction: float) -> None:
        """Report the share of the epoch's work done where the state is not a safe point (a
        checkpoint would save a half-updated state): progress only, nothing saved."""
        self._engine.report(fraction)


class Watch(NamedTuple):
    """What the engine evaluates at every certified state besides the gap (``--validation``).

    ``score(w)`` gives the history fields of the certified state's coefficients ``w`` (the
    solver's :meth:`certified_w`), among them ``key``, the number compared between states
    (``higher``: larger is better). With ``patience > 0`` the run stops once ``patience``
    states in a row did not improve on the best one (``--early-stop``).
    """

    score: Callable[[np.ndarray], dict]
    key: str
    higher: bool
    patience: int = 0


class Start(NamedTuple):
    """Where a run's trajectory starts when not at zero: a run continued on a larger store.

    ``meta`` overrides the fresh checkpoint's metadata (``seq`` above the previous trajectory's
    checkpoints, which are ignored, ``history_len`` after its lines, ``seconds``, ``bytes_read``);
    ``fields`` are added to every history line of the trajectory (its ``generation``).
    """

    meta: dict
    fields: dict


class _Engine:
    def __init__(self, solver, max_epochs: int, start: Start | None = None, watch: Watch | None = None):
        self.solver = solver
        self.rd = solver.rd
        self.max_epochs = int(max_epochs)
        self.tol = float(solver.opt["tol"])
        self.ck_every = float(solver.opt["checkpoint_every"])
        self.result = None
        self.base = start or Start({}, {})
        self.watch = watch

    # -- state ---------------------------------------------------------------------------------------
    def start(self, resume: bool) -> None:
        rd, solver = self.rd, self.solver
        first = int(self.base.meta.get("seq", 0))
        loaded = rd.load_checkpoint(min_seq=first) if resume else None
        if loaded is None:
            solver.fresh()
            meta = {"seq": 0, "epoch": 0, "seconds": 0.0, "state_seconds": 0.0, "history_len": 0, "bytes_read": 0,
                    **self.base.meta}
            arrays, extra, _ = solver.checkpoint_state()
            check_state(arrays, 0)
            rd.truncate_history(meta["history_len"])
            rd.save_checkpoint(arrays, {**meta, **extra})
        else:
            arrays, meta = loaded
            rd.truncate_history(meta["history_len"])
            solver.restore(arrays, meta)
        self.epoch = int(meta["epoch"])
        #: the epoch of the newest checkpoint: older than ``epoch`` when epoch ends were skipped
        self.ck_epoch = self.epoch
        # numbered past every checkpoint there, a damaged one left in place included: never in its way
        self.seq = max(int(meta["seq"]), rd.last_seq())
        self.history_len = int(meta["history_len"])
        self.seconds0 = float(meta["seconds"])
        self.state_seconds = float(meta["state_seconds"])
        self.bytes0 = int(meta["bytes_read"])
        self.t_start = time.perf_counter()
        self.last_ck = self.t_start
        # relative gaps of the last states of this trajectory, to decide when a pass should only certify
        mine = rd.history()[int(self.base.meta.get("history_len", 0)):]
        self.recent = [rel_gap_of(h) for h in mine[-2:]]
        self.cert_failed = -1
        # the best validation score so far and the states since it: from the history, so that a
        # resumed run stops where the uninterrupted one would
        self.best, self.best_epoch, self.since_best = None, None, 0
        for h in mine:
            self.note_score(h)

    def elapsed(self) -> float:
        return self.seconds0 + time.perf_counter() - self.t_start

    def checkpoint(self, history_len: int | None = None) -> None:
        arrays, extra, background = self.solver.checkpoint_state()
        check_state(arrays, self.epoch)
        self.seq += 1
        meta = {"seq": self.seq, "epoch": self.epoch, "seconds": self.elapsed(), "state_seconds": self.state_seconds,
                "history_len": self.history_len if history_len is None else history_len,
                "bytes_read": self.bytes0 + self.solver.bytes_read(), **extra}
        self.rd.save_checkpoint(arrays, meta, background=background)
        self.last_ck = time.perf_counter()
        self.ck_epoch = self.epoch
        interrupts.defer(False)  # nothing done is lost to a stop signal now

    def unsaved(self) -> bool:
        """Whether epochs ended since the newest checkpoint (their checkpoints were skipped)."""
        return self.ck_epoch < self.epoch

    def stop_point(self, ctx: EpochContext, history_len: int) -> None:
        """A safe point: a stop signal waiting for one (:func:`ooc.interrupts.defer`) saves the state, then stops."""
        if interrupts.pending() and self.unsaved():
            self.checkpoint(history_len)
            self.rd.wait_checkpoint()
        interrupts.check()

    def epoch_checkpoint_due(self) -> bool:
        """Whether the epoch that just ended is checkpointed.

        Always, unless the solver's whole state is in every checkpoint
        (``epoch_checkpoint_optional``): then only once ``checkpoint_every`` seconds, or the last
        checkpoint's write time over :data:`CHECKPOINT_SHARE`, have passed since it, and always at
        ``max_epochs`` (a run stopped there to be resumed with more leaves its last state). Skipping
        changes no iterate: a resume from an older checkpoint repeats the same steps; the state a
        run stops at is checkpointed whatever this says (:meth:`loop`).
        """
        optional = getattr(self.solver, "epoch_checkpoint_optional", None)  # solvers written before it: never
        if optional is None or not optional() or self.epoch >= self.max_epochs:
            return True
        since = time.perf_counter() - self.last_ck
        return since >= min(self.ck_every, self.rd.write_seconds / CHECKPOINT_SHARE)

    def tick(self, ctx: EpochContext, fraction: float | None = None) -> None:
        self.stop_point(ctx, self.history_len)
        if fraction is not None:
            self.report(fraction)
        if ctx.update and time.perf_counter() - self.last_ck >= self.ck_every:
            self.checkpoint()

    def report(self, fraction: float) -> None:
        """The share of the epoch done, to a progress display with a ``within(epoch, fraction)``
        (:class:`ooc.progress.EpochProgress`); a plain callable gets history entries only."""
        within = getattr(self.solver.progress, "within", None)
        if within is not None:
            within(self.epoch, min(1.0, max(0.0, float(fraction))))

    # -- certificates --------------------------------------------------------------------------------
    def converged(self, cert: Certificate) -> bool:
        """The documented "converged" (docs/training.rst): the relative duality gap is at most ``tol``."""
        return cert.rel_gap <= self.tol

    def record(self, ctx: EpochContext, cert: Certificate, fields: dict) -> bool:
        # (a state certified but not recorded: a resume from here records it)
        self.stop_point(ctx, self.history_len)
        solver = self.solver
        rel = cert.rel_gap
        if ctx._predicted and self.epoch < self.max_epochs and not self.converged(cert):
            # the prediction failed: S_e was not good enough; the epoch runs again with its update
            # (and recomputes the same gap, so the history keeps one line per state)
            ctx.retry = True
            return True
        check_finite(cert, self.epoch)  # before the history: no state of a diverged run is recorded as certified
        check_gap(cert, self.epoch, solver.name)  # nor one whose certificate is false
        entry = {"epoch": self.epoch, "seconds": self.state_seconds, "primal": cert.primal, "dual": cert.dual,
                 "gap": cert.gap, "rel_gap": rel, "nnz_w": int(solver.nnz_w()),
                 "bytes_read": self.bytes0 + solver.bytes_read(), "cache_hit_rate": solver.cache_hit_rate(),
                 **fields, **self.base.fields}
        if self.watch is not None:
            entry.update(self.watch.score(solver.certified_w()))
            self.note_score(entry)
        self.rd.append_history(entry)
        self.history_len += 1
        if solver.progress:
            solver.progress(entry)
        converged = self.converged(cert)
        early = (self.watch is not None and self.watch.patience > 0 and self.since_best >= self.watch.patience
                 and not converged and ctx.update)
        if converged or not ctx.update or early:
            ctx.stopped = True
            self.result = dict(entry, converged=bool(converged), epochs=self.epoch)
            if self.watch is not None:
                self.result.update(early_stopped=bool(early), best_epoch=self.best_epoch,
                                   best_validation=self.best)
        else:
            self.recent = (self.recent + [rel])[-2:]
        return ctx.stopped

    def note_score(self, entry: dict) -> None:
        """Update the best validation score and the count of states since it with a history line."""
        w = self.watch
        if w is None or entry.get(w.key) is None:
            return
        x = float(entry[w.key])
        if self.best is None or (x > self.best if w.higher else x < self.best):
            self.best, self.best_epoch, self.since_best = x, int(entry["epoch"]), 0
        else:
            self.since_best += 1

    # -- the loop ------------------------------------------------------------------------------------
    def loop(self) -> dict:
        solver = self.solver
        while True:
            predicted = (solver.predicts_certified and solver.at_epoch_start() and self.epoch != self.cert_failed
                         and predicts_converged(self.recent, self.tol))
            ctx = EpochContext(self, self.epoch, self.epoch < self.max_epochs and not predicted, predicted)
            solver.epoch(ctx)
            if ctx.retry:
                self.cert_failed = self.epoch
                continue
            if ctx.stopped:
                if self.unsaved():
                    # the final state is durable: checkpointed after its certifying pass, without the
                    # certificate's history line, which a resume records again from this state
                    self.checkpoint(self.history_len - 1)
                self.rd.wait_checkpoint()
                return dict(self.result, **solver.result())
            self.epoch += 1
            self.state_seconds = self.elapsed()
            solver.next_epoch(self.epoch)
            if self.epoch_checkpoint_due():
                self.checkpoint()
            else:
                interrupts.defer(True)  # a stop signal now waits for a safe point to save this epoch


def run(solver, max_epochs: int, resume: bool, start: Start | None = None, watch: Watch | None = None) -> dict:
    """Run ``solver`` until its state is certified or ``max_epochs`` epochs are done.

    Parameters
    ----------
    solver : ooc.solvers.base.StoreSolver
        A solver built on a problem and a run directory (its ``opt`` holds ``tol`` and
        ``checkpoint_every``).
    max_epochs : int
    resume : bool
        Continue from the checkpoint ``LATEST`` names (bit for bit what an uninterrupted
        run would do), or start afresh.
    start : Start, optional
        Where a fresh start begins (a run continued on a larger store); its checkpoints only
        are resumed.
    watch : Watch, optional
        A validation score of every certified state, and early stopping on it.

    Returns
    -------
    dict
        The last history entry plus ``converged``, ``epochs``, ``total_seconds`` (training
        time, all sessions) and what :meth:`result` of the solver adds (``w``, final duals).
    """
    eng = _Engine(solver, max_epochs, start, watch)
    # SIGTERM (``kill``, a batch system's stop) ends a run like Ctrl-C: the solver's threads are stopped
    # and a checkpoint being written finishes or is discarded whole, instead of the process dying anywhere
    with interrupts.stop_on_signals():
        try:
            eng.start(resume)
            result = eng.loop()
            # training time: the certified state is known; stopping the solver's helpers (a Dask
            # cluster's workers take a second or two) is not part of it
            result["total_seconds"] = eng.elapsed()
        finally:
            interrupts.defer(False)
            solver.close()
            eng.rd.wait_checkpoint(reraise=False)  # on an error path, the first error is the one reported
    return result

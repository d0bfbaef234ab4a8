"""The training configuration: one frozen, typed object that holds every option's default.

:class:`TrainConfig` is the only place a training option's default is written. ``ooc train``'s
options are generated from its fields (:func:`ooc.cli.train_options`), the estimators' and the
batch spec's are checked against it (``tests/test_config.py``), and ``run.json`` stores its
fields. Building one checks and normalises every value that does not need the store (numbers,
names, what the requested solver allows); the checks against the store's labels and layouts,
and ``auto``'s choice, are in :func:`ooc.train._validate`.

Errors are one line naming the option as the command line spells it (``--l2 ...``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from . import options as T
from .objectives.losses import LOSS_NAMES, Logistic, loss_spec
from .solvers.problem import normalize_class_weight
from .solvers.registry import AUTO, CRAMMER_SINGER, OVR, SOLVER_NAMES, solver_spec
from .solvers.registry import DGPD_DEFAULTS as _DGPD
from .solvers.registry import DGPD_DUAL_STEPS as DUAL_STEPS
from .units import AUTO_MEMORY, parse_bytes, parse_memory

#: Options whose ``None`` is a value (not "use the default").
NONE_IS_A_VALUE = ("class_weight", "multiclass", "distributed")
#: ``--block-bytes``'s value for the store's own blocks (runs made before the option existed).
STORE_BLOCKS = "store"
#: Training blocks' default size. The rows of a block stay together in every pass's permutation, and
#: small units mix better: to a certified 1e-6 on the 1M x 2^20 store of ``scripts/bench_threads.py``
#: (L2 logistic), 2 MiB blocks in groups of 16 took 5 passes (4.0 s in memory; 6.2 s out of core,
#: every pass read from disk) where 8 MiB blocks in groups of 4, the same 32 MiB a group, took 6-8
#: (4.7-6.5 s; 7.0 s). Smaller blocks decode more of the store's chunks they only partly use: 1 MiB
#: blocks mixed as well but read 1.45x the file bytes of 8 MiB ones out of core (2 MiB: 1.2x). A group
#: (``--mix-blocks``) and one read ahead fit beside the interpreter, its kernels, the store reader and
#: 2**22 features' vectors in a container of about 400 MiB.
DEFAULT_TRAIN_BLOCK = "2MiB"
#: Training blocks whose rows a pass visits in one permutation (``--mix-blocks``): 32 MiB a group.
DEFAULT_MIX_BLOCKS = 16
#: Smallest ``--block-bytes``: one indptr slot and a few entries.
MIN_TRAIN_BLOCK = 64
PAGINGS = ("shuffled", "gap")
#: --duals: where the O(n) vectors live (auto: by the memory plan)
DUAL_STORES = ("auto", "memory", "paged")
#: ``--validation-metric``'s choices (``auto``: accuracy for classification, rmse for regression).
VALIDATION_METRICS = (AUTO, "accuracy", "logloss", "rmse", "primal")


def _opt(default, help: str | None = None, choices: tuple | None = None, type=None):
    """A field with its default, what the command line shows (help text, choices) and the type of its
    values (an :mod:`ooc.options` type: the command line parses with it, :class:`TrainConfig` checks with it)."""
    return field(default=default, metadata={"help": help, "choices": choices, "type": type})


@dataclass(frozen=True)
class TrainConfig:
    """Training options, checked and normalised (see the module docstring).

    The fields are ``ooc train``'s options (``--max-epochs`` is ``max_epochs``); their order is
    ``run.json``'s. ``memory_bytes`` is ``memory`` parsed.
    """

    loss: str = _opt(Logistic.name, "Loss phi(x.w, y): logistic, squared, smooth-hinge (--gamma) or hinge.",
                     choices=LOSS_NAMES)
    gamma: float = _opt(1.0, "Smoothing of the smooth hinge.", type=T.NONNEG_FLOAT)
    multiclass: str | None = _opt(None, "Multiclass stores: one-vs-rest (ovr, the default) or the max-of-hinge "
                                        "loss of crammer-singer (sdca).", choices=(OVR, CRAMMER_SINGER))
    l2: float = _opt(1e-6, "L2 weight (LIBLINEAR C = 1/(l2 n)). 0 with --l1 > 0: pure L1 (rcd-primal, or sdca/acc-sdca "
                           "with an added L2 small enough to certify the L1 problem).", type=T.NONNEG_FLOAT)
    l1: float = _opt(0.0, "L1 weight.", type=T.NONNEG_FLOAT)
    solver: str = _opt(AUTO, "Algorithm; auto picks from the store's statistics (ooc info says what it would run).",
                       choices=SOLVER_NAMES)
    sampling: str = _opt("uniform", "rcd-primal/rcd-dual: uniform, importance, supportSet-uniform, adaptive, "
                                    "ada-uniform, ada-gap, gap-per-epoch; rcd-primal with pure L1: working-set "
                                    "(auto's choice there).", type=T.SAMPLING)
    tol: float = _opt(1e-6, "Relative duality gap to certify.", type=T.NONNEG_FLOAT)
    max_epochs: int = _opt(100, "Most passes over the data; the run stops there, converged or not.", type=T.NONNEG_INT)
    memory: str = _opt(AUTO_MEMORY, "Memory for the whole process (the command line; Python: what training adds): "
                                    "'auto' is what the process may use (cgroup limit, RLIMIT_AS, available RAM) "
                                    "less what it holds. Never changes the iterates.", type=T.MEMORY)
    bias: float = _opt(0.0, "LIBLINEAR's intercept: a constant feature of value B whose weight is regularized "
                            "like the others (0: none).", type=T.NONNEG_FLOAT)
    fit_intercept: bool = _opt(False, "scikit-learn's intercept: unregularized, certified with the rest (sdca; "
                                      "rcd-primal for pure L1; a smooth loss; not with --bias). Off by default, "
                                      "in Python too.")
    class_weight: str | None = _opt(None, "balanced: weight each example by n / (classes x its class's count); or "
                                          "LABEL=WEIGHT,... (original labels, e.g. 1=5,-1=1; others weigh 1).",
                                 type=T.CLASS_WEIGHT)
    seed: int = _opt(0, "Seed of the visiting order and samplings (the iterates depend on it).", type=T.SEED)
    checkpoint_every: float = _opt(300.0, "Seconds between checkpoints inside an epoch (epoch ends: every one, or "
                                          "with the duals in memory, spaced so writing takes ~5 % of the run; "
                                          "0: every epoch end and block boundary).", type=T.NONNEG_FLOAT)
    distributed: str | None = _opt(None, "local:N or a Dask scheduler address (tcp://HOST:PORT).", type=T.DISTRIBUTED)
    local_passes: int = _opt(1, "--distributed: Prox-SDCA passes over its rows each worker makes per round (the "
                                "CoCoA+ local subproblem solved further: fewer rounds when the workers' rows share "
                                "few features).", type=T.POSITIVE_INT)
    exchange: float = _opt(0.5, "--distributed: share of its row blocks each worker hands to the next between "
                                "rounds (partitions mixed: fewer rounds on data with popular features; each worker "
                                "caches what it is handed). 0: fixed partitions, as runs made before it had.",
                                type=T.UNIT_FLOAT)
    sync_rows: int = _opt(0, "--distributed: rows of its pass each worker visits between two synchronizations of "
                             "v within a round (its pass cut into equal steps of at most this many rows); 0: once "
                             "a round. Fewer rows: fewer rounds on small well-conditioned problems, more messages.",
                             type=T.NONNEG_INT)
    inner_passes: int = _opt(1, "acc-sdca: Prox-SDCA passes per outer iteration (the paper's practical variant).",
                             type=T.POSITIVE_INT)
    block_bytes: str = _opt(DEFAULT_TRAIN_BLOCK, "Decoded bytes per training block: the store's blocks cut to at most "
                                                 "this ('store': as converted). With --seed and --mix-blocks it fixes "
                                                 "the order rows are visited in. --distributed local:N with the "
                                                 "default: halved until each partition has 4 blocks.",
                                     type=T.Bytes(MIN_TRAIN_BLOCK, words=(STORE_BLOCKS,)))
    threads: int = _opt(0, "Threads (0: every core the process may use: CPU affinity and cgroup quota, fewer "
                           "where the memory cannot hold one problem's replicas of the model; recorded in "
                           "run.json, resume keeps it). The classes of one-vs-rest train on several at "
                           "once; the iterates do not depend on it.", type=T.THREADS)
    mix_blocks: int = _opt(DEFAULT_MIX_BLOCKS, "Row blocks whose rows are visited in one random permutation (memory: about twice "
                              "that many blocks are resident).", type=T.POSITIVE_INT)
    paging: str = _opt("shuffled", "rcd solvers: block order shuffled, or weighted by each block's duality-gap mass.",
                       PAGINGS)
    duals: str = _opt("auto", "Where the O(n) vectors live (the duals; rcd-primal's margins; dgpd's labels, weights "
                              "and norms): 'auto' in memory when they fit a quarter of --memory, 'memory', or "
                              "'paged' (per block on disk, memory-mapped or streamed). The iterates do not "
                              "depend on it.", DUAL_STORES)
    # dgpd's own options: their defaults are the solver's (ooc.solvers.registry.DGPD_DEFAULTS)
    dgpd_rounds: int = _opt(_DGPD["rounds"], "dgpd: rounds of updates on the active submatrix between two "
                                             "searches (>= 1).", type=T.POSITIVE_INT)
    dgpd_batch: int = _opt(_DGPD["batch"], "dgpd: coordinates a search adds at least, per side (>= 1).",
                           type=T.POSITIVE_INT)
    dgpd_growth: float = _opt(_DGPD["growth"], "dgpd: a search adds up to max(batch, growth x active-set size) "
                                               "coordinates (>= 0).", type=T.NONNEG_FLOAT)
    dgpd_dual_step: str = _opt(_DGPD["dual_step"], "dgpd: dual step size, the largest safe one (Prox-SDCA's on the "
                                                   "submatrix) or the paper's Theorem 4.2 (shorter).", DUAL_STEPS)
    dgpd_fallback: bool = _opt(_DGPD["fallback"], "dgpd: a new run whose dual active set turns dense (over half "
                                                  "the (example, class) pairs) goes on as sdca from its duals, "
                                                  "saying so.")
    validation: str | None = _opt(None, "Held-out data (a file or a store) scored at every certified state, a pass "
                                        "over it in blocks: the metric goes into the history, the plot and --json.")
    validation_metric: str = _opt(AUTO, "Metric of --validation: auto (accuracy for classification, rmse for "
                                        "regression), accuracy, logloss (logistic), rmse or primal.",
                                  choices=VALIDATION_METRICS)
    early_stop: int = _opt(0, "Stop after this many certified states in a row without a better --validation "
                              "score (0: never); the run keeps the last state's model and names the best epoch.",
                        type=T.NONNEG_INT)
    #: ``memory`` in bytes (None: ``auto``), parsed once when the configuration is built (not an option)
    memory_bytes: int | None = field(init=False, repr=False, compare=False, default=0)
    #: ``block_bytes`` in bytes (None: the store's blocks), parsed likewise
    train_block_bytes: int | None = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self):
        loss = loss_spec(self.loss)
        if self.solver != AUTO:
            solver_spec(self.solver)
        _check_values(self, loss)  # the numbers first: their types name the option and its range
        _check_dgpd(self)
        _check_requested_solver(self)
        _set(self, "memory_bytes", parse_memory(self.memory, "--memory"))
        _set(self, "train_block_bytes", _parse_block_bytes(self.block_bytes))

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_options(cls, options: dict) -> TrainConfig:
        """Build from keyword options (``ooc.train``'s): unknown names are refused, ``None``
        means the default (but for :data:`NONE_IS_A_VALUE`)."""
        unknown = set(options) - set(option_names())
        if unknown:
            raise ValueError(f"unknown training option(s): {', '.join(sorted(unknown))}")
        return cls(**{k: v for k, v in options.items() if v is not None or k in NONE_IS_A_VALUE})

    @classmethod
    def from_run_config(cls, config: dict, **override) -> TrainConfig:
        """The configuration a ``run.json`` was written with (``override``: options this process changes).

        ``run.json`` records every option (one run state format, :data:`ooc.runs.records.STATE_FORMAT`, bumped
        when the options change): one missing is damage, never filled in with a default that may not be the
        one the run was made with.
        """
        missing = [k for k in option_names() if k not in config and k not in override]
        if missing:
            raise ValueError(f"run.json records no {missing[0]!r} (every option is recorded)")
        return cls.from_options({**{k: config[k] for k in option_names() if k in config}, **override})

    def options(self) -> dict:
        """The fields as a dict (``run.json``'s ``config`` keys, in order)."""
        return {name: getattr(self, name) for name in option_names()}

    @property
    def loss_spec(self):
        """The loss's :class:`ooc.objectives.losses.LossSpec`."""
        return loss_spec(self.loss)


def option_names() -> tuple:
    """Names of the training options, in ``run.json``'s order."""
    return tuple(f.name for f in dataclasses.fields(TrainConfig) if f.init)


def defaults() -> dict:
    """Every training option's default (a new dict)."""
    return {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.init}


def _set(cfg: TrainConfig, name: str, value) -> None:
    # normalising in __post_init__ (int(), float()) is the one place a frozen config is written
    object.__setattr__(cfg, name, value)


def _parse_block_bytes(text) -> int | None:
    if str(text).strip().lower() == STORE_BLOCKS:
        return None
    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise ValueError(f"--block-bytes: {exc} or 'store'") from None
    if value < MIN_TRAIN_BLOCK:
        raise ValueError(f"--block-bytes must be at least {MIN_TRAIN_BLOCK} bytes or 'store' (got {text!r})")
    return value


def _check_values(cfg: TrainConfig, loss) -> None:
    """Option values on their own (no store, no solver), normalised in place: each field with a type
    (:mod:`ooc.options`) is checked by it, the rule the command line parses with."""
    from .schedule.sampling import normalize_sampling

    for f in dataclasses.fields(TrainConfig):
        kind = f.metadata.get("type") if f.init else None
        value = getattr(cfg, f.name)
        if kind is None or (value is None and f.name in NONE_IS_A_VALUE):
            continue
        checked = kind.check(value, "--" + f.name.replace("_", "-"))
        if isinstance(kind, T.Number):  # normalised: 3.0 -> 3 for an integer, "1e-3" -> 0.001
            _set(cfg, f.name, checked)
    _set(cfg, "sampling", normalize_sampling(cfg.sampling))
    if cfg.paging not in PAGINGS:
        raise ValueError(f"--paging {cfg.paging!r}: expected shuffled or gap")
    if "gamma" in loss.params and cfg.gamma <= 0:
        raise ValueError("--gamma must be > 0 for the smooth hinge")
    _check_validation(cfg)
    _check_intercept(cfg)
    _set(cfg, "class_weight", normalize_class_weight(cfg.class_weight))


def _check_intercept(cfg: TrainConfig) -> None:
    """``--fit-intercept`` on its own and against ``--bias`` (the solvers that fit it: ``ooc.train``)."""
    if not isinstance(cfg.fit_intercept, (bool, np.bool_)):
        raise ValueError(f"--fit-intercept is a flag: true or false (got {cfg.fit_intercept!r})")
    _set(cfg, "fit_intercept", bool(cfg.fit_intercept))
    if cfg.fit_intercept and cfg.bias > 0:
        raise ValueError("--fit-intercept and --bias are two kinds of intercept (unregularized, and LIBLINEAR's "
                         "regularized bias feature): use one")


def _check_validation(cfg: TrainConfig) -> None:
    """``--validation``, ``--validation-metric`` and ``--early-stop`` on their own (the metric against the
    task is checked with the store, :func:`ooc.validation.watch`)."""
    if cfg.validation is not None and (not isinstance(cfg.validation, str) or not cfg.validation.strip()):
        raise ValueError(f"--validation: expected the path of a file or a store (got {cfg.validation!r})")
    if cfg.validation_metric not in VALIDATION_METRICS:
        raise ValueError(f"--validation-metric {cfg.validation_metric!r}: expected one of {', '.join(VALIDATION_METRICS)}")
    if cfg.early_stop and cfg.validation is None:
        raise ValueError("--early-stop needs --validation (the data whose score decides)")


def _check_dgpd(cfg: TrainConfig) -> None:
    """The ``dgpd_*`` values but the numbers (checked by their types; whether they may be set at all
    depends on the solver used)."""
    if not isinstance(cfg.dgpd_fallback, (bool, np.bool_)):
        raise ValueError(f"--dgpd-fallback is a flag: true or false (got {cfg.dgpd_fallback!r})")
    _set(cfg, "dgpd_fallback", bool(cfg.dgpd_fallback))
    if cfg.dgpd_dual_step not in DUAL_STEPS:
        raise ValueError(f"--dgpd-dual-step {cfg.dgpd_dual_step!r}: expected one of {', '.join(DUAL_STEPS)}")


def _check_requested_solver(cfg: TrainConfig) -> None:
    """What the solver asked for (``auto`` included) allows: pure L1."""
    spec = solver_spec(cfg.solver) if cfg.solver != AUTO else None
    if cfg.l2 <= 0 and not (cfg.l1 > 0 and (spec is None or spec.pure_l1)):
        raise ValueError("--l2 must be > 0 for the dual solvers; pure L1 (--l2 0 --l1 > 0) trains with "
                         "rcd-primal (--solver rcd-primal or auto), or sdca / acc-sdca with an added small L2")

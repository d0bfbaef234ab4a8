"""The training configuration is the one place of the defaults: the CLI, the estimators, the
batch spec and ``run.json`` agree with it; the registries name every loss and solver."""

from __future__ import annotations

import dataclasses
import inspect

import click
import pytest

from ooc import batch
from ooc.cli import main as cli_main
from ooc.config import TrainConfig, defaults, option_names
from ooc.objectives.losses import LOSS_NAMES, LOSS_REGISTRY, make_loss
from ooc.solvers.registry import AUTO, SOLVER_NAMES, SOLVER_REGISTRY, driver_class
from ooc.train import DEFAULTS as TRAIN_DEFAULTS

#: Estimator parameters whose default differs from ``ooc train``'s, on purpose (documented in
#: ooc/estimators.py): (estimator class name or "*", parameter) -> the estimator's default.
ESTIMATOR_EXCEPTIONS = {
    ("*", "l2"): None,                              # 1 / n_samples: scikit-learn's C = 1
    ("LinearClassifier", "multiclass"): "ovr",      # what ooc train's None does, named
    ("LinearRegressor", "loss"): "squared",         # the regression loss
}


def _train_command() -> click.Command:
    return cli_main.commands["train"]


def test_every_field_has_a_cli_option_with_the_same_default():
    params = {p.name: p for p in _train_command().params if isinstance(p, click.Option)}
    for f in dataclasses.fields(TrainConfig):
        if not f.init:
            continue
        assert f.name in params, f"ooc train has no --{f.name.replace('_', '-')}"
        opt = params[f.name]
        assert opt.opts == ["--" + f.name.replace("_", "-")]
        assert opt.default == f.default, f.name
        if f.metadata.get("choices"):
            assert tuple(opt.type.choices) == tuple(f.metadata["choices"]), f.name


def test_train_defaults_are_the_config_defaults():
    assert TRAIN_DEFAULTS == defaults()
    assert list(TRAIN_DEFAULTS) == list(option_names())  # run.json's key order
    assert TrainConfig().options() == defaults()


@pytest.mark.parametrize("name", ["LinearClassifier", "LinearRegressor"])
def test_estimator_defaults_match_the_config(name):
    pytest.importorskip("sklearn")
    import ooc

    sig = inspect.signature(getattr(ooc, name).__init__)
    d = defaults()
    checked = 0
    for pname, p in sig.parameters.items():
        if pname not in d:
            continue
        checked += 1
        for key in ((name, pname), ("*", pname)):
            if key in ESTIMATOR_EXCEPTIONS:
                assert p.default == ESTIMATOR_EXCEPTIONS[key], (name, pname)
                break
        else:
            assert p.default == d[pname], (name, pname)
    assert checked >= 8


def test_batch_spec_keys_are_the_options():
    assert batch.SPEC_KEYS == set(option_names()) | {"store"}


def test_config_is_frozen_and_normalised():
    cfg = TrainConfig(max_epochs="7", seed=3.0, l2=1, memory="2MiB")
    assert cfg.max_epochs == 7 and isinstance(cfg.max_epochs, int)
    assert cfg.l2 == 1.0 and isinstance(cfg.l2, float)
    assert cfg.memory_bytes == 2 << 20
    assert "memory_bytes" not in cfg.options()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.l2 = 2.0


@pytest.mark.parametrize("opts, text", [
    ({"l2": -1.0}, "--l2 must be a finite number >= 0"),
    ({"l2": 0.0}, "--l2 must be > 0"),
    ({"loss": "nope"}, "--loss 'nope'"),
    ({"solver": "nope"}, "--solver 'nope'"),
    ({"paging": "x"}, "--paging"),
    ({"max_epochs": -1}, "--max-epochs must be an integer >= 0"),
    ({"dgpd_batch": 0}, "--dgpd-batch must be an integer >= 1"),
    ({"gamma": 0.0, "loss": "smooth-hinge"}, "--gamma must be > 0"),
    ({"bogus": 1}, "unknown training option(s): bogus"),
])
def test_bad_values_are_one_line_errors_naming_the_option(opts, text):
    with pytest.raises(ValueError) as exc:
        TrainConfig.from_options(opts)
    assert text in str(exc.value) and "\n" not in str(exc.value)


def test_from_run_config_needs_every_option():
    """run.json records every option: one missing is damage, named, never filled in with today's default."""
    cfg = dict(defaults(), l2=1e-3, solver="sdca", store="x", n_rows=5)  # run.json has more than the options
    assert TrainConfig.from_run_config(cfg, max_epochs=3).options() == dict(defaults(), l2=1e-3, solver="sdca",
                                                                          max_epochs=3)
    for gone in ("threads", "block_bytes", "dgpd_rounds"):
        with pytest.raises(ValueError, match=f"run.json records no '{gone}'"):
            TrainConfig.from_run_config({k: v for k, v in cfg.items() if k != gone})


def test_registries_cover_the_choices():
    # the command line's choices are the built-in losses; a loss registered later (tests/huber_loss.py)
    # is in the registry too, for ooc.train
    built_in = {n for n, spec in LOSS_REGISTRY.items() if spec.cls.__module__.startswith("ooc.")}
    assert set(LOSS_NAMES) == built_in
    for name, spec in LOSS_REGISTRY.items():
        assert make_loss(name).name == name
        assert make_loss(name).is_smooth == spec.smooth
        assert make_loss(name).is_classification == spec.classification
    assert SOLVER_NAMES == (AUTO, *SOLVER_REGISTRY)
    for name, spec in SOLVER_REGISTRY.items():
        for mode in spec.drivers:  # every driver path imports
            cls = driver_class(name, "local:1" if mode == "distributed" else None,
                               mode if mode not in ("", "distributed") else None)
            assert isinstance(cls, type)
        assert driver_class(name).name == name
        for option in spec.options:
            assert option in defaults()


def test_a_warm_start_is_refused_before_the_run_directory_for_a_solver_without_one(tmp_path):
    import uuid

    import ooc
    from ooc.synth import SynthSource

    st = ooc.convert(SynthSource(300, 30, 5, seed=1), f"memory://cfg-{uuid.uuid4().hex}")
    first = ooc.train(st, str(tmp_path / "first"), solver="sdca", l2=1e-2, tol=1e-4)
    with pytest.raises(ValueError, match="dgpd does not take warm starts"):
        ooc.train(st, str(tmp_path / "second"), solver="dgpd", l2=1e-2, tol=1e-4, warm_start=first.path)
    assert not (tmp_path / "second").exists()

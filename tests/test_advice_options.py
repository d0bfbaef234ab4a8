"""The advice after a run that stopped short names only options that run takes: every ``--solver``,
``--loss`` or ``--sampling`` it names, put in place of the run's own, is an option set ``ooc train`` accepts
on the same store (a ``--fit-intercept`` run was told to try acc-sdca, which refuses it). Drawn over the
run's options (solver, loss, intercept, l1/l2, multiclass mode) and the stall's kind."""

from __future__ import annotations

import importlib
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

import ooc
from ooc.engine import Stall

T = importlib.import_module("ooc.train")


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    rng = np.random.default_rng(2)
    X = sp.random(300, 40, density=0.2, random_state=2, format="csr")
    out = {}
    for kind, y in {"binary": np.where(rng.standard_normal(300) > 0, 1.0, -1.0),
                    "multiclass": rng.integers(0, 3, 300).astype(float)}.items():
        path = str(tmp_path_factory.mktemp(kind) / "s.zarr")
        out[kind] = ooc.convert(X, path, y=y)
    yield out
    for st in out.values():
        st.close()


NAMED = re.compile(r"--(solver|loss|sampling) ([a-z0-9-]+)")


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(solver=hs.sampled_from(["auto", "sdca", "acc-sdca", "rcd-primal"]),
       loss=hs.sampled_from(["logistic", "smooth-hinge", "hinge"]), intercept=hs.booleans(),
       penalty=hs.sampled_from([(1e-6, 0.0), (0.0, 1e-3), (1e-6, 1e-4)]),
       multiclass=hs.sampled_from([None, "ovr", "crammer-singer"]), kind=hs.sampled_from(["slow", "stalled"]))
def test_the_options_the_advice_names_are_taken(stores, solver, loss, intercept, penalty, multiclass, kind):
    st = stores["multiclass" if multiclass else "binary"]
    opts = {"solver": solver, "loss": loss, "fit_intercept": intercept, "l2": penalty[0], "l1": penalty[1]}
    if multiclass:
        opts["multiclass"] = multiclass
    try:
        o = T._validate(opts, st)
    except ValueError:
        return  # a run train refuses gets no advice
    advice = T._advice(Stall(kind, "the gap shrinks slowly", None), o, "RUN", 10, st)
    for option, value in NAMED.findall(advice):
        changed = {**{k: o[k] for k in T.DEFAULTS}, option: value}
        T._validate(changed, st)  # raises (fails the test) where the advice named an option this run refuses

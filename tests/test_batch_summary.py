"""``OUT/summary.md`` of ``ooc batch``: the store, the validation metric, the runs skipped as finished."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import ooc
from ooc.batch import run_one, write_summary


def _read(out):
    return (out / "summary.md").read_text()


def test_summary_names_store_metric_and_skipped_runs(tmp_path, no_plot):
    rng = np.random.default_rng(4)
    X = sp.random(120, 8, density=0.5, random_state=4, format="csr", data_rvs=rng.standard_normal)
    y = np.where(X @ rng.standard_normal(8) > 0, 1.0, -1.0)
    store = str(tmp_path / "d.zarr")
    ooc.convert(X, store, y=y)
    valid = str(tmp_path / "valid.npz")
    np.savez(valid, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, y=y)
    out = tmp_path / "out"
    out.mkdir()
    rows = [run_one(str(out / f"r{k}"), {"store": store, "l2": l2, "tol": 1e-4}, validation=valid)
            for k, l2 in enumerate((1e-1, 1e-3))]
    assert [r["state"] for r in rows] == ["trained", "trained"] and [r["validation_metric"] for r in rows] == [
        "accuracy", "accuracy"]
    write_summary(str(out), rows, valid)
    text = _read(out)
    assert f"- store: `{store}`" in text
    assert f"- validation: `{valid}`, metric accuracy (higher is better)" in text
    assert "- skipped as finished: none" in text
    table = [ln for ln in text.splitlines() if ln.startswith(("| r0 ", "| r1 "))]
    accs = [float(ln.split("|")[-2]) for ln in table]
    assert accs == sorted(accs, reverse=True) and len(table) == 2
    assert "validation accuracy" in text
    # the same runs again: finished on the same store, skipped and said so
    again = [run_one(str(out / f"r{k}"), {"store": store, "l2": l2, "tol": 1e-4}, validation=valid)
             for k, l2 in enumerate((1e-1, 1e-3))]
    assert [r["state"] for r in again] == ["skipped", "skipped"]
    write_summary(str(out), again + [{**again[0], "run": "r9", "status": "failed", "error": "boom"}], valid)
    text = _read(out)
    assert "- skipped as finished (2: trained by an earlier batch on the same store): `r0`, `r1`" in text
    assert "## Failed runs" in text and "`r9`: boom" in text
    write_summary(str(out), again, None)
    assert "runs sorted by the primal objective" in _read(out)

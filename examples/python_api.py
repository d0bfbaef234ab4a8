"""The Python API in one page: convert, train to a certified gap, inspect, load, predict, evaluate.

Run from the repository root (a few seconds; everything is written under a temporary
directory that is removed at the end, unless --keep)::

    python examples/python_api.py [--rows 20000] [--keep]
"""

import argparse
import gzip
import os
import shutil
import tempfile

import numpy as np

import ooc
from ooc.evaluate import evaluate
from ooc.synth import SynthSource, write_svmlight


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="ooc-example-")
    try:
        # 1. A text-like data set (Zipf feature popularity, 20 nonzeros per row) as svmlight files,
        #    the kind of input `ooc convert` reads (plain, .gz, .bz2, .xz): the first rows for
        #    training, the last 2000 held out.
        all_svm = os.path.join(tmp, "all.svm")
        write_svmlight(SynthSource(args.rows + 2000, 5000, 20, seed=0), all_svm)
        train_svm, test_svm = os.path.join(tmp, "train.svm.gz"), os.path.join(tmp, "test.svm")
        with open(all_svm) as f:
            lines = f.readlines()
        with gzip.open(train_svm, "wt") as f:
            f.writelines(lines[: args.rows])
        with open(test_svm, "w") as f:
            f.writelines(lines[args.rows:])

        # 2. Convert once into a store (row and column layouts, chunked, checksummed).
        store = ooc.convert(train_svm, os.path.join(tmp, "train.zarr"))
        info = store.info()
        print(f"store: {info['n_rows']} rows x {info['n_cols']} features, {info['nnz']} nonzeros, "
              f"labels {info['label_kind']} {info['label_values']}")

        # 3. Train a logistic regression to a certified relative duality gap of 1e-6.
        #    l2 = 1/(C n): l2 = 1e-4 here is LIBLINEAR's C = 1/(1e-4 n).
        run = ooc.train(store, os.path.join(tmp, "run"), loss="logistic", l2=1e-4, tol=1e-6, max_epochs=100)
        r = run.result
        print(f"trained: converged={r['converged']} after {r['epochs']} epochs in {r['seconds']:.2f} s, "
              f"primal {r['primal']:.8f} >= dual {r['dual']:.8f}, relative gap {r['rel_gap']:.2e}")

        # 4. The history: one line per epoch, the gap certifies how far from the optimum each state is.
        for h in run.history[:: max(1, len(run.history) // 4)]:
            print(f"  epoch {h['epoch']:3d}  t={h['seconds']:6.2f}s  primal {h['primal']:.8f}  gap {h['gap']:.2e}")

        # 5. Load the model (ooc.load_model works on any finished run directory) and predict.
        model = ooc.load_model(run.path)
        test = ooc.convert(test_svm, os.path.join(tmp, "test.zarr"))
        X_test, y_test = test.to_scipy(), np.asarray(test.label_values)[(test.labels > 0).astype(int)]
        pred = model.predict(X_test)
        proba = model.predict_proba(X_test)[:, 1]
        print(f"model: {model.coef_.shape[0]} weights, {np.count_nonzero(model.coef_)} nonzero, "
              f"classes {model.classes_.tolist()}; first predictions {pred[:5].tolist()}, "
              f"P(positive) {np.round(proba[:3], 3).tolist()}")
        print(f"test accuracy (predict): {np.mean(pred == y_test):.4f}")

        # 6. Evaluate streams a store or a text file without loading it.
        ev = evaluate(run.path, test_svm)
        print(f"evaluate({os.path.basename(test_svm)}): accuracy {ev['accuracy']:.4f}, "
              f"logloss {ev['logloss']:.4f}, primal {ev['primal']:.6f}")

        # 7. The same through the scikit-learn estimator (arrays, scipy matrices or a store path).
        clf = ooc.LinearClassifier(l2=1e-4, bias=0.0, tol=1e-6).fit(store.path)
        print(f"LinearClassifier: score {clf.score(X_test, y_test):.4f}, epochs {clf.n_iter_}, "
              f"same coefficients as ooc.train: {np.allclose(clf.coef_[0], model.coef_, rtol=0, atol=1e-12)}")
    finally:
        if args.keep:
            print(f"files kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

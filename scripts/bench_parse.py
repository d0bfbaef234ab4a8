"""Benchmark the svmlight reader against scikit-learn's load_svmlight_file.

Generates a text-like svmlight file (labels +-1, ~15 sorted ids per row below 2**20,
values like 0.123456) in a temporary directory, parses it with
``ooc.store.readers.iter_svmlight`` and with ``sklearn.datasets.load_svmlight_file``, checks
that both give the same matrix, and prints one JSON line.

Usage::

    python scripts/bench_parse.py [--mb 200] [--chunk-mb 32] [--compress {none,gz}]
"""

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time

import numpy as np


def write_file(path, target_bytes, seed=0):
    """Write rows in batches until the file holds about ``target_bytes`` bytes."""
    rng = np.random.default_rng(seed)
    written = 0
    with open(path, "wb") as f:
        while written < target_bytes:
            rows = 20000
            nnz = rng.integers(5, 26, size=rows)
            labels = rng.choice(np.array(["+1", "-1"]), size=rows)
            lines = []
            for r in range(rows):
                ids = np.unique(rng.integers(0, 1 << 20, size=nnz[r]))
                vals = rng.random(ids.size)
                feats = " ".join(f"{i}:{v:.6f}" for i, v in zip(ids.tolist(), vals.tolist()))
                lines.append(f"{labels[r]} {feats}\n")
            chunk = "".join(lines).encode()
            f.write(chunk)
            written += len(chunk)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=200.0, help="file size in MB (1e6 bytes)")
    ap.add_argument("--chunk-mb", type=float, default=32.0, help="reader chunk_bytes in MiB")
    ap.add_argument("--compress", choices=["none", "gz"], default="none")
    ap.add_argument("--skip-sklearn", action="store_true")
    args = ap.parse_args()

    from ooc.store.readers import iter_svmlight

    tmp = tempfile.mkdtemp(prefix="ooc_bench_parse_")
    try:
        path = os.path.join(tmp, "bench.svm")
        size = write_file(path, int(args.mb * 1e6))
        if args.compress == "gz":
            with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
            os.remove(path)
            path += ".gz"

        # Warm up: compile or load the Numba cache, outside the timing.
        small = os.path.join(tmp, "warm.svm")
        with open(small, "wb") as f:
            f.write(b"+1 1:0.5 3:0.25\n-1 2:1\n")
        list(iter_svmlight(small))

        c0 = time.process_time()
        t0 = time.perf_counter()
        chunks = list(iter_svmlight(path, chunk_bytes=int(args.chunk_mb * (1 << 20))))
        t_ooc = time.perf_counter() - t0
        cpu_ooc = time.process_time() - c0  # both threads; robust to a busy machine
        rows = sum(len(c.labels) for c in chunks)
        nnz = sum(len(c.data) for c in chunks)
        out = {
            "file_mb": round(size / 1e6, 1),
            "compress": args.compress,
            "rows": rows,
            "nnz": nnz,
            "ooc_s": round(t_ooc, 3),
            "ooc_mb_s": round(size / 1e6 / t_ooc, 1),
            "ooc_cpu_s": round(cpu_ooc, 3),
        }
        if not args.skip_sklearn:
            from sklearn.datasets import load_svmlight_file

            c0 = time.process_time()
            t0 = time.perf_counter()
            X, y = load_svmlight_file(path, zero_based=True)
            t_sk = time.perf_counter() - t0
            cpu_sk = time.process_time() - c0
            same = (
                np.array_equal(y, np.concatenate([c.labels for c in chunks]))
                and np.array_equal(X.indices, np.concatenate([c.indices for c in chunks]))
                and np.array_equal(X.data, np.concatenate([c.data for c in chunks]))
            )
            out.update(
                sklearn_s=round(t_sk, 3),
                sklearn_mb_s=round(size / 1e6 / t_sk, 1),
                sklearn_cpu_s=round(cpu_sk, 3),
                ratio=round(t_sk / t_ooc, 2),
                identical=bool(same),
            )
        print(json.dumps(out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

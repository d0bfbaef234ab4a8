"""The suite's generators run big: every hypothesis test of a promise's test files, ``--scale`` times the
examples its CI budget draws (``OOC_GENERATOR_SCALE``, read by ``tests/conftest.py``), and a count of the cases.

Each promise's files are the ones whose generators make the cases of its class (docs/training.rst "Memory",
docs/formats.rst for safety and input recipes). Prints one JSON line a promise: the test files, the examples
drawn (hypothesis' passing examples, summed), the parametrized cases run beside them, and pytest's exit status.

    python scripts/run_generators.py --promise newcomer --scale 20
    python scripts/run_generators.py --promise safety --promise memory --scale 5
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir)

#: The test files holding each promise's generators (hypothesis strategies, stateful machines, matrices).
PROMISES = {
    "memory": ["tests/test_memory_floor.py", "tests/test_memory_commands.py", "tests/test_scored_rows.py",
               "tests/test_kernel_cache_charge.py"],
    "safety": ["tests/test_replace_safety.py", "tests/test_swapped_files.py", "tests/test_proven_files.py",
               "tests/test_ownership.py", "tests/test_final_state.py", "tests/test_certificate_honesty.py"],
    "newcomer": ["tests/test_csv_names.py", "tests/test_csv_header.py", "tests/test_recipe.py",
                 "tests/test_recipe_paths.py", "tests/test_advice_digits.py", "tests/test_advice_honesty.py",
                 "tests/test_advice_options.py", "tests/test_proba_extremes.py", "tests/test_predict_proba.py",
                 "tests/test_newcomer.py", "tests/test_continue_keeps_model.py", "tests/test_stop_reason.py",
                 "tests/test_input_rules.py", "tests/test_width.py"],
    "inputs": ["tests/test_fuzz.py", "tests/test_fuzz_inputs.py", "tests/test_readers.py", "tests/test_store.py",
               "tests/test_fuzz_options.py"],
}

_EXAMPLES = re.compile(r"(\d+) passing(?: examples)?, ")
_OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|error|errors)")


def run(promise: str, scale: float, extra: list[str]) -> dict:
    files = [f for f in PROMISES[promise] if os.path.exists(os.path.join(ROOT, f))]
    env = dict(os.environ, OOC_GENERATOR_SCALE=str(scale))
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow",
                        "--hypothesis-show-statistics", *extra, *files], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    out = r.stdout + r.stderr
    outcome = {k: 0 for k in ("passed", "failed", "skipped", "error")}
    for n, what in _OUTCOME.findall(out.splitlines()[-1] if out.strip() else ""):
        outcome["error" if what.startswith("error") else what] += int(n)
    return {"promise": promise, "scale": scale, "files": files, "examples": sum(int(n) for n in _EXAMPLES.findall(out)),
            "tests": outcome, "exit": r.returncode, "seconds": round(time.monotonic() - t0, 1),
            "failures": [line for line in out.splitlines() if line.startswith("FAILED")][:20]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--promise", choices=sorted(PROMISES), action="append", help="default: every promise")
    ap.add_argument("--scale", type=float, default=10.0, help="times each test's CI budget of examples (default 10)")
    ap.add_argument("pytest_args", nargs="*", help="passed on to pytest (after --)")
    args = ap.parse_args(argv)
    status = 0
    for promise in args.promise or sorted(PROMISES):
        res = run(promise, args.scale, args.pytest_args)
        print(json.dumps(res), flush=True)
        status = status or res["exit"]
    return status


if __name__ == "__main__":
    sys.exit(main())

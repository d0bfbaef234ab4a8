"""The long run of the input fuzz: malformed and extreme inputs of every format, for as long as asked.

The generators and checks are those of ``tests/test_fuzz_inputs.py`` (``tests/input_cases.py``): each
case must be one line naming the file and its first bad line, or a store equal to an independent
reference parse. Prints the count of cases per format (and how many converted, how many were refused)
and exits 1 at the first case that breaks the promise, after printing it (hypothesis shrinks it first).

    python scripts/fuzz_inputs.py --examples 2000            # per format
    python scripts/fuzz_inputs.py --format csv --seconds 600
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from input_cases import FORMATS  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", choices=sorted(FORMATS), action="append", help="Formats to fuzz (default: all).")
    ap.add_argument("--examples", type=int, default=1000, help="Cases per format (default 1000).")
    ap.add_argument("--seconds", type=float, default=None, help="Stop each format after this long.")
    args = ap.parse_args(argv)
    counts = collections.Counter()
    for fmt in args.format or sorted(FORMATS):
        strategy, check = FORMATS[fmt]
        t0 = time.monotonic()

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(strategy())
        def run(case):
            if args.seconds is not None and time.monotonic() - t0 > args.seconds:
                return
            with tempfile.TemporaryDirectory(prefix="ooc-fuzz-inputs-") as tmp:
                outcome = check(case, tmp)
            counts[(fmt, outcome)] += 1

        run()
        done = sum(v for (f, _), v in counts.items() if f == fmt)
        print(f"{fmt}: {done} cases ({counts[(fmt, 'ok')]} converted and equal to the reference, "
              f"{counts[(fmt, 'error')]} refused with one line), {time.monotonic() - t0:.0f} s", flush=True)
    print(f"cases: {sum(counts.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The long run of ooc's stateful safety property (``tests/safety_machine.py``).

Random sequences of ooc commands (convert, append, train, resume, predict, export, batch, demo, with
and without ``--overwrite``, children SIGKILLed at random moments) interleaved with users' actions
(files dropped into stores and runs, copied marker files, symbolic links, flipped bytes); after every
step: no user file changed or lost, nothing left behind, every artifact verifies or is refused in one
line. Prints the number of steps run; a failure prints hypothesis's shortest failing sequence.

Usage::

    python scripts/stateful_safety.py [--examples 200] [--steps 30] [--seed 0] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200, help="random sequences to run")
    ap.add_argument("--steps", type=int, default=30, help="most steps in a sequence")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="where the sequences' folders go (default: a temporary one)")
    args = ap.parse_args(argv)

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(here), "tests"))
    base = args.dir or tempfile.mkdtemp(prefix="ooc-safety-")
    # the registry of temporaries (ooc.fsutil.sweep_temporaries) of this run's own, shared with its children
    os.environ.setdefault("OOC_STATE_DIR", os.path.join(base, ".state"))

    from hypothesis import HealthCheck, seed, settings
    from safety_machine import SafetyMachine

    SafetyMachine.base = base
    SafetyMachine.steps = 0
    case = seed(args.seed)(settings(max_examples=args.examples, stateful_step_count=args.steps, deadline=None,
                                    suppress_health_check=list(HealthCheck))(SafetyMachine).TestCase)
    t0 = time.perf_counter()
    status = 0
    try:
        case().runTest()
    except BaseException as exc:  # hypothesis printed the failing sequence; the error itself, whole
        import traceback

        traceback.print_exception(exc, file=sys.stderr)
        status = 1
    print(f"stateful safety: {SafetyMachine.steps} steps in {time.perf_counter() - t0:.0f} s, "
          f"{args.examples} sequences of up to {args.steps} steps: {'FAILED' if status else 'ok'}")
    return status


if __name__ == "__main__":
    sys.exit(main())

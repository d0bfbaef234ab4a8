"""The long run of the options fuzz: bad values for every option of every ``ooc`` command.

The generators and the check are those of ``tests/test_fuzz_options.py`` (``tests/option_cases.py``):
each value must be refused while the arguments are parsed (exit status 2, one line naming the option,
no file made), and ``ooc.train``'s options refuse it in Python with a ValueError naming the option.
Prints the count of cases and exits 1 at the first that breaks the promise (shrunk by hypothesis).

    python scripts/fuzz_options.py --examples 200            # per option
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from option_cases import bad_values, check_refused, commands, config_types, python_value, typed_cases  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=100, help="Values per option (default 100).")
    args = ap.parse_args(argv)
    from ooc.config import TrainConfig

    count = 0
    cases = typed_cases()
    for name, option in cases:
        cmd = commands()[name]

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(bad_values(option.type))
        def run(value):
            nonlocal count
            with tempfile.TemporaryDirectory(prefix="ooc-fuzz-options-") as tmp:
                check_refused(tmp, name, cmd, option, value)
            count += 1

        run()
    print(f"command line: {count} cases over {len(cases)} options of {len(commands())} commands", flush=True)
    api = 0
    for field, kind in sorted(config_types().items()):

        @settings(max_examples=args.examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(bad_values(kind))
        def run_api(text):
            nonlocal api
            try:
                TrainConfig.from_options({field: python_value(text)})
            except ValueError as exc:
                assert f"--{field.replace('_', '-')}" in str(exc), (field, text, str(exc))
            else:
                raise AssertionError(f"TrainConfig took {field}={text!r}")
            api += 1

        run_api()
    print(f"python API: {api} cases over {len(config_types())} options")
    print(f"cases: {count + api}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

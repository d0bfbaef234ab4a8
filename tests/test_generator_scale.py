"""``OOC_GENERATOR_SCALE`` (tests/conftest.py) makes every hypothesis test draw that many times its CI budget:
how scripts/run_generators.py runs the suite's generators big. Checked on one fast generator."""

import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEST = "test_advice_digits.py::test_advice_never_prints_two_rates_equal"


def _drawn(scale: str) -> int:
    env = dict(os.environ, OOC_GENERATOR_SCALE=scale)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--hypothesis-show-statistics",
                        os.path.join(HERE, TEST)], env=env, capture_output=True, text=True, cwd=HERE)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return int(re.search(r"Stopped because settings.max_examples=(\d+)", r.stdout).group(1))


def test_the_scale_multiplies_each_generators_budget():
    from test_advice_digits import test_advice_never_prints_two_rates_equal as t

    budget = t._hypothesis_internal_use_settings.max_examples
    assert _drawn("1") == budget
    assert _drawn("3") == 3 * budget

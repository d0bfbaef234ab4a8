"""Numbers in option values are written plainly (docs/cli.rst): ASCII digits, no ``_``, no space around them.
Python's ``float``/``int`` read ``1e-3_0`` as 1e-30, ``3_00MiB`` as 300 MiB and ``٣`` as 3; each option
refuses them, naming itself, rather than read a value the user may not have meant. (Count, real and size
options are drawn by the options generator, tests/option_cases.py; these are the class-weight mapping's
numbers and the size parser shared by every memory and block option.)"""

from __future__ import annotations

import pytest

from ooc.solvers.problem import normalize_class_weight
from ooc.units import parse_bytes


@pytest.mark.parametrize("text", ["1=1_0,-1=1", "1_0=2", "1=٣", "1=３", "1=1e-3_0"])
def test_class_weights_are_plain_numbers(text):
    with pytest.raises(ValueError, match="--class-weight"):
        normalize_class_weight(text)


@pytest.mark.parametrize("text", ["3_00MiB", "1_024", "٣GiB", "３GiB"])
def test_sizes_are_plain_numbers(text):
    with pytest.raises(ValueError, match="memory size"):
        parse_bytes(text)


def test_plain_ones_still_read():
    assert normalize_class_weight("1=10,-1=1") == "-1=1,1=10"
    assert parse_bytes("300MiB") == 300 << 20 and parse_bytes(" 2GiB ") == 2 << 30

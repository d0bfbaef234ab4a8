"""Numbers in messages: the one rule for how many digits a number printed beside another gets.

Advice compares numbers in words ("it moved between 0.983 and 0.984", "the gap shrinks by 0.9999
per epoch"): rounded to a fixed count of significant digits, two numbers that differ (or a rate just
below 1 and 1 itself) can print the same, and the sentence then says something false ("moved between
0.983 and 0.983", "shrinks by 1"). :func:`distinct` prints each with the fewest significant digits, at
least the usual three, at which numbers that differ print differently.
"""

from __future__ import annotations

#: Significant digits at which every two different doubles print differently (``%.17g`` round-trips).
MAX_DIGITS = 17


def distinct(*values: float, digits: int = 3) -> tuple[str, ...]:
    """``values`` as ``%g`` text with ``digits`` significant digits, or more where two of them that
    differ would otherwise print the same.

    Parameters
    ----------
    *values : float
        The numbers a sentence puts side by side (include the bound they are compared to, e.g. 1 for a rate).
    digits : int, default 3
        The fewest significant digits.

    Returns
    -------
    tuple of str
        One text per value, all with the same number of significant digits; equal texts only for equal values.
    """
    values = tuple(float(v) for v in values)
    for d in range(digits, MAX_DIGITS + 1):
        texts = tuple(f"{v:.{d}g}" for v in values)
        if all(texts[i] != texts[j] for i in range(len(values)) for j in range(i)
               if values[i] != values[j]):
            return texts
    return texts


def versus(value: float, bound: float, digits: int = 3) -> str:
    """``value`` as ``%g`` text with ``digits`` significant digits, or more where it would read as ``bound``
    printed ``%g`` (``'gap 0.001 > tol 0.001'`` for a gap of 0.0010004): a value compared in words with a
    bound reads equal to it only when it is."""
    value, bound = float(value), float(bound)
    shown = float(f"{bound:g}")
    for d in range(digits, MAX_DIGITS + 1):
        text = f"{value:.{d}g}"
        if value == bound or float(text) != shown:
            return text
    return text

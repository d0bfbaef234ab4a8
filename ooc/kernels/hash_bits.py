"""How many columns the hashed inputs (Vowpal Wabbit text, raw text) have: ``2**bits``.

A feature's column is its hash modulo ``2**bits`` (VW's ``-b``). Kept apart from the
Numba kernels of :mod:`ooc.kernels.vw` so the command line can read the default at load
without compiling anything (nor importing NumPy: ``numbers.Integral`` covers NumPy's integers).
"""

from numbers import Integral

#: VW's ``-b`` default.
DEFAULT_HASH_BITS = 18
#: The most bits: a column id must fit the store's 32-bit index type.
MAX_HASH_BITS = 31


def check_hash_bits(bits, option="--hash-bits") -> int:
    """``bits`` as an int in ``1..MAX_HASH_BITS``; a ValueError naming ``option`` otherwise."""
    if isinstance(bits, bool) or not isinstance(bits, Integral) or not 1 <= bits <= MAX_HASH_BITS:
        raise ValueError(f"{option} must be an integer from 1 to {MAX_HASH_BITS} (2**bits columns), got {bits!r}")
    return int(bits)

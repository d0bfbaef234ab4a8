"""The types and ranges of the values options take, written once for the command line and Python.

Every numeric or structured option of every ``ooc`` command has a type here: a :class:`Number`
(integer or real, with its accepted range: finite, at least, at most), :class:`Bytes` (a size
such as ``2GiB``), :class:`Distributed` (``local:N`` or a scheduler address) or
:class:`ColumnPair` (``LABEL:TEXT``). Each type is a :class:`click.ParamType`, so the command line
refuses a bad value while it parses the arguments (exit status 2, one line naming the option and
the accepted range, before any work starts or any file is made), and each has a ``check(value,
name)`` that Python entry points (:class:`ooc.config.TrainConfig`, :func:`ooc.synth.synth`, the
estimators through it) call with the same rule: a :class:`ValueError` naming the parameter.

Upper bounds are there for values that size an allocation (a count of rows, a rank, classes): a
value past them cannot be held by any machine this program runs on, and is refused by name rather
than found out by an allocation of terabytes.
"""

from __future__ import annotations

import math
import re

import click

from .kernels.hash_bits import MAX_HASH_BITS
from .units import parse_bytes, plain

#: The largest integer any option takes (a signed 64-bit count).
INT64_MAX = 2**63 - 1
#: The largest seed: NumPy's and the kernels' generators take a seed in ``[0, 2**63)``.
SEED_MAX = INT64_MAX
#: The most threads a command asks for (far beyond any machine's cores, but finite).
THREADS_MAX = 4096
#: The most worker processes of a local Dask cluster.
WORKERS_MAX = 1024
#: The largest ``--factorize K``: the K x K Gram matrix of ``G`` (8 K**2 bytes, 2 GiB here) and a
#: K-float row of ``U`` per example must fit in memory; dspdc's factorized data has a small rank.
FACTORIZE_MAX = 1 << 14


class _Typed(click.ParamType):
    """A value type checked by its ``check(value, name=None)`` (raising a ValueError naming the value), which
    the command line calls while it parses (a usage error naming the option) and Python callers call too."""

    def check(self, value, name: str | None = None):  # pragma: no cover - every type defines its own
        raise NotImplementedError

    def convert(self, value, param, ctx):
        try:
            return self.check(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Number(_Typed):
    """An integer or a real number in a range.

    Parameters
    ----------
    integer : bool
        Integers only (``3``, ``"3"`` and the float ``3.0`` are 3; ``3.5``, ``True`` and the texts ``"3.0"``,
        ``"3e0"`` are refused: a text is an integer when it is only digits, with an optional sign).
    low, high : number, optional
        Bounds; ``None``: unbounded on that side. A real number is always finite.
    low_open : bool
        ``low`` itself is refused (``> low`` rather than ``>= low``).
    note : str, optional
        What a special value means, appended to the message (``"0: every core"``).
    """

    def __init__(self, integer: bool, low=None, high=None, low_open: bool = False, note: str | None = None):
        self.integer = integer
        self.low, self.high, self.low_open = low, high, low_open
        self.note = note
        self.name = "integer" if integer else "number"

    def describe(self) -> str:
        """The accepted values in words: ``an integer from 1 to 31``, ``a finite number > 0``."""
        what = "an integer" if self.integer else "a finite number"
        lo, hi = self.low, (None if self.high == INT64_MAX else self.high)  # a 64-bit bound goes without saying
        if lo is not None and hi is not None and not self.low_open:
            text = f"{what} from {_fmt(lo)} to {_fmt(hi)}"
        else:
            parts = []
            if lo is not None:
                parts.append(f"{'>' if self.low_open else '>='} {_fmt(lo)}")
            if hi is not None:
                parts.append(f"<= {_fmt(hi)}")
            text = " ".join([what, " and ".join(parts)]) if parts else what
        return text + (f" ({self.note})" if self.note else "")

    def check(self, value, name: str | None = None):
        """``value`` as an int or a float when it is in range; else :class:`ValueError` naming ``name``."""
        got = self._number(value)
        if got is None or not self._in_range(got):
            head = f"{name} must be" if name else "must be"
            raise ValueError(f"{head} {self.describe()} (got {_shown(value)})")
        return got

    def _number(self, value):
        if isinstance(value, bool) or value is None:
            return None
        if isinstance(value, (str, bytes)):
            text = value.decode() if isinstance(value, bytes) else value
            if not plain(text):
                return None
            if self.integer:
                # an integer's text is its digits: "1e3" or "1.0" is a real number's spelling, refused rather
                # than rounded into a count or a seed the user did not write
                return int(text) if re.fullmatch(r"[+-]?[0-9]+", text) else None
            try:
                value = float(text)
            except (ValueError, OverflowError):
                return None
        try:
            x = float(value)
        except (TypeError, ValueError, OverflowError):
            return None
        if not math.isfinite(x):
            return None
        if not self.integer:
            return x
        try:
            i = int(value)
        except (TypeError, ValueError, OverflowError):
            return None
        return i if i == value else None

    def _in_range(self, x) -> bool:
        if self.low is not None and (x <= self.low if self.low_open else x < self.low):
            return False
        return self.high is None or x <= self.high

    def get_metavar(self, param, ctx=None):  # click >= 8.2 passes ctx
        return "INTEGER" if self.integer else "FLOAT"

    def __repr__(self):
        return f"Number({self.describe()})"


class Bytes(_Typed):
    """A size in bytes: an integer or ``512MiB``, ``2GB``, ... (:func:`ooc.units.parse_bytes`), at least
    ``low``; with ``auto`` (``--memory``'s what-the-process-may-use) or another word when ``words`` lists it.
    The value is kept as written (the commands parse it again where they need the bytes)."""

    name = "size"

    def __init__(self, low: int = 1, words: tuple = ()):
        self.low, self.words = low, tuple(words)

    def describe(self) -> str:
        alt = "".join(f" or '{w}'" for w in self.words)
        return f"a size in bytes of at least {self.low} (e.g. 512MiB, 2GiB){alt}"

    def check(self, value, name: str | None = None):
        """``value`` if it is a size in range (or one of the words); else :class:`ValueError` naming ``name``."""
        if isinstance(value, str) and value.lower() in self.words:
            return value
        try:
            n = parse_bytes(value) if not isinstance(value, str) or plain(value) else None
        except (ValueError, TypeError, OverflowError):
            n = None
        if n is None or isinstance(value, bool) or not self.low <= n <= INT64_MAX:
            head = f"{name} must be" if name else "must be"
            raise ValueError(f"{head} {self.describe()} (got {_shown(value)})")
        return value


#: ``host:port`` or ``scheme://host:port`` (tcp, tls, inproc, ucx, ws, wss), as Dask's clients take them.
_ADDRESS = re.compile(r"^(?:(tcp|tls|ucx|ws|wss)://)?(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})/?$")


class Distributed(_Typed):
    """``--distributed``: ``local:N`` (N worker processes here) or a Dask scheduler's address
    (``tcp://HOST:PORT``, ``HOST:PORT``, or ``tls``/``ucx``/``ws``/``wss`` instead of ``tcp``)."""

    name = "local:N|ADDRESS"
    local = Number(True, 1, 1024)

    def describe(self) -> str:
        return (f"local:N (N worker processes here, {self.local.describe()}) or a scheduler address "
                "tcp://HOST:PORT (or HOST:PORT; tls, ucx, ws, wss instead of tcp)")

    def check(self, value, name: str | None = None):
        head = f"{name} " if name else ""
        text = value.strip() if isinstance(value, str) else value
        if isinstance(text, str) and text.startswith("local:"):
            try:
                self.local.check(text.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"{head}{_shown(value)}: expected {self.describe()}") from None
            return text
        m = _ADDRESS.match(text) if isinstance(text, str) else None
        if m is None or not 1 <= int(m.group(3)) <= 65535:
            raise ValueError(f"{head}{_shown(value)}: expected {self.describe()}")
        return text


class Address(Distributed):
    """A Dask scheduler's address (``ooc batch --scheduler``): as :class:`Distributed` without ``local:N``."""

    name = "ADDRESS"

    def describe(self) -> str:
        return "a scheduler address tcp://HOST:PORT (or HOST:PORT; tls, ucx, ws, wss instead of tcp)"

    def check(self, value, name: str | None = None):
        if isinstance(value, str) and value.strip().startswith("local:"):
            head = f"{name} " if name else ""
            raise ValueError(f"{head}{_shown(value)}: expected {self.describe()}")
        return super().check(value, name)


class ColumnPair(_Typed):
    """``--text LABEL:TEXT``: two columns of a CSV, each a 0-based number or a header name; a
    ``(label, text)`` tuple."""

    name = "LABEL:TEXT"

    def check(self, value, name: str | None = None):
        if isinstance(value, tuple) and len(value) == 2:
            return value
        label, sep, text = str(value).partition(":")
        if not sep or not label.strip() or not text.strip():
            head = f"{name} " if name else ""
            raise ValueError(f"{head}{_shown(value)}: expected LABEL:TEXT (two columns, e.g. 0:1 or label:review)")
        for c in (label, text):
            if c.strip().lstrip("+-").isdigit() and int(c) < 0:
                head = f"{name} " if name else ""
                raise ValueError(f"{head}{_shown(value)}: columns are counted from 0")
        if label.strip() == text.strip():
            head = f"{name} " if name else ""
            raise ValueError(f"{head}{_shown(value)}: the label and the text are two different columns")
        return (label, text)


class Checked(_Typed):
    """A text value whose meaning a lower layer owns (a sampling's name, a class-weight mapping): checked by
    that layer's own normaliser (``check(value) -> normalised``, raising a ValueError that names the
    option), while the command line parses; the value is kept as written."""

    def __init__(self, name: str, normalise):
        self.name = name
        self._normalise = normalise

    def check(self, value, name: str | None = None):
        self._normalise(value)
        return value


def _sampling(value):
    from .schedule.sampling import normalize_sampling

    return normalize_sampling(value)


def _class_weight(value):
    from .solvers.problem import normalize_class_weight

    return normalize_class_weight(value)


def _fmt(x) -> str:
    if isinstance(x, int) and x >= 2**20 and x & (x + 1) == 0:  # 2**k - 1
        return f"2**{x.bit_length()} - 1"
    if isinstance(x, int) and x >= 2**20 and x & (x - 1) == 0:
        return f"2**{x.bit_length() - 1}"
    return f"{x:g}" if isinstance(x, float) else str(x)


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# -- the types, one per kind of value (the commands and TrainConfig name these) -----------------------
#: a count of at least one (epochs of a pass, classes, rows...)
POSITIVE_INT = Number(True, 1, INT64_MAX)
#: a count that may be zero
NONNEG_INT = Number(True, 0, INT64_MAX)
#: a real number >= 0 (regularization, tolerances, seconds)
NONNEG_FLOAT = Number(False, 0.0)
#: a real number > 0
POSITIVE_FLOAT = Number(False, 0.0, low_open=True)
#: a probability or share
UNIT_FLOAT = Number(False, 0.0, 1.0)
#: any finite real number
FLOAT = Number(False)
SEED = Number(True, 0, SEED_MAX)
THREADS = Number(True, 0, THREADS_MAX, note="0: every core the process may use")
WORKERS = Number(True, 1, WORKERS_MAX)
FACTORIZE = Number(True, 1, FACTORIZE_MAX)
#: ``--memory``: a size or ``auto``
MEMORY = Bytes(1, words=("auto",))
#: ``--block-bytes`` of a conversion
BLOCK_BYTES = Bytes(64)
DISTRIBUTED = Distributed()
ADDRESS = Address()
TEXT_COLUMNS = ColumnPair()
#: ``--hash-bits``: hashed inputs (vw, raw text) have 2**BITS columns
HASH_BITS = Number(True, 1, MAX_HASH_BITS)
#: ``--weight-column J``: a CSV column, 0-based (negative: counted from the end)
WEIGHT_COLUMN = Number(True, -INT64_MAX, INT64_MAX)
#: ``--index-base`` of ``convert`` (``auto``: guessed from the ids) and of the commands following a recipe
INDEX_BASE_AUTO = click.Choice(["auto", "0", "1"])
INDEX_BASE = click.Choice(["0", "1"])
SAMPLING = Checked("SAMPLING", _sampling)
CLASS_WEIGHT = Checked("balanced|LABEL=WEIGHT,...", _class_weight)

#: ``ooc synth``'s numbers (:func:`ooc.synth.synth` checks its arguments with the same types). Columns
#: and classes size O(columns x classes) arrays of the planted model; the class count is bounded as
#: an automatic label kind bounds it (1000).
SYNTH = {
    "rows": POSITIVE_INT,
    "cols": Number(True, 1, 2**31 - 1),
    "nnz_per_row": Number(True, 1, 2**31 - 1),
    "n_classes": Number(True, 2, 1000),
    "zipf": NONNEG_FLOAT,
    "informative": POSITIVE_INT,
    # a flip probability for classification (at most 1: checked against --task by the command), a std
    # relative to the signal for regression: beyond a million times the signal the labels are only noise,
    # and 1e308 overflowed into labels that are not finite
    "noise": Number(False, 0, 1e6),
    "seed": SEED,
}

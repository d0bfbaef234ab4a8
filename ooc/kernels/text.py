"""Numba kernels that parse svmlight/LIBSVM and dense CSV text held in a uint8 buffer.

The kernels never raise: they stop at the first problem and return an error code with the
byte position, line and column of the offending token; :mod:`ooc.store.readers` turns the
code into a message. Every buffer handed to a kernel ends with a newline (the reader appends
one when the file lacks it), which also stops ``strtod`` inside the buffer.

Numbers are parsed exactly (bit-identical to Python's ``float``): a decimal with at most
18 digits (leading zeros included), a mantissa at most 2**53 and a decimal exponent within
+-22 is one correctly rounded multiplication or division by an exact power of ten (Clinger's
fast path); anything else goes to libc ``strtod`` (glibc's is correctly rounded). ``strtod``
reads the C locale's decimal point, which Python leaves as '.' unless the program calls
``locale.setlocale(LC_NUMERIC, ...)``.
"""

import numpy as np
from numba import njit, types

# Linked by symbol name rather than by address, so the on-disk Numba cache stays valid
# across processes (a ctypes function pointer would make every function that calls it
# uncacheable).
_strtod = types.ExternalFunction("strtod", types.float64(types.intp, types.intp))

# Error codes returned by the kernels; readers.py maps each one to a message.
OK = 0
ERR_BAD_LABEL = 1
ERR_MISSING_LABEL = 2
ERR_MULTILABEL = 3
ERR_NONFINITE_LABEL = 4
ERR_BAD_INDEX = 5
ERR_NEGATIVE_INDEX = 6
ERR_NONINTEGER_INDEX = 7
ERR_MISSING_COLON = 8
ERR_INDEX_TOO_LARGE = 9
ERR_DECREASING_INDEX = 10
ERR_DUPLICATE_INDEX = 11
ERR_BAD_VALUE = 12
ERR_NONFINITE_VALUE = 13
ERR_BAD_CELL = 14
ERR_NONFINITE_CELL = 15
ERR_TOO_FEW_COLUMNS = 16
ERR_TOO_MANY_COLUMNS = 17
ERR_EMPTY_CELL = 18
ERR_VALUE_TOO_LARGE = 19
ERR_LABEL_TOO_LARGE = 20
ERR_VALUE_TOO_SMALL = 21

#: Where ``max_abs`` (the parsers' value limit) is float32's, a nonzero value of at most this magnitude
#: rounds to 0 in float32 (half of its smallest subnormal, 2**-149: ties go to the even 0): refused, as a
#: value too large for it is, rather than stored as an explicit 0 counted as a nonzero.
FLOAT32_MAX_ABS = 2.0**128 - 2.0**103
FLOAT32_ZERO_BELOW = 2.0**-150

# Status of _parse_float.
_F_OK = 0
_F_BAD = 1
_F_NONFINITE = 2

_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)
_INT64_MAX_DIGITS = np.frombuffer(b"9223372036854775807", dtype=np.uint8).copy()
_MANT_DIGITS = 18  # 10**18 - 1 still fits in int64
_TWO53 = np.int64(1) << np.int64(53)


@njit(cache=True, nogil=True, inline="always")
def _is_space(c):
    # Python's bytes.split() whitespace minus the newline, which ends a row.
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True, inline="always")
def _is_digit(c):
    return c >= 48 and c <= 57


@njit(cache=True, nogil=True, inline="always")
def _ends_token(c):
    # A token (label, value, id:value pair) ends at whitespace, a newline or a comment.
    return c == 32 or c == 10 or c == 9 or c == 13 or c == 35 or c == 11 or c == 12


@njit(cache=True, nogil=True, inline="always")
def _parse_float(buf, i, n):
    """Parse a decimal float starting at ``buf[i]``.

    Returns ``(value, end, status)`` where ``end`` is the index just past the number and
    ``status`` is ``_F_OK``, ``_F_BAD`` (not a decimal float) or ``_F_NONFINITE`` (nan,
    inf or overflow to inf). The caller checks what follows ``end``.

    The mantissa's digit loops stop at the first byte that is not a digit, without comparing
    with ``n`` at every byte (measured: 15 % of the svmlight kernel's time; a check of ``i``
    against ``n`` on entry cost 10 % more, so there is none): ``i`` is inside ``buf``, every
    buffer ends with a newline, and callers end the span ``buf[i:n]`` where a token ends (a
    separator, never a digit), so the loops stop at ``n`` at the latest.
    """
    start = i
    neg = False
    if i < n and (buf[i] == 45 or buf[i] == 43):
        neg = buf[i] == 45
        i += 1
    # Digits go into mant unchecked; with more than _MANT_DIGITS of them (leading zeros
    # included, which is rare) mant may have wrapped and is not used: strtod decides.
    mant = np.int64(0)
    digits_start = i
    while _is_digit(buf[i]):
        mant = mant * 10 + np.int64(buf[i] - 48)
        i += 1
    nd = i - digits_start
    exp10 = 0
    if i < n and buf[i] == 46:  # '.'
        i += 1
        frac_start = i
        while _is_digit(buf[i]):
            mant = mant * 10 + np.int64(buf[i] - 48)
            i += 1
        exp10 = frac_start - i
        nd -= exp10
    if nd == 0:
        # inf/nan spellings are valid for float() but not for training data: say so.
        if i < n and (buf[i] == 105 or buf[i] == 73 or buf[i] == 110 or buf[i] == 78):
            return 0.0, i, _F_NONFINITE
        return 0.0, i, _F_BAD
    if i < n and (buf[i] == 101 or buf[i] == 69):  # 'e' / 'E'
        i += 1
        eneg = False
        if i < n and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        if i >= n or not _is_digit(buf[i]):
            return 0.0, i, _F_BAD
        e = 0
        while i < n and _is_digit(buf[i]):
            if e < 100000:  # saturate: beyond this the result is 0 or inf anyway
                e = e * 10 + (buf[i] - 48)
            i += 1
        exp10 += -e if eneg else e
    if nd <= _MANT_DIGITS:
        if mant == 0:
            v = 0.0
            return (-v if neg else v), i, _F_OK
        if mant <= _TWO53 and exp10 >= -22 and exp10 <= 22:
            v = float(mant)
            if exp10 < 0:
                v = v / _POW10[-exp10]
            else:
                v = v * _POW10[exp10]
            return (-v if neg else v), i, _F_OK
    v = _strtod(buf.ctypes.data + start, 0)  # applies the sign itself
    if v != v or v == np.inf or v == -np.inf:
        return 0.0, i, _F_NONFINITE
    return v, i, _F_OK


@njit(cache=True, nogil=True, inline="always")
def _result(row, nnz, code, pos, line, line_start, first_row_line):
    # What the parse kernels return; the column of byte ``pos`` is 1-based.
    return row, nnz, code, pos, line, pos - line_start + 1, first_row_line


@njit(cache=True, nogil=True)
def _int_too_large(buf, start, end):
    """Whether the digits ``buf[start:end]`` exceed 2**63 - 1 (leading zeros allowed)."""
    while start < end - 1 and buf[start] == 48:
        start += 1
    if end - start != 19:
        return end - start > 19
    for k in range(19):
        d = buf[start + k]
        c = _INT64_MAX_DIGITS[k]
        if d != c:
            return d > c
    return False


@njit(cache=True, nogil=True)
def count_bytes(buf, nbuf, a, b):
    """Count occurrences of bytes ``a`` and ``b`` in ``buf[:nbuf]``.

    Used to size the parse outputs exactly: rows <= newlines + 1, entries <= colons
    (svmlight) or delimiters + newlines + 1 (CSV).
    """
    na = 0
    nb = 0
    for k in range(nbuf):
        c = buf[k]
        na += c == a
        nb += c == b
    return na, nb


@njit(cache=True, nogil=True)
def line_cuts(buf, nbuf, parts):
    """Offsets cutting ``buf[:nbuf]`` into at most ``parts`` pieces of whole lines.

    Returns ``cuts`` (int64, ``cuts[0] == 0``, ``cuts[-1] == nbuf``, increasing): piece ``k``
    is ``buf[cuts[k]:cuts[k + 1]]`` and ends just after a newline, ``cuts[k]`` being the
    first newline at or after ``k * nbuf / parts`` plus one (fewer pieces when lines are
    longer than a piece). ``buf[nbuf - 1]`` must be a newline.
    """
    cuts = np.empty(parts + 1, np.int64)
    cuts[0] = 0
    m = 1
    for k in range(1, parts):
        i = max(k * nbuf // parts, cuts[m - 1])
        while i < nbuf and buf[i] != 10:
            i += 1
        i += 1
        if i >= nbuf:
            break
        if i > cuts[m - 1]:
            cuts[m] = i
            m += 1
    cuts[m] = nbuf
    return cuts[:m + 1]


@njit(cache=True, nogil=True, inline="always")
def _skip_comment(buf, i, n):
    """The position of the newline ending the comment (or line) at ``i``."""
    while i < n and buf[i] != 10:
        i += 1
    return i


@njit(cache=True, nogil=True)
def _bad_label_code(buf, tok, n):
    """Tell a missing label or a multilabel from a typo by the rest of the token at ``tok``."""
    j = tok
    while j < n and not _ends_token(buf[j]):
        if buf[j] == 58:  # ':'
            return ERR_MISSING_LABEL
        if buf[j] == 44:  # ','
            return ERR_MULTILABEL
        j += 1
    return ERR_BAD_LABEL


@njit(cache=True, nogil=True, inline="always")
def _is_qid(buf, i, n):
    """Whether ``qid:`` starts at ``i``."""
    return buf[i] == 113 and i + 3 < n and buf[i + 1] == 105 and buf[i + 2] == 100 and buf[i + 3] == 58


@njit(cache=True, nogil=True)
def _index_error(buf, i, n, too_large, idx, prev):
    """The ``ERR_*`` code of a feature index that ends at ``i`` and was refused (cold path)."""
    c = buf[i]
    if c != 58:  # ':'
        if _ends_token(c):
            return ERR_MISSING_COLON
        if c == 46 or c == 101 or c == 69:
            return ERR_NONINTEGER_INDEX
        return ERR_BAD_INDEX
    if too_large:
        return ERR_INDEX_TOO_LARGE
    return ERR_DUPLICATE_INDEX if idx == prev else ERR_DECREASING_INDEX


@njit(cache=True, nogil=True)
def _value_error(st, ends):
    """The ``ERR_*`` code of a refused feature value, from its :func:`_parse_float` status and
    whether the token ends after the number (cold path)."""
    if st == _F_NONFINITE:
        return ERR_NONFINITE_VALUE
    if st != _F_OK or not ends:
        return ERR_BAD_VALUE
    return ERR_VALUE_TOO_LARGE  # a whole number token: refused for its size


@njit(cache=True, nogil=True, inline="always")
def rounds_to_zero(v, max_abs):
    """Whether the nonzero value ``v`` rounds to 0 in the store's type, told by its limit ``max_abs``
    (float32's: :data:`FLOAT32_MAX_ABS`; float64's is ``inf`` and keeps every value a float64 parse gives)."""
    return max_abs <= FLOAT32_MAX_ABS and v != 0.0 and abs(v) <= FLOAT32_ZERO_BELOW


@njit(cache=True, nogil=True, inline="always")
def _parse_features(buf, i, n, max_abs, out_indices, out_data, nnz):
    """The ``index:value`` pairs of one svmlight row, from after its label to its newline.

    Returns ``(i, nnz, code, pos)``: ``i`` at the newline (or ``n``) and the entries written,
    or an ``ERR_*`` code and the byte offset of the offending token.
    """
    prev = np.int64(-1)
    first_feature = True
    while True:
        while i < n and _is_space(buf[i]):
            i += 1
        if i >= n:
            break
        c = buf[i]
        if c == 10:
            break
        if c == 35:
            i = _skip_comment(buf, i, n)
            break
        tok = i
        if first_feature and _is_qid(buf, i, n):
            # qid:N is ignored (as scikit-learn does with query_id=False).
            while i < n and not _ends_token(buf[i]):
                i += 1
            first_feature = False
            continue
        first_feature = False
        if c == 43:  # '+'
            i += 1
        elif c == 45:  # '-'
            code = ERR_NEGATIVE_INDEX if i + 1 < n and _is_digit(buf[i + 1]) else ERR_BAD_INDEX
            return i, nnz, code, tok
        if i >= n or not _is_digit(buf[i]):
            return i, nnz, ERR_BAD_INDEX, tok
        idx = np.int64(0)
        digits_start = i
        while _is_digit(buf[i]):  # stops at the newline ending the buffer at the latest
            idx = idx * 10 + np.int64(buf[i] - 48)
            i += 1
        too_large = i - digits_start > 18 and _int_too_large(buf, digits_start, i)
        if buf[i] != 58 or too_large or idx <= prev:
            return i, nnz, _index_error(buf, i, n, too_large, idx, prev), tok
        i += 1
        vtok = i
        v, i, st = _parse_float(buf, i, n)
        if st != _F_OK or not _ends_token(buf[i]) or abs(v) >= max_abs:
            return i, nnz, _value_error(st, _ends_token(buf[i])), vtok
        if rounds_to_zero(v, max_abs):
            return i, nnz, ERR_VALUE_TOO_SMALL, vtok
        out_indices[nnz] = idx
        out_data[nnz] = v
        nnz += 1
        prev = idx
    return i, nnz, OK, i


@njit(cache=True, nogil=True)
def parse_svmlight(buf, nbuf, first_line, max_abs, out_labels, out_indptr, out_indices, out_data):
    """Parse svmlight/LIBSVM rows from ``buf[:nbuf]``.

    Parameters
    ----------
    buf : ndarray of uint8
        Text; ``buf[nbuf - 1]`` must be a newline.
    nbuf : int
        Number of bytes to parse.
    first_line : int
        1-based line number of ``buf[0]``.
    max_abs : float
        Feature values with ``abs(value) >= max_abs`` are refused (``ERR_VALUE_TOO_LARGE``):
        the limit of the stored value type (``np.inf`` for float64, see
        :func:`ooc.store.readers.overflow_limit`); labels are not limited.
    out_labels, out_indptr, out_indices, out_data : ndarray
        Outputs (float64, int64, int64, float64) with room for every row and entry in the
        buffer (see :func:`count_bytes`); ``out_indptr`` has one more slot than rows.

    Returns
    -------
    n_rows, nnz : int
        Rows and entries written.
    err_code : int
        ``OK`` or one of the ``ERR_*`` codes; parsing stops at the first error.
    err_pos, err_line, err_col : int
        Byte offset in ``buf``, 1-based line and 1-based byte column of the offending token.
    first_row_line : int
        Line number of the first row (0 when no row was parsed).
    """
    i = 0
    line = first_line
    line_start = 0
    row = 0
    nnz = 0
    first_row_line = 0
    out_indptr[0] = 0
    n = nbuf
    while i < n:
        while i < n and _is_space(buf[i]):
            i += 1
        if i >= n:
            break
        c = buf[i]
        if c == 10:
            i += 1
            line += 1
            line_start = i
            continue
        if c == 35:  # comment-only line
            i = _skip_comment(buf, i, n)
            continue
        tok = i
        y, i, st = _parse_float(buf, i, n)
        if st == _F_NONFINITE:
            return _result(row, nnz, ERR_NONFINITE_LABEL, tok, line, line_start, first_row_line)
        if st != _F_OK or not _ends_token(buf[i]):
            code = _bad_label_code(buf, tok, n)
            return _result(row, nnz, code, tok, line, line_start, first_row_line)
        if abs(y) >= max_abs:  # a label must fit the store's value type, as a value does
            return _result(row, nnz, ERR_LABEL_TOO_LARGE, tok, line, line_start, first_row_line)
        out_labels[row] = y
        if row == 0:
            first_row_line = line
        i, nnz, code, pos = _parse_features(buf, i, n, max_abs, out_indices, out_data, nnz)
        if code != OK:
            return _result(row, nnz, code, pos, line, line_start, first_row_line)
        row += 1
        out_indptr[row] = nnz
    return _result(row, nnz, OK, i, line, line_start, first_row_line)


@njit(cache=True, nogil=True, inline="always")
def _skip_padding(buf, i, sep):
    """Past the spaces and tabs at ``i`` that are not the delimiter ``sep``."""
    while _is_space(buf[i]) and buf[i] != sep:
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _parse_cells(buf, i, n, sep, ws, ncols, label_col, max_abs, out_indices, out_data, nnz):
    """The cells of one delimited row, from its first cell (padding skipped) to its end.

    Stores the nonzero feature cells (ids 0-based among the feature columns) from ``nnz`` on.
    Returns ``(i, nnz, y, col, code, pos)``: ``i`` past the row's last cell and its padding
    (at its newline or a comment), the entries written, the label, the columns found, and
    ``OK`` or an ``ERR_*`` code with the byte offset ``pos`` of the offending cell.
    """
    col = 0
    y = 0.0
    while True:
        tok = i
        c = buf[i]
        if c == 10 or c == 35 or c == sep:
            return i, nnz, y, col, ERR_EMPTY_CELL, tok
        v, i, st = _parse_float(buf, i, n)
        if st == _F_NONFINITE:
            return i, nnz, y, col, ERR_NONFINITE_CELL, tok
        end = i
        i = _skip_padding(buf, i, sep)
        c = buf[i]
        at_end = c == 10 or c == 35
        if st != _F_OK or not (at_end or c == sep or (ws and i > end)):
            return i, nnz, y, col, ERR_BAD_CELL, tok
        if col >= ncols:
            return i, nnz, y, col, ERR_TOO_MANY_COLUMNS, tok
        if col == label_col:
            if abs(v) >= max_abs:  # a label must fit the store's value type, as a value does
                return i, nnz, y, col, ERR_LABEL_TOO_LARGE, tok
            y = v
        elif abs(v) >= max_abs:
            return i, nnz, y, col, ERR_VALUE_TOO_LARGE, tok
        elif rounds_to_zero(v, max_abs):
            return i, nnz, y, col, ERR_VALUE_TOO_SMALL, tok
        elif v != 0.0:
            out_indices[nnz] = col - (col > label_col)
            out_data[nnz] = v
            nnz += 1
        col += 1
        if at_end:
            return i, nnz, y, col, OK, i
        if not ws:
            i = _skip_padding(buf, i + 1, sep)  # past the delimiter


@njit(cache=True, nogil=True)
def parse_csv(
    buf, nbuf, first_line, delim, ncols, label_col, max_abs,
    out_labels, out_indptr, out_indices, out_data
):
    """Parse dense numeric delimited rows from ``buf[:nbuf]`` into sparse rows.

    Parameters
    ----------
    buf : ndarray of uint8
        Text; ``buf[nbuf - 1]`` must be a newline.
    nbuf : int
        Number of bytes to parse.
    first_line : int
        1-based line number of ``buf[0]``.
    delim : int
        Delimiter byte; 32 means "runs of spaces and tabs" (as ``numpy.loadtxt`` without a
        delimiter).
    ncols : int
        Number of columns every row must have (found by the reader on the first row).
    label_col : int
        Column holding the label, in ``0 .. ncols-1``.
    max_abs : float
        Feature cells with ``abs(value) >= max_abs`` are refused (``ERR_VALUE_TOO_LARGE``),
        as in :func:`parse_svmlight`.
    out_labels, out_indptr, out_indices, out_data : ndarray
        Outputs, sized from :func:`count_bytes` (entries <= delimiters + newlines + 1).

    Returns
    -------
    n_rows, nnz, err_code, err_pos, err_line, err_col, first_row_line : int
        As :func:`parse_svmlight`. For ``ERR_TOO_FEW_COLUMNS`` ``err_pos`` is the number of
        columns found instead of a byte offset, and the column is that of the line end.

    Notes
    -----
    Zero cells are not stored; ids are 0-based positions among the feature columns.
    Blank lines (whitespace only) and ``#`` comments are skipped; cells may be padded with
    whitespace, but never with the delimiter itself: in a tab-separated row a leading tab
    is an empty first cell, not padding.
    """
    i = 0
    line = first_line
    line_start = 0
    row = 0
    nnz = 0
    first_row_line = 0
    out_indptr[0] = 0
    n = nbuf
    ws = delim == 32
    sep = -1 if ws else delim  # in whitespace mode any run of spaces separates cells
    while i < n:
        j = i
        while j < n and _is_space(buf[j]):
            j += 1
        if j >= n:
            break
        c = buf[j]
        if c == 10:
            i = j + 1
            line += 1
            line_start = i
            continue
        if c == 35:
            i = _skip_comment(buf, j, n)
            continue
        i = _skip_padding(buf, i, sep)
        if row == 0:
            first_row_line = line
        i, nnz, y, col, code, pos = _parse_cells(buf, i, n, sep, ws, ncols, label_col, max_abs, out_indices,
                                                 out_data, nnz)
        if code != OK:
            return _result(row, nnz, code, pos, line, line_start, first_row_line)
        if col < ncols:
            # err_pos carries the count found; the column is that of the line end
            return row, nnz, ERR_TOO_FEW_COLUMNS, col, line, i - line_start + 1, first_row_line
        out_labels[row] = y
        row += 1
        out_indptr[row] = nnz
        while buf[i] != 10:  # a trailing comment
            i += 1
    return _result(row, nnz, OK, i, line, line_start, first_row_line)

"""Numba kernels for hashed text inputs: Vowpal Wabbit's text format and raw text in a CSV column.

Feature hashing is Vowpal Wabbit's (``hash.h``/``hashstring`` with the default
``--hash strings``): MurmurHash3 x86_32 of the name's bytes, seeded with the hash of its
namespace, except that a name made of decimal digits only hashes to its integer value plus
the seed (so ``| 12:0.5`` in the default namespace, whose seed is 0, is column 12). The
column is the hash modulo ``2**bits`` (VW's parse mask).

Like :mod:`ooc.kernels.text`, the kernels never raise: they stop at the first problem and
return an ``ERR_*`` code with the byte position, line and column of the offending token;
:mod:`ooc.store.readers` turns the code into a message. Every buffer ends with a newline.
"""

import numpy as np
from numba import njit

from .text import _F_BAD, _F_NONFINITE, _F_OK, ERR_TOO_FEW_COLUMNS, _is_digit, _parse_float, _result, rounds_to_zero

# Error codes; readers.py maps each one to a message. Numbered apart from kernels.text's.
OK = 0
ERR_NO_LABEL = 101
ERR_BAD_LABEL = 102
ERR_NONFINITE_LABEL = 103
ERR_COST_LABEL = 104
ERR_TOO_MANY_LABEL_TOKENS = 105
ERR_BAD_WEIGHT = 106
ERR_NEGATIVE_WEIGHT = 107
ERR_BASE = 108
ERR_EMPTY_NAMESPACE = 109
ERR_BAD_NAMESPACE_WEIGHT = 110
ERR_MISSING_VALUE = 111
ERR_BAD_VALUE = 112
ERR_NONFINITE_VALUE = 113
ERR_VALUE_TOO_LARGE = 114
ERR_NOT_UTF8 = 115
ERR_CARRIAGE_RETURN = 116
# ERR_TOO_FEW_COLUMNS is kernels.text's: err_pos holds the count found, as for a CSV
ERR_UNTERMINATED_QUOTE = 118
ERR_TEXT_AFTER_QUOTE = 119
ERR_LABEL_TOO_LARGE = 120
ERR_VALUE_TOO_SMALL = 121

#: rows up to this many entries are insertion-sorted (no allocation), longer ones by argsort
_INSERTION_MAX = 48
_M32 = 0xFFFFFFFF
_C1 = 0xCC9E2D51
_C2 = 0x1B873593


@njit(cache=True, nogil=True, inline="always")
def _rotl32(x, r):
    return ((x << r) | (x >> (32 - r))) & _M32


@njit(cache=True, nogil=True)
def murmur3_32(buf, start, end, seed):
    """MurmurHash3 x86_32 of ``buf[start:end]`` (VW's ``uniform_hash``).

    Parameters
    ----------
    buf : ndarray of uint8
    start, end : int
        The bytes hashed.
    seed : int
        Only its low 32 bits are used (VW casts the 64-bit seed to ``uint32_t``).

    Returns
    -------
    int
        The hash, in ``[0, 2**32)``.

    Notes
    -----
    Blocks of 4 bytes read little-endian ``k``: ``k *= c1; k = rotl(k, 15); k *= c2;
    h ^= k; h = rotl(h, 13); h = 5 h + 0xe6546b64``; the 1-3 tail bytes are mixed the same
    way without the last two steps; then ``h ^= len`` and the finalizer ``fmix32``. All
    arithmetic is modulo 2**32 (kept in int64 and masked: a product of two 32-bit numbers
    may wrap int64 but its low 32 bits are right).
    """
    n = end - start
    h = np.int64(seed) & _M32
    nblocks = n // 4
    for b in range(nblocks):
        p = start + 4 * b
        k = (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16)
             | (np.int64(buf[p + 3]) << 24))
        k = (k * _C1) & _M32
        k = _rotl32(k, 15)
        k = (k * _C2) & _M32
        h ^= k
        h = _rotl32(h, 13)
        h = (h * 5 + 0xE6546B64) & _M32
    tail = start + 4 * nblocks
    rem = n & 3
    k = np.int64(0)
    if rem == 3:
        k ^= np.int64(buf[tail + 2]) << 16
    if rem >= 2:
        k ^= np.int64(buf[tail + 1]) << 8
    if rem >= 1:
        k ^= np.int64(buf[tail])
        k = (k * _C1) & _M32
        k = _rotl32(k, 15)
        k = (k * _C2) & _M32
        h ^= k
    h ^= np.int64(n) & _M32
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M32
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M32
    h ^= h >> 16
    return h


@njit(cache=True, nogil=True)
def hashstring(buf, start, end, seed):
    """VW's ``hashstring``: the hash of a feature or namespace name ``buf[start:end]``.

    Bytes ``<= 0x20`` are trimmed at both ends (VW trims ASCII whitespace and control
    characters, never UTF-8 bytes); a name of decimal digits ``d`` then hashes to
    ``int(d) + seed`` (modulo 2**64), any other to ``murmur3_32(name, seed mod 2**32)``.

    Returns
    -------
    int
        The hash as int64 holding VW's uint64 bit pattern (only the low bits are used).
    """
    while start < end and buf[start] <= 32:
        start += 1
    while end > start and buf[end - 1] <= 32:
        end -= 1
    ret = np.int64(0)
    for p in range(start, end):
        c = buf[p]
        if not _is_digit(c):
            return murmur3_32(buf, start, end, seed)
        ret = ret * 10 + np.int64(c - 48)  # wraps like C's size_t
    return ret + seed


@njit(cache=True, nogil=True)
def count_separators(buf, nbuf):
    """Spaces and tabs in ``buf[:nbuf]``: in VW text every feature follows one, so their count
    bounds the entries."""
    n = 0
    for k in range(nbuf):
        c = buf[k]
        n += c == 32 or c == 9
    return n


@njit(cache=True, nogil=True, inline="always")
def _blank(buf, s, e):
    """Whether ``buf[s:e]`` holds only spaces and tabs (a blank line)."""
    for k in range(s, e):
        if buf[k] != 32 and buf[k] != 9:
            return False
    return True


@njit(cache=True, nogil=True)
def _utf8_error(buf, start, end):
    """The offset of the first byte of ``buf[start:end]`` that is not valid UTF-8, or -1.

    Overlong forms, surrogates (U+D800..DFFF) and code points above U+10FFFF are refused,
    as Python's ``bytes.decode('utf-8')`` does.
    """
    i = start
    while i < end:
        c = buf[i]
        if c < 0x80:
            i += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n = 1
            lo, hi = 0x80, 0xBF
        elif 0xE0 <= c <= 0xEF:
            n = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c <= 0xF4:
            n = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return i
        if i + n >= end:
            return i
        if not (lo <= buf[i + 1] <= hi):
            return i
        for k in range(2, n + 1):
            if not (0x80 <= buf[i + k] <= 0xBF):
                return i
        i += n + 1
    return -1


@njit(cache=True, nogil=True, inline="always")
def _ends_vw(c):
    # A feature name or value ends at a space, a tab, a namespace bar or the line end.
    return c == 32 or c == 9 or c == 124 or c == 10


@njit(cache=True, nogil=True)
def _word_at(buf, i, end, w0, w1, w2):
    """Whether ``buf[i:i + 3]`` is the three ASCII letters ``w0 w1 w2`` (lower case given), in any case."""
    return i + 3 <= end and (buf[i] | 32) == w0 and (buf[i + 1] | 32) == w1 and (buf[i + 2] | 32) == w2


@njit(cache=True, nogil=True)
def _looks_numeric(buf, i, end):
    """Whether the value ``buf[i:end]`` starts as a number, the way VW decides between a number and
    a string value: its ``parse_float`` (``strtof`` past the fast path) reads something from it.

    That is an optional sign, then a digit, or a dot and a digit, or ``inf``/``nan`` in any case.
    Anything else (``paris``, ``nice``, ``.x``, ``-``) is a string value; a value that starts as a
    number must be a whole one (``1:2``, ``1abc``, ``info``: VW reads the number and then reports a
    malformed example; ooc refuses the line)."""
    if i < end and (buf[i] == 43 or buf[i] == 45):
        i += 1
    if i >= end:
        return False
    if _is_digit(buf[i]):
        return True
    if buf[i] == 46:
        return i + 1 < end and _is_digit(buf[i + 1])
    return _word_at(buf, i, end, 105, 110, 102) or _word_at(buf, i, end, 110, 97, 110)  # inf, nan


@njit(cache=True, nogil=True)
def _nonfinite_word(buf, i, end):
    """Whether ``buf[i:end]`` is a whole spelling of infinity or NaN (``-inf``, ``NaN``, ``Infinity``)."""
    if i < end and (buf[i] == 43 or buf[i] == 45):
        i += 1
    if end - i == 3:
        return _word_at(buf, i, end, 105, 110, 102) or _word_at(buf, i, end, 110, 97, 110)
    if end - i == 8:
        return (_word_at(buf, i, end, 105, 110, 102) and _word_at(buf, i + 3, end, 105, 110, 105)
                and (buf[i + 6] | 32) == 116 and (buf[i + 7] | 32) == 121)  # "inf" "ini" "t" "y"
    return False


@njit(cache=True, nogil=True)
def _number(buf, i, end):
    """``(value, status)`` of the whole token ``buf[i:end]`` (status ``_F_BAD`` when the number
    stops before ``end``)."""
    v, j, st = _parse_float(buf, i, end)
    if st == _F_OK and j != end:
        st = _F_BAD
    return v, st


@njit(cache=True, nogil=True)
def _sum_duplicates(indices, data, lo, hi):
    """Sort the entries ``lo:hi`` by index and sum repeated ones in place; returns the new end.

    Hashing maps different names (and a name repeated in a row) to one column; a linear model
    sees their sum, as VW's does. Short rows (most) are insertion-sorted in place, without
    the allocations of ``argsort``; the sort is stable, so equal ids are summed in file order.
    """
    if hi - lo < 2:
        return hi
    if hi - lo <= _INSERTION_MAX:
        for k in range(lo + 1, hi):
            j, x, v = k, indices[k], data[k]
            while j > lo and indices[j - 1] > x:
                indices[j] = indices[j - 1]
                data[j] = data[j - 1]
                j -= 1
            indices[j] = x
            data[j] = v
    else:
        order = np.argsort(indices[lo:hi], kind="mergesort")
        indices[lo:hi] = indices[lo:hi][order]
        data[lo:hi] = data[lo:hi][order]
    out = lo
    for k in range(lo + 1, hi):
        if indices[k] == indices[out]:
            data[out] += data[k]
        else:
            out += 1
            indices[out] = indices[k]
            data[out] = data[k]
    return out + 1


@njit(cache=True, nogil=True)
def _label_tokens(buf, s, bar, toks):
    """Split VW's label part ``buf[s:bar]`` on spaces into ``toks`` (start, end pairs), the tag
    dropped; returns ``(count, error position)`` (position -1 when there is none).

    As VW does: the part starts after its first tab, if any; the last token is the tag when
    it touches the bar (or the line end) or starts with a quote ``'``. More than three tokens
    (label, weight, base) is an error at the fourth.
    """
    for k in range(s, bar):
        if buf[k] == 9:
            s = k + 1
            break
    count = 0
    last_start = last_end = -1
    i = s
    while i < bar:
        while i < bar and buf[i] == 32:
            i += 1
        if i >= bar:
            break
        t = i
        while i < bar and buf[i] != 32:
            i += 1
        if count < 4:
            toks[count, 0] = t
            toks[count, 1] = i
        last_start, last_end = t, i
        count += 1
    if count and (last_end == bar or buf[last_start] == 39):  # 39: "'"
        count -= 1
    if count > 3:
        return count, toks[3, 0]
    return count, -1


@njit(cache=True, nogil=True)
def _parse_vw_labels(buf, s, bar, toks):
    """``(label, weight, code, pos)`` of the label part of a VW line (see :func:`_label_tokens`)."""
    count, pos = _label_tokens(buf, s, bar, toks)
    if count == 0:
        return 0.0, 1.0, ERR_NO_LABEL, s
    if pos >= 0:
        return 0.0, 1.0, ERR_TOO_MANY_LABEL_TOKENS, pos
    t, e = toks[0, 0], toks[0, 1]
    y, st = _number(buf, t, e)
    if st == _F_NONFINITE:
        return 0.0, 1.0, ERR_NONFINITE_LABEL, t
    if st != _F_OK:
        for k in range(t, e):
            if buf[k] == 58:  # ':' cost-sensitive or multilabel
                return 0.0, 1.0, ERR_COST_LABEL, t
        return 0.0, 1.0, ERR_BAD_LABEL, t
    w = 1.0
    if count >= 2:
        t, e = toks[1, 0], toks[1, 1]
        w, st = _number(buf, t, e)
        if st != _F_OK:
            return y, 1.0, ERR_BAD_WEIGHT, t
        if w < 0:
            return y, 1.0, ERR_NEGATIVE_WEIGHT, t
    if count == 3:
        t, e = toks[2, 0], toks[2, 1]
        b, st = _number(buf, t, e)
        if st != _F_OK or b != 0.0:
            return y, w, ERR_BASE, t
    return y, w, OK, s


@njit(cache=True, nogil=True)
def _parse_vw_features(buf, i, e, mask, max_abs, out_indices, out_data, nnz):
    """The namespaces and features of one VW line, from its first bar ``i`` to its end ``e``.

    Returns ``(nnz, code, pos)``. Follows VW's ``tc_parser``: a namespace starts at ``|``,
    named by what follows up to a space, tab, ``:`` or bar (the default namespace when a
    space or tab follows: seed 0), with an optional ``:weight`` scaling its values; a
    feature is ``name[:value]``; ``name:text`` is VW's string feature (hash of ``text``
    seeded with the hash of ``name``, value 1); ``:value`` alone is VW's anonymous feature
    (namespace hash + its rank among the namespace's anonymous features); zero values are
    dropped as VW drops them.
    """
    while i < e:  # buf[i] is a bar
        i += 1
        cv = 1.0
        anon = np.int64(0)
        if i < e and buf[i] == 58:
            return nnz, ERR_EMPTY_NAMESPACE, i - 1
        if i >= e or buf[i] == 32 or buf[i] == 9 or buf[i] == 124:
            ch = np.int64(0)
        else:
            t = i
            while i < e and not _ends_vw(buf[i]) and buf[i] != 58:
                i += 1
            ch = hashstring(buf, t, i, np.int64(0))
            if i < e and buf[i] == 58:
                i += 1
                t = i
                while i < e and not _ends_vw(buf[i]):
                    i += 1
                cv, st = _number(buf, t, i)
                if st != _F_OK:
                    return nnz, ERR_BAD_NAMESPACE_WEIGHT, t
        while i < e and buf[i] != 124:
            c = buf[i]
            if c == 32 or c == 9:
                i += 1
                continue
            t = i
            while i < e and not _ends_vw(buf[i]) and buf[i] != 58:
                i += 1
            name_end = i
            v = cv
            if i < e and buf[i] == 58:
                i += 1
                vt = i
                while i < e and not _ends_vw(buf[i]):
                    i += 1
                if vt == i:
                    return nnz, ERR_MISSING_VALUE, vt - 1
                if _looks_numeric(buf, vt, i):
                    x, st = _number(buf, vt, i)
                    if st == _F_NONFINITE and (_nonfinite_word(buf, vt, i) or _is_digit(buf[i - 1])):
                        return nnz, ERR_NONFINITE_VALUE, vt  # NaN, inf, or a number past the float range
                    if st != _F_OK:
                        return nnz, ERR_BAD_VALUE, vt
                    v = cv * x
                    if abs(v) >= max_abs or v - v != 0.0:
                        return nnz, ERR_VALUE_TOO_LARGE, vt
                    if rounds_to_zero(v, max_abs):
                        return nnz, ERR_VALUE_TOO_SMALL, vt
                    h = ch + anon if name_end == t else hashstring(buf, t, name_end, ch)
                    if name_end == t:
                        anon += 1
                else:
                    while i < e and buf[i] != 32 and buf[i] != 9:  # VW's string value ends at whitespace only
                        i += 1
                    v = 1.0  # VW gives a string feature value 1, whatever the namespace weight
                    h = hashstring(buf, vt, i, hashstring(buf, t, name_end, ch))
            else:
                h = hashstring(buf, t, name_end, ch)
            if v != 0.0:
                out_indices[nnz] = h & mask
                out_data[nnz] = v
                nnz += 1
    return nnz, OK, i


@njit(cache=True, nogil=True)
def parse_vw(buf, nbuf, first_line, mask, max_abs, out_labels, out_weights, out_indptr, out_indices,
             out_data):
    """Parse Vowpal Wabbit text examples from ``buf[:nbuf]`` into hashed CSR rows.

    A line is ``label [weight [base]] [tag]|namespace[:scale] feature[:value] ...``, with
    as many ``|namespace`` groups as wanted (see :func:`_parse_vw_features`).

    Parameters
    ----------
    buf : ndarray of uint8
        Text; ``buf[nbuf - 1]`` must be a newline.
    nbuf : int
        Number of bytes to parse.
    first_line : int
        1-based line number of ``buf[0]``.
    mask : int
        ``2**bits - 1``: column of a feature = its hash ``& mask``.
    max_abs : float
        Values (namespace scale times value) with ``abs >= max_abs`` are refused.
    out_labels, out_weights : ndarray of float64
        One slot per newline.
    out_indptr : ndarray of int64
        One more slot than rows.
    out_indices, out_data : ndarray of int64, float64
        One slot per space or tab (:func:`count_separators`).

    Returns
    -------
    n_rows, nnz, err_code, err_pos, err_line, err_col, first_row_line : int
        As :func:`ooc.kernels.text.parse_svmlight`.

    Notes
    -----
    Each row's columns come out sorted, repeated ones (collisions) summed. Blank lines
    (VW's example separators) are skipped; a UTF-8 byte order mark at a line's start is
    skipped (as VW does), a CR before the newline is dropped. The label must be a finite
    number (VW's unlabeled examples have none and are refused); the importance weight a
    finite number >= 0; the base (VW's initial prediction) may only be 0, as ooc keeps
    no per-row offset. Unlike VW, which warns and goes on, a malformed line is an error,
    and so is ``name:`` with nothing after the colon and a line that is not UTF-8.
    """
    i = 0
    line = first_line
    row = 0
    nnz = 0
    first_row_line = 0
    out_indptr[0] = 0
    toks = np.empty((4, 2), np.int64)
    while i < nbuf:
        s = i
        e = s
        while buf[e] != 10:
            e += 1
        nxt = e + 1
        if e - s >= 3 and buf[s] == 0xEF and buf[s + 1] == 0xBB and buf[s + 2] == 0xBF:
            s += 3
        if e > s and buf[e - 1] == 13:
            e -= 1
        if _blank(buf, s, e):
            i = nxt
            line += 1
            continue
        bad = _utf8_error(buf, s, e)
        if bad >= 0:
            return _result(row, nnz, ERR_NOT_UTF8, bad, line, i, first_row_line)
        for k in range(s, e):
            if buf[k] == 13:
                return _result(row, nnz, ERR_CARRIAGE_RETURN, k, line, i, first_row_line)
        bar = s
        while bar < e and buf[bar] != 124:
            bar += 1
        y, w, code, pos = _parse_vw_labels(buf, s, bar, toks)
        if code != OK:
            return _result(row, nnz, code, pos, line, i, first_row_line)
        if abs(y) >= max_abs:  # a label must fit the store's value type, as a value does
            return _result(row, nnz, ERR_LABEL_TOO_LARGE, toks[0, 0], line, i, first_row_line)
        if row == 0:
            first_row_line = line
        start = nnz
        nnz, code, pos = _parse_vw_features(buf, bar, e, mask, max_abs, out_indices, out_data, nnz)
        if code != OK:
            return _result(row, start, code, pos, line, i, first_row_line)
        nnz = _sum_duplicates(out_indices, out_data, start, nnz)
        out_labels[row] = y
        out_weights[row] = w
        row += 1
        out_indptr[row] = nnz
        i = nxt
        line += 1
    return _result(row, nnz, OK, i, line, i, first_row_line)


# --------------------------------------------------------------------------- raw text


@njit(cache=True, nogil=True, inline="always")
def _is_word(c):
    # ASCII letters, digits, '_' and every byte of a non-ASCII UTF-8 character.
    return (c >= 48 and c <= 57) or (c >= 65 and c <= 90) or (c >= 97 and c <= 122) or c == 95 or c >= 128


@njit(cache=True, nogil=True)
def count_words(buf, nbuf):
    """Runs of word bytes in ``buf[:nbuf]``: bounds the tokens, so the entries are at most twice
    that (a unigram and a bigram per token)."""
    n = 0
    prev = False
    for k in range(nbuf):
        w = _is_word(buf[k])
        n += w and not prev
        prev = w
    return n


@njit(cache=True, nogil=True)
def _field_end(buf, i, e, delim):
    """``(start, end, next, code)`` of the CSV field at ``i`` in the line ending at ``e``
    (``next`` is the error's position when ``code`` is not ``OK``).

    A field in double quotes ends at the quote closing it (``""`` inside is a quote) and
    must be followed by the delimiter or the line end; ``start:end`` is then inside the
    quotes (doubled quotes left as they are: they are not word characters). ``next`` is
    past the delimiter (``e + 1`` after the last field). A quoted field cannot hold a
    newline, since the text is cut at newlines.
    """
    if i < e and buf[i] == 34:
        t = i + 1
        j = t
        while True:
            if j >= e:
                return t, j, i, ERR_UNTERMINATED_QUOTE
            if buf[j] == 34:
                if j + 1 < e and buf[j + 1] == 34:
                    j += 2
                    continue
                break
            j += 1
        k = j + 1
        if k < e and buf[k] != delim:
            return t, j, k, ERR_TEXT_AFTER_QUOTE
        return t, j, k + 1, OK
    j = i
    while j < e and buf[j] != delim:
        j += 1
    return i, j, j + 1, OK


@njit(cache=True, nogil=True)
def _add_token_hashes(buf, t0, t1, scratch, mask, out_indices, out_data, nnz):
    """Hash the unigrams and bigrams of the text ``buf[t0:t1]`` into ``out_*`` from ``nnz``.

    Tokens are the runs of word bytes (:func:`_is_word`), ASCII letters lowered; they are
    written to ``scratch`` separated by one space, so the bigram "a b" is the contiguous bytes
    from a token's start to the next one's end. Each is hashed with :func:`murmur3_32`
    (seed 0, VW's ``--hash all``: digits are not read as numbers) and counted once.
    """
    n = 0
    prev_start = -1
    i = t0
    while i < t1:
        if not _is_word(buf[i]):
            i += 1
            continue
        start = n
        while i < t1 and _is_word(buf[i]):
            c = buf[i]
            scratch[n] = c + 32 if 65 <= c <= 90 else c
            n += 1
            i += 1
        out_indices[nnz] = murmur3_32(scratch, start, n, 0) & mask
        out_data[nnz] = 1.0
        nnz += 1
        if prev_start >= 0:
            out_indices[nnz] = murmur3_32(scratch, prev_start, n, 0) & mask
            out_data[nnz] = 1.0
            nnz += 1
        scratch[n] = 32
        n += 1
        prev_start = start
    return nnz


@njit(cache=True, nogil=True)
def parse_text(buf, nbuf, first_line, delim, label_col, text_col, mask, max_abs, out_labels, out_indptr,
               out_indices, out_data):
    """Parse rows of a CSV/TSV holding a numeric label column and a text column into hashed
    bag-of-words rows (unigram and bigram counts).

    Parameters
    ----------
    buf, nbuf, first_line :
        As :func:`parse_vw`.
    delim : int
        The delimiter byte (``,`` or tab).
    label_col, text_col : int
        0-based columns of the label and of the text; other columns are skipped.
    mask : int
        ``2**bits - 1``.
    max_abs : float
        Labels with ``abs(label) >= max_abs`` are refused (``ERR_LABEL_TOO_LARGE``): they would not
        fit the store's value type.
    out_labels, out_indptr : ndarray
        One slot per newline (plus one for ``out_indptr``).
    out_indices, out_data : ndarray
        Twice :func:`count_words` slots.

    Returns
    -------
    n_rows, nnz, err_code, err_pos, err_line, err_col, first_row_line : int
        As :func:`ooc.kernels.text.parse_svmlight`; for ``ERR_TOO_FEW_COLUMNS``
        ``err_pos`` is the number of fields found.

    Notes
    -----
    Row ``r``'s value at column ``j`` is the number of its tokens and bigrams hashing to
    ``j`` (a count, not a frequency: scale with the training options if wanted).
    Blank lines are skipped; a CR before the newline is dropped.
    """
    i = 0
    line = first_line
    row = 0
    nnz = 0
    first_row_line = 0
    out_indptr[0] = 0
    scratch = np.empty(nbuf + 1, np.uint8)
    need = max(label_col, text_col) + 1
    while i < nbuf:
        s = i
        e = s
        while buf[e] != 10:
            e += 1
        nxt = e + 1
        if e > s and buf[e - 1] == 13:
            e -= 1
        if _blank(buf, s, e):
            i = nxt
            line += 1
            continue
        bad = _utf8_error(buf, s, e)
        if bad >= 0:
            return _result(row, nnz, ERR_NOT_UTF8, bad, line, i, first_row_line)
        col = 0
        j = s
        l0 = l1 = t0 = t1 = -1
        while j <= e and col < need:
            a, b, j2, code = _field_end(buf, j, e, delim)
            if code != OK:
                return _result(row, nnz, code, j2, line, i, first_row_line)
            if col == label_col:
                l0, l1 = a, b
            if col == text_col:
                t0, t1 = a, b
            col += 1
            j = j2
        if col < need:
            return row, nnz, ERR_TOO_FEW_COLUMNS, col, line, e - i + 1, first_row_line
        while l0 < l1 and (buf[l0] == 32 or buf[l0] == 9):
            l0 += 1
        while l1 > l0 and (buf[l1 - 1] == 32 or buf[l1 - 1] == 9):
            l1 -= 1
        y, st = _number(buf, l0, l1)
        if st == _F_NONFINITE:
            return _result(row, nnz, ERR_NONFINITE_LABEL, l0, line, i, first_row_line)
        if st != _F_OK:
            return _result(row, nnz, ERR_BAD_LABEL, l0, line, i, first_row_line)
        if abs(y) >= max_abs:
            return _result(row, nnz, ERR_LABEL_TOO_LARGE, l0, line, i, first_row_line)
        if row == 0:
            first_row_line = line
        start = nnz
        nnz = _add_token_hashes(buf, t0, t1, scratch, mask, out_indices, out_data, nnz)
        nnz = _sum_duplicates(out_indices, out_data, start, nnz)
        out_labels[row] = y
        row += 1
        out_indptr[row] = nnz
        i = nxt
        line += 1
    return _result(row, nnz, OK, i, line, i, first_row_line)

"""Streaming readers for svmlight/LIBSVM, dense CSV/TSV, Vowpal Wabbit and raw text, plain or compressed,
from a file, standard input (``-``) or an fsspec URL.

The input is read in blocks of ``chunk_bytes`` by a background thread (decompression runs
there, overlapping with parsing, since zlib/ISA-L/bz2/lzma and the Numba kernels all release
the GIL); each block ends at its last newline, the unfinished line going to the front of the
next one. A block is cut at newlines over ``threads`` parsing threads (:func:`parse_block`,
format-agnostic: a :class:`PieceKernel` per format), and with several threads the next block
is parsed while the caller takes the current one (:func:`iter_parsed`). Memory stays near
7 x ``chunk_bytes`` whatever the file size (blocks in flight, the block being parsed and its
CSR output, the previous chunk still held by the caller); a line longer than ``chunk_bytes``
grows the buffer as needed.
"""

from __future__ import annotations

import bz2
import contextlib
import io
import lzma
import os
import queue
import stat
import sys
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, NamedTuple

import numpy as np

from ooc._cpu import map_threads, resolve_threads
from ooc.kernels import text as _k
from ooc.kernels import vw as _kv
from ooc.kernels.hash_bits import DEFAULT_HASH_BITS, check_hash_bits

from .input_rules import BINARY_HEAD_BYTES, binary_kind, header_guess, line_too_long, max_line_bytes, skip_bom

__all__ = [
    "InputError",
    "RowChunk",
    "open_text",
    "iter_svmlight",
    "iter_csv",
    "csv_layout",
    "CsvLayout",
    "overflow_limit",
    "detect_format",
    "iter_vw",
    "iter_text",
    "text_layout",
    "TextLayout",
    "STDIN",
    "is_url",
    "is_local",
    "is_stream",
    "spooled",
    "forget_streams",
    "input_size",
    "PieceKernel",
    "parse_block",
    "iter_parsed",
]


class InputError(ValueError):
    """Bad input, located in the file.

    ``str(e)`` is one line: ``'{path}:{line}:{column}: {message}'`` (``<stdin>`` for ``'-'``), or
    ``'{path}:{line}: {message}'`` when the column is unknown, or ``'{path}: {message}'``
    for problems with the whole file.

    Parameters
    ----------
    path : str or os.PathLike
        The file.
    message : str
        What is wrong; newlines are replaced so the text stays on one line.
    line, column : int, optional
        1-based position of the problem.
    """

    def __init__(self, path, message, line=None, column=None):
        self.path = os.fspath(path)
        self.message = " ".join(str(message).split())
        self.line = line
        self.column = column if line is not None else None
        where = "<stdin>" if self.path == STDIN else self.path
        if line is not None:
            where += f":{line}"
            if self.column is not None:
                where += f":{self.column}"
        super().__init__(f"{where}: {self.message}")

    def __reduce__(self):
        # Keep the fields when the error crosses a process boundary (Dask workers).
        return (type(self), (self.path, self.message, self.line, self.column))


class RowChunk(NamedTuple):
    """Consecutive rows of a text file in CSR form.

    Attributes
    ----------
    labels : ndarray of float64, shape (m,)
    indptr : ndarray of int64, shape (m + 1,)
        ``indptr[0] == 0``.
    indices : ndarray of int64, shape (nnz,)
        Feature ids exactly as written in the file (svmlight) or 0-based positions among the
        feature columns (CSV).
    data : ndarray of float64, shape (nnz,)
        Explicit zeros of an svmlight file are kept, as scikit-learn does.
    first_line : int
        1-based line number of the chunk's first row.
    bytes_consumed : int
        Input bytes (compressed, for a compressed file) read so far; for progress bars.
    weights : ndarray of float64, shape (m,), or None
        Importance (sample) weights of the rows, >= 0; None when all are 1 (the formats
        without weights, and a VW file whose rows give none).
    """

    labels: np.ndarray
    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    first_line: int
    bytes_consumed: int
    weights: np.ndarray | None = None


# --------------------------------------------------------------------------- opening files

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bz2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_COMPRESSED_EXT = (".gz", ".bz2", ".xz")

try:  # ISA-L's inflate (optional, ``pip install isal``): zlib's interface, 2-3x its speed
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - depends on what is installed
    _inflate = zlib
# Errors the decompressors raise on damaged or truncated input.
_DECOMPRESS_ERRORS = (EOFError, OSError, zlib.error, _inflate.error, lzma.LZMAError)


class _GzipMembers:
    """Decompress a (multi-member) gzip stream with zlib's interface directly.

    ``gzip.GzipFile`` feeds zlib 128 KiB at a time and recomputes the CRC in Python land;
    zlib already checks each member's CRC and length, and big reads make it about 1.4x
    faster, which matters because decompression is usually slower than parsing. ISA-L's
    inflate (the ``isal`` package) is used when installed: the same interface and checks,
    measured 2.2x faster than zlib on a 200 MB svmlight file (``gzip -6``).

    Parameters
    ----------
    raw : binary file
        The compressed stream.
    inflate : module, optional
        ``zlib`` or ``isal.isal_zlib`` (default: the latter when installed).
    """

    def __init__(self, raw, inflate=None):
        self._inflate = inflate or _inflate
        self._raw = raw
        self._d = None  # None between members
        self._in = b""

    def read(self, max_out):
        """Up to ``max_out`` decompressed bytes; ``b''`` at the end of the stream."""
        while True:
            if not self._in:
                self._in = self._raw.read(1 << 20)
                if not self._in:
                    if self._d is not None:
                        raise EOFError("compressed file ended before the end-of-stream marker")
                    return b""
            if self._d is None:
                self._in = self._in.lstrip(b"\0")  # zero padding after a member is allowed
                if not self._in:
                    continue
                self._d = self._inflate.decompressobj(31)  # 31: a gzip header and trailer
            out = self._d.decompress(self._in, max_out)
            self._in = self._d.unconsumed_tail
            if self._d.eof:
                self._in = self._d.unused_data
                self._d = None
            if out:
                return out

    def close(self):
        pass


class _Decompressed(io.RawIOBase):
    """A decompressing stream that owns its compressed file and reports damage as InputError."""

    def __init__(self, path, raw, kind):
        self._path = path
        self._raw = raw
        self.kind = kind
        if kind == "gzip":
            self._f = _GzipMembers(raw)
        elif kind == "bz2":
            self._f = bz2.BZ2File(raw, mode="rb")
        else:
            self._f = lzma.LZMAFile(raw, mode="rb")

    def readable(self):
        return True

    def readinto(self, b):
        try:
            out = self._f.read(len(b))
        except _DECOMPRESS_ERRORS as e:
            raise InputError(self._path, f"damaged or truncated {self.kind} file ({e})") from e
        n = len(out)
        b[:n] = out
        return n

    def raw_tell(self):
        """Compressed bytes read so far."""
        return self._raw.tell()

    def close(self):
        if not self.closed:
            try:
                self._f.close()
            finally:
                self._raw.close()
        super().close()


#: The input path that means standard input.
STDIN = "-"


def is_url(path) -> bool:
    """Whether ``path`` is an fsspec URL (``s3://...``, ``https://...``) rather than a local path."""
    return "://" in os.fspath(path)


def is_local(path) -> bool:
    """Whether ``path`` names a local file (neither standard input nor a URL)."""
    path = os.fspath(path)
    return path != STDIN and not is_url(path)


def is_stream(path) -> bool:
    """Whether ``path`` is read as a stream that cannot be rewound: ``'-'`` (standard input), or a
    local pipe, FIFO, terminal or socket (``/dev/stdin`` of a pipe, a shell's ``<(...)``).

    Such an input is read through :class:`_Stdin` (its head can be read again, the whole once).
    """
    path = os.fspath(path)
    if path == STDIN:
        return True
    if is_url(path):
        return False
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) or stat.S_ISSOCK(mode)


def input_size(path) -> int | None:
    """Bytes of an input (for progress), None when unknown (standard input, a URL that does not say)."""
    path = os.fspath(path)
    if is_stream(path):
        return None
    try:
        if is_url(path):
            from fsspec.core import url_to_fs

            fs, inner = url_to_fs(path)
            return int(fs.size(inner))
        return os.path.getsize(path)
    except Exception:  # only for the progress bar: opening the input reports what is wrong
        return None


#: Bytes of standard input kept to be read again: format and CSV layout detection read the
#: first megabyte (:func:`_first_lines`), compressed input a little more of the raw bytes.
STDIN_HEAD_BYTES = 4 << 20


class _Stdin:
    """Standard input, whose first :data:`STDIN_HEAD_BYTES` can be read again by each :meth:`open`.

    Detecting the format and the CSV layout reads the head; the conversion itself then reads
    everything once. A second whole pass is impossible (a pipe cannot be rewound): :meth:`open`
    refuses it with one line, naming the options that avoid it.
    """

    def __init__(self, stream, path=STDIN):
        self.stream = stream
        self.path = path
        self.head = None
        self.past_head = False
        self.spool = None

    def open(self):
        if self.spool is not None:  # read whole already: read again from its copy (sharing its position)
            self.spool.seek(0)
            return open(os.dup(self.spool.fileno()), "rb")
        if self.past_head:
            what = "standard input" if self.path == STDIN else f"{self.path} (a pipe)"
            raise InputError(self.path, f"{what} can be read only once, and this conversion had to start "
                             "over (0-based feature ids with --zero-based auto, or ids beyond 2**31 - 1): "
                             "pass --zero-based yes (or no), or convert from a file")
        if self.head is None:
            self.head = _read_full(self.stream, STDIN_HEAD_BYTES)
        return _StdinFile(self)

    def spooled(self):
        """The whole stream in an anonymous temporary file (in ``TMPDIR``, gone when closed), kept for every
        later reading and returned rewound: an archive read by seeking (.npz) is then read as a file of it
        is, its bytes on disk and its arrays charged as the file's (``ooc.store.ingest.whole_input_bytes``),
        not held in memory whole a second time."""
        if self.spool is None:
            import shutil
            import tempfile

            f = tempfile.TemporaryFile(prefix=".ooc-stream-")
            try:
                with self.open() as src:
                    shutil.copyfileobj(src, f, 1 << 20)
            except BaseException:
                f.close()
                raise
            self.spool = f
        self.spool.seek(0)
        return self.spool

    def close(self) -> None:
        """Close the stream and its spooled copy."""
        for f in (self.stream, self.spool):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()
        self.spool = None


def _read_full(stream, n: int) -> bytes:
    """Up to ``n`` bytes of ``stream``, fewer only at its end (a pipe's ``read`` may return less)."""
    parts, got = [], 0
    while got < n:
        b = stream.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


class _StdinFile(io.RawIOBase):
    """One reading of :class:`_Stdin`: its kept head, then the rest of the stream."""

    def __init__(self, owner):
        self._owner = owner
        self._pos = 0

    def readable(self):
        return True

    def readinto(self, b):
        head = self._owner.head
        if self._pos < len(head):
            n = min(len(b), len(head) - self._pos)
            b[:n] = head[self._pos:self._pos + n]
        else:
            n = self._owner.stream.readinto(b) or 0
            self._owner.past_head |= n > 0  # what is past the head cannot be read again
        self._pos += n
        return n

    def tell(self):
        return self._pos


_STDIN: _Stdin | None = None
#: the local streams (pipes, FIFOs) opened so far, by path: each is opened once and its head kept
_STREAMS: dict[str, _Stdin] = {}


def _stream(path) -> _Stdin:
    """The :class:`_Stdin` of a stream input (:func:`is_stream`), made at its first use."""
    global _STDIN
    path = os.fspath(path)
    if path == STDIN:
        stream = getattr(sys.stdin, "buffer", None)
        if stream is None:
            raise InputError(STDIN, "cannot open: this process has no standard input")
        if _STDIN is None or _STDIN.stream is not stream:  # a new sys.stdin (tests, embedding)
            _STDIN = _Stdin(stream)
        return _STDIN
    if path not in _STREAMS:
        try:
            _STREAMS[path] = _Stdin(open(path, "rb", buffering=0), path)
        except OSError as e:
            raise InputError(path, f"cannot open: {e.strerror or e}") from e
    return _STREAMS[path]


def _open_stdin(path=STDIN):
    return io.BufferedReader(_stream(path).open(), buffer_size=1 << 20)


def forget_streams() -> None:
    """Close the local streams opened so far (:func:`_stream`): the end of a command's reading of them.

    A later reading of the same path (a FIFO written again) opens it anew instead of finding the
    kept head of the one before. Standard input stays (one per ``sys.stdin``).
    """
    while _STREAMS:
        _, st = _STREAMS.popitem()
        st.close()
    if _STDIN is not None and _STDIN.spool is not None:  # its spooled copy is this command's (disk space)
        _STDIN.spool.close()
        _STDIN.spool = None


def spooled(path):
    """A stream input (:func:`is_stream`) whole, as a rewound binary file on disk (:meth:`_Stdin.spooled`)."""
    return _stream(path).spooled()


def _open_url(url):
    """An fsspec URL opened for binary reading; a filesystem that is not installed is one line."""
    try:
        import fsspec

        return fsspec.open(url, "rb").open()
    except ImportError as e:  # e.g. "Install s3fs to access S3"
        proto = url.split("://", 1)[0]
        raise InputError(url, f"cannot open: the filesystem for '{proto}://' is not installed "
                         f"({' '.join(str(e).split())})") from e
    except ValueError as e:  # "Protocol not known: x"
        if "protocol" in str(e).lower():
            raise InputError(url, f"cannot open: no filesystem knows '{url.split('://', 1)[0]}://' URLs "
                             "(fsspec protocols: file, http(s), s3 with s3fs, gcs with gcsfs, ...)") from e
        raise InputError(url, f"cannot open: {' '.join(str(e).split())}") from e
    except OSError as e:
        raise InputError(url, f"cannot open: {e.strerror or e}") from e


def compression_of(head: bytes) -> str | None:
    """The compression (``'gzip'``, ``'bz2'``, ``'xz'``) whose magic bytes ``head`` starts with, or None."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    return None


def open_text(path):
    """Open a possibly compressed file for binary reading.

    Parameters
    ----------
    path : str or os.PathLike
        A plain, gzip, bzip2 or xz file; the compression is found from the magic bytes, not
        the extension. ``'-'`` is standard input (:class:`_Stdin`: its head can be read again,
        the whole of it once), a ``scheme://`` URL is opened with fsspec (``file://``,
        ``http(s)://``, ``s3://`` with s3fs installed...).

    Returns
    -------
    file object
        Binary, readable; decompresses on the fly; past a UTF-8 byte-order mark at the start of the
        (decompressed) text. Reading a damaged or truncated compressed file raises :class:`InputError`
        naming the file.

    Raises
    ------
    InputError
        The file cannot be opened or read.
    """
    path = os.fspath(path)
    stream = is_stream(path)
    if stream:  # never rewound: its kept head is read again (pipes, /dev/stdin, FIFOs)
        raw = _open_stdin(path)
    elif is_url(path):
        raw = _open_url(path)
    else:
        try:
            raw = open(path, "rb")
        except OSError as e:
            raise InputError(path, f"cannot open: {e.strerror or e}") from e
    try:
        head = raw.peek(6)[:6] if stream else raw.read(6)
        if not stream:
            raw.seek(0)
    except (OSError, ValueError) as e:
        raw.close()
        raise InputError(path, f"cannot read: {getattr(e, 'strerror', None) or e}") from e
    kind = compression_of(head)
    if kind is None:
        return _skip_bom(path, raw)
    return _skip_bom(path, io.BufferedReader(_Decompressed(path, raw, kind), buffer_size=1 << 20))


def _skip_bom(path, f):
    try:
        return skip_bom(f)
    except InputError:
        f.close()
        raise


def _input_position(f):
    """Best-effort count of input (compressed) bytes consumed from ``f``."""
    raw = getattr(f, "raw", None)
    if isinstance(raw, _Decompressed):
        return raw.raw_tell()
    try:
        return f.tell()
    except (OSError, ValueError):
        return 0


# --------------------------------------------------------------------------- chunking


#: seconds between the checks, by a thread waiting on the other side of the input queue, that
#: the other side still exists (a wait must end even if its partner died without a word)
_POLL_SECONDS = 0.1


def _read_blocks(f, path, chunk_bytes, out, stop, consumer):
    """Reader thread: put ``(buf, nbuf, input_position)`` blocks of whole lines, then ``None``, on ``out``.

    Each block is read straight into a new buffer behind the unfinished line the block before
    left (no copy of the block itself); ``buf[:nbuf]`` ends at its last newline. A line longer
    than the buffer doubles the next read, up to :func:`ooc.store.input_rules.max_line_bytes`
    (then an error naming the line). An error is put on ``out`` too (the consumer
    re-raises it). Gives up without a word once ``stop`` is set or the ``consumer`` thread (the
    one that started the iteration) has ended: nobody will take what it puts.
    """

    def put(item):
        while not stop.is_set() and consumer.is_alive():
            try:
                out.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                pass
        return False

    try:
        carry = b""  # the unfinished line at the end of the block before
        lines = 0  # newlines before ``carry``, to name the line of one too long
        longest = max_line_bytes(chunk_bytes)
        while not stop.is_set():
            buf = bytearray(len(carry) + max(chunk_bytes, len(carry)))
            buf[:len(carry)] = carry
            n = len(carry) + _read_into(f, path, memoryview(buf)[len(carry):])
            # a block starts a line; the others it holds are shorter than the block's new bytes (at most
            # ``longest``): only the first can be too long, refused before its buffer doubles again
            if n > longest and buf.find(b"\n", 0, longest + 1) < 0:
                exc = InputError(path, line_too_long(longest), line=lines + 1)
                exc.line_bytes = _line_length(f, path, buf, n, chunk_bytes)  # what a figure that works must hold
                raise exc
            if n == len(carry):  # the end of the input
                if carry:
                    tail = carry if carry.endswith(b"\n") else carry + b"\n"
                    if not put((np.frombuffer(tail, np.uint8), len(tail), _input_position(f))):
                        return
                break
            cut = buf.rfind(b"\n", 0, n) + 1
            lines += buf.count(b"\n", 0, cut)
            carry = bytes(buf[cut:n])
            if cut and not put((np.frombuffer(buf, np.uint8), cut, _input_position(f))):
                return
        put(None)
    except BaseException as e:  # handed to the consumer, which re-raises it
        put(e)


def _line_length(f, path, buf, n: int, chunk_bytes: int) -> int:
    """The length of the line ``buf[:n]`` starts (with its newline), read on from ``f`` a ``chunk_bytes``
    piece at a time, none kept: a refusal of a line too long names the memory that reads it."""
    end = buf.find(b"\n", 0, n)
    if end >= 0:
        return end + 1
    length, piece = n, bytearray(max(int(chunk_bytes), 1 << 16))
    while True:
        got = _read_into(f, path, memoryview(piece))
        end = piece.find(b"\n", 0, got)
        if end >= 0:
            return length + end + 1
        length += got
        if got < len(piece):  # the end of the input: its last line has no newline
            return length + 1


def _read_into(f, path, view) -> int:
    """Fill ``view`` from ``f`` (less only at the end of the input); returns the bytes read."""
    got = 0
    while got < len(view):
        try:
            n = f.readinto(view[got:])
        except InputError:
            raise
        except OSError as e:
            raise InputError(path, f"cannot read: {e.strerror or e}") from e
        if not n:
            break
        got += n
    return got


def _iter_blocks(path, chunk_bytes):
    """Yield ``(buf, nbuf, input_position)`` where ``buf[:nbuf]`` holds whole lines.

    ``buf`` is a uint8 array and ``buf[nbuf - 1]`` is always a newline (one is appended to a
    last line without it), so kernels and ``strtod`` stop inside the buffer. The blocks are read
    (and decompressed) by a thread of their own, one block ahead.
    """
    chunk_bytes = max(int(chunk_bytes), 1)
    f = open_text(path)
    blocks = queue.Queue(maxsize=1)
    stop = threading.Event()
    reader = threading.Thread(
        target=_read_blocks, args=(f, path, chunk_bytes, blocks, stop, threading.current_thread()),
        name="ooc-input-reader", daemon=True,
    )
    reader.start()
    try:
        while True:
            item = _take(blocks, reader, path)
            if isinstance(item, BaseException):
                raise item
            if item is None:
                return
            yield item
    finally:
        # a consumer that stops early (a bad line, an error downstream, Ctrl-C): the reader sees
        # ``stop`` within one read of a block and one poll of the queue, and ends
        stop.set()
        reader.join()
        f.close()


def _take(pieces, reader, path):
    """The next item the reader thread put on ``pieces``; raises if it ended without one."""
    while True:
        try:
            return pieces.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            # whatever the reader puts is on the queue before it ends: empty and ended means
            # nothing will come (it cannot happen unless the thread was killed; never wait for it)
            if not reader.is_alive() and pieces.empty():
                raise InputError(path, "the thread reading the input ended without a result") from None


# --------------------------------------------------------------------------- parsing on threads
#
# A block of whole lines is cut at newlines into one piece per thread (:func:`ooc.kernels.text.
# line_cuts`). Each piece is counted (its newlines give the line number the next piece starts
# at, its separators bound its rows and entries), then parsed by a Numba kernel that releases
# the GIL into its own slice of the block's output arrays; the slices are then closed up in
# place. The block's RowChunk is the one a single thread makes, array for array, so nothing
# downstream (row blocks, statistics, the store's bytes) depends on the thread count.

#: Smallest piece worth a thread of its own: below it, the hand-off costs more than it saves.
MIN_PIECE_BYTES = 256 << 10


class PieceKernel(NamedTuple):
    """How to parse one text format, for :func:`parse_block` (format-agnostic).

    Attributes
    ----------
    size : callable
        ``size(text, n) -> (newlines, entries)``: the newlines in ``text[:n]`` (at least its
        rows) and a bound on its entries (e.g. its ``:`` count for svmlight).
    parse : callable
        ``parse(text, n, first_line, labels, indptr, indices, data)`` -> the 7-tuple of
        :func:`ooc.kernels.text.parse_svmlight` (a kernel that stops at the first error).
        ``labels`` has room for ``newlines`` rows, ``indptr`` one more, ``indices``/``data``
        for ``entries``.
    stops : bytes
        Bytes that end a token, to quote the offending one in a message.
    fields : dict
        What the messages name besides the token (``dtype``, ``largest``, ``ncols``).
    finish : callable, optional
        ``finish(chunk, text, n) -> RowChunk``: applied to a block's chunk once its pieces
        are joined, with the block's text (e.g. a CSV's weight column taken out of the
        features); it may raise :class:`InputError`.
    row_weights : bool, default False
        Whether ``parse`` also writes each row's weight: it is then called with one more
        argument, ``weights`` (float64, a slot per row), after ``data``; the chunk's
        ``weights`` are None when all are 1.
    """

    size: Callable
    parse: Callable
    stops: bytes
    fields: dict
    finish: Callable | None = None
    row_weights: bool = False


def parse_block(path, buf, start, nbuf, first_line, input_pos, kernel: PieceKernel, threads: int = 1):
    """Parse the whole lines ``buf[start:nbuf]`` on ``threads`` threads.

    Parameters
    ----------
    path : str
        The file, for messages.
    buf : ndarray of uint8
        ``buf[nbuf - 1]`` is a newline (when ``start < nbuf``).
    start, nbuf : int
        The range to parse.
    first_line : int
        1-based line number of ``buf[start]``.
    input_pos : int
        Input bytes consumed so far (progress).
    kernel : PieceKernel
    threads : int
        At most this many pieces, each of at least :data:`MIN_PIECE_BYTES`.

    Returns
    -------
    chunk : RowChunk or None
        The rows (None when the range holds none), the same for any ``threads``.
    newlines : int
        Newlines in the range: ``first_line + newlines`` is the line after it.

    Raises
    ------
    InputError
        The first bad token in file order, with its line and column.
    """
    text = buf[start:nbuf]
    n = nbuf - start
    if n <= 0:
        return None, 0
    parts = int(max(1, min(threads, n // MIN_PIECE_BYTES)))
    cuts = _k.line_cuts(text, n, parts) if parts > 1 else np.array([0, n], np.int64)
    pieces = [(text[a:b], int(b - a)) for a, b in zip(cuts[:-1], cuts[1:])]
    sizes = map_threads(lambda p: kernel.size(*p), pieces, threads)
    rows = np.array([int(s[0]) for s in sizes], np.int64)
    ents = np.array([int(s[1]) for s in sizes], np.int64)
    row0 = np.concatenate(([0], np.cumsum(rows)))
    ent0 = np.concatenate(([0], np.cumsum(ents)))
    lines = first_line + row0  # every piece but the last ends at a newline
    k_all = len(pieces)
    labels = np.empty(row0[-1], np.float64)
    indices = np.empty(ent0[-1], np.int64)
    data = np.empty(ent0[-1], np.float64)
    # one indptr slot more per piece: piece k's pointers start at row0[k] + k
    ptrs = np.empty(row0[-1] + k_all, np.int64)
    wts = np.empty(row0[-1], np.float64) if kernel.row_weights else None

    def outs(k):
        r, e = row0[k], ent0[k]
        return (labels[r:row0[k + 1]], ptrs[r + k:row0[k + 1] + k + 1], indices[e:ent0[k + 1]],
                data[e:ent0[k + 1]])

    def run(k):
        extra = () if wts is None else (wts[row0[k]:row0[k + 1]],)
        return kernel.parse(*pieces[k], int(lines[k]), *outs(k), *extra)

    parsed = map_threads(run, range(k_all), threads)
    for k, res in enumerate(parsed):
        if res[2] != _k.OK:  # the first error in file order (the pieces before it parsed)
            _parsed_chunk(path, res, None, pieces[k][0], pieces[k][1], int(lines[k]), input_pos,
                          kernel.stops, **kernel.fields)
    if k_all == 1:
        chunk = _parsed_chunk(path, parsed[0], outs(0), text, n, first_line, input_pos, weights=wts)
        return _finish(kernel, chunk, text, n), int(rows[0])
    # close up the pieces' slices, in order (each moves left, over what is already moved)
    m = nnz = 0
    first_row_line = 0
    indptr = np.empty(sum(int(res[0]) for res in parsed) + 1, np.int64)
    indptr[0] = 0
    for k, res in enumerate(parsed):
        mk, ek = int(res[0]), int(res[1])
        if mk == 0:
            continue
        first_row_line = first_row_line or int(res[6])
        r, e = int(row0[k]), int(ent0[k])
        if r != m:
            labels[m:m + mk] = labels[r:r + mk]
            if wts is not None:
                wts[m:m + mk] = wts[r:r + mk]
        if e != nnz:
            indices[nnz:nnz + ek] = indices[e:e + ek]
            data[nnz:nnz + ek] = data[e:e + ek]
        indptr[m + 1:m + mk + 1] = ptrs[r + k + 1:r + k + mk + 1] + nnz
        m += mk
        nnz += ek
    total = int(row0[-1])
    if m == 0:
        return None, total
    weights = wts[:m] if wts is not None and np.any(wts[:m] != 1.0) else None  # as _parsed_chunk
    chunk = RowChunk(labels[:m], indptr, _trim(indices, nnz), _trim(data, nnz), first_row_line, int(input_pos),
                     weights)
    return _finish(kernel, chunk, text, n), total


def _finish(kernel: PieceKernel, chunk, text, n):
    return chunk if chunk is None or kernel.finish is None else kernel.finish(chunk, text, n)


def iter_parsed(path, blocks, kernel: PieceKernel, threads: int = 1) -> Iterator[RowChunk | None]:
    """Parse text blocks in file order; with several threads, the next block while this one is used.

    Parameters
    ----------
    path : str
        The file, for messages.
    blocks : iterator of (buf, start, nbuf, input_pos)
        Whole lines ``buf[start:nbuf]``; ``buf[:start]`` is skipped (a header) but its
        newlines counted. The first block starts at line 1.
    kernel : PieceKernel
    threads : int
        Threads (0: every core this process may use). With more than one, each block is
        cut over them (:func:`parse_block`) and a thread parses block ``k + 1`` while the
        caller holds block ``k``'s chunk: two blocks' rows are held at once, not one.

    Yields
    ------
    RowChunk or None
        One per block (None for a block without rows), the same whatever ``threads``.
    """
    threads = resolve_threads(threads)
    line = 1

    def step():
        nonlocal line
        item = next(blocks, None)
        if item is None:
            return False, None
        buf, start, nbuf, pos = item
        if start:
            line += int(_k.count_bytes(buf, start, 10, 10)[0])
        chunk, newlines = parse_block(path, buf, start, nbuf, line, pos, kernel, threads)
        line += newlines
        return True, chunk

    if threads == 1:
        try:
            while True:
                more, chunk = step()
                if not more:
                    return
                yield chunk
        finally:
            _close(blocks)
    ahead = ThreadPoolExecutor(1, thread_name_prefix="ooc-parse-ahead")
    fut = None
    try:
        fut = ahead.submit(step)
        while True:
            more, chunk = fut.result()
            fut = None
            if not more:
                return
            fut = ahead.submit(step)  # the next block, while the caller takes this one
            yield chunk
            chunk = None
    finally:
        if fut is not None:
            fut.cancel()
            with contextlib.suppress(BaseException):
                fut.result()  # a step under way finishes before the blocks are closed
        ahead.shutdown(wait=True)
        _close(blocks)


def _close(it):
    """Close a generator (its ``finally`` stops the reader thread) now, not when collected."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


# --------------------------------------------------------------------------- svmlight

_MESSAGES = {
    _k.ERR_BAD_LABEL: "bad label {tok!r}: expected a number",
    _k.ERR_MISSING_LABEL: "missing label: the line starts with {tok!r}",
    _k.ERR_MULTILABEL: "multilabel rows ({tok!r}) are not supported",
    _k.ERR_NONFINITE_LABEL: "label {tok!r} is not finite (NaN and inf are not allowed)",
    _k.ERR_BAD_INDEX: "bad feature {tok!r}: expected 'id:value' with an integer id",
    _k.ERR_NEGATIVE_INDEX: "negative feature id in {tok!r}",
    _k.ERR_NONINTEGER_INDEX: "feature id in {tok!r} is not an integer",
    _k.ERR_MISSING_COLON: "bad feature {tok!r}: expected 'id:value' (missing ':')",
    _k.ERR_INDEX_TOO_LARGE: "feature id in {tok!r} is too large (at most 2**63 - 1)",
    _k.ERR_DECREASING_INDEX: (
        "decreasing feature id in {tok!r}: ids must increase within a row"
    ),
    _k.ERR_DUPLICATE_INDEX: "duplicate feature id in {tok!r}",
    _k.ERR_BAD_VALUE: "bad value {tok!r}: expected a number",
    _k.ERR_NONFINITE_VALUE: "value {tok!r} is not finite (NaN and inf are not allowed)",
    _k.ERR_BAD_CELL: "bad cell {tok!r}: expected a number",
    _k.ERR_NONFINITE_CELL: "cell {tok!r} is not finite (NaN and inf are not allowed)",
    _k.ERR_EMPTY_CELL: "empty cell",
    _k.ERR_TOO_MANY_COLUMNS: "too many columns: expected {ncols}, {tok!r} is one more",
    _k.ERR_TOO_FEW_COLUMNS: "too few columns: expected {ncols}, found {found}",
    _k.ERR_LABEL_TOO_LARGE: (
        "label {tok!r} overflows {dtype} (largest {largest:.8g}); a label must fit the stored values' type: "
        "store float64 values instead (--dtype float64)"
    ),
    _kv.ERR_LABEL_TOO_LARGE: (
        "label {tok!r} overflows {dtype} (largest {largest:.8g}); a label must fit the stored values' type: "
        "store float64 values instead (--dtype float64)"
    ),
    _k.ERR_VALUE_TOO_LARGE: (
        "value {tok!r} overflows {dtype} (largest {largest:.8g}); store float64 values "
        "instead (--dtype float64)"
    ),
    _k.ERR_VALUE_TOO_SMALL: (
        "value {tok!r} is too small for {dtype}: it would be stored as 0 (the smallest nonzero is about "
        "1.4e-45); store float64 values instead (--dtype float64)"
    ),
    _kv.ERR_VALUE_TOO_SMALL: (
        "value {tok!r} (times its namespace scale) is too small for {dtype}: it would be stored as 0 (the "
        "smallest nonzero is about 1.4e-45); store float64 values instead (--dtype float64)"
    ),
    _kv.ERR_NO_LABEL: "no label: ooc trains on labeled examples only (a token touching the '|' is VW's tag)",
    _kv.ERR_BAD_LABEL: "bad label {tok!r}: expected a number",
    _kv.ERR_NONFINITE_LABEL: "label {tok!r} is not finite (NaN and inf are not allowed)",
    _kv.ERR_COST_LABEL: "label {tok!r}: cost-sensitive and multilabel labels are not supported",
    _kv.ERR_TOO_MANY_LABEL_TOKENS: (
        "too many tokens before '|' at {tok!r}: expected 'label [weight [base]] [tag]'"
    ),
    _kv.ERR_BAD_WEIGHT: "bad importance weight {tok!r}: expected a finite number",
    _kv.ERR_NEGATIVE_WEIGHT: "negative importance weight {tok!r}: weights must be >= 0",
    _kv.ERR_BASE: "base (initial prediction) {tok!r} is not supported: ooc keeps no per-row offset; only 0",
    _kv.ERR_EMPTY_NAMESPACE: "empty namespace name before ':' in {tok!r}",
    _kv.ERR_BAD_NAMESPACE_WEIGHT: "bad namespace scale {tok!r}: expected a finite number after 'namespace:'",
    _kv.ERR_MISSING_VALUE: "':' without a value in {tok!r}: write 'name:value' or just 'name'",
    _kv.ERR_BAD_VALUE: ("bad value {tok!r}: it starts as a number but is not one (a VW value is a number, or a "
                        "string feature's text, which does not start as a number)"),
    _kv.ERR_NONFINITE_VALUE: "value {tok!r} is not finite (NaN and inf are not allowed)",
    _kv.ERR_VALUE_TOO_LARGE: (
        "value {tok!r} (times its namespace scale) overflows {dtype} (largest {largest:.8g}); "
        "store float64 values instead (--dtype float64)"
    ),
    _kv.ERR_NOT_UTF8: "not UTF-8: the byte at this column does not start a valid UTF-8 character",
    _kv.ERR_CARRIAGE_RETURN: "carriage return ('\\r') inside a line",
    _kv.ERR_UNTERMINATED_QUOTE: (
        "quoted field without its closing quote (a quoted field cannot span lines)"
    ),
    _kv.ERR_TEXT_AFTER_QUOTE: "text after a closing quote: expected the delimiter or the line end",
}


_SPACE = b" \t\r\n\v\f"


def overflow_limit(dtype) -> float:
    """The smallest magnitude that does not fit in ``dtype`` (float32 or float64).

    float32 rounds to nearest, ties to even: the largest finite value is
    ``2**128 - 2**104`` and everything from the midpoint ``2**128 - 2**103`` up rounds to
    infinity (the midpoint too, since the largest value has an odd mantissa).
    """
    dtype = np.dtype(dtype)
    if dtype == np.float64:
        return np.inf
    if dtype == np.float32:
        return 2.0**128 - 2.0**103
    raise ValueError(f"values are stored as float32 or float64, not {dtype}")


def _token_at(buf, pos, nbuf, stops=_SPACE, limit=40):
    """The token at ``buf[pos]`` (up to a byte in ``stops``), shortened for a message."""
    end = pos
    stop = min(nbuf, pos + 4 * limit)
    while end < stop and buf[end] not in stops:
        end += 1
    tok = bytes(buf[pos:end]).decode("utf-8", "replace")
    if len(tok) > limit:
        tok = tok[:limit] + "..."
    return tok


def _cr_hint(text, which="the line") -> str:
    """A hint to append to a message when ``text`` (one line) has a CR inside it.

    A carriage return followed by more on the same line is what a CR-only (old Mac) file
    looks like once split at newlines: the whole file is one line, and the message about
    its first odd token would otherwise send the user looking in the wrong place. (A CR
    just before the newline is a CRLF line end, which is fine.)
    """
    if b"\r" in bytes(text).rstrip(_SPACE):
        return (f"; {which} holds a carriage return ('\\r') not followed by a newline: "
                "CR-only (old Mac) line endings are not supported, convert them to '\\n' "
                "(e.g. tr '\\r' '\\n' < IN > OUT)")
    return ""


def _line_text(buf, nbuf, first_line, line):
    """The bytes of line ``line`` of ``buf[:nbuf]``, whose first line is ``first_line``."""
    ends = np.flatnonzero(np.asarray(buf[:nbuf]) == 10)
    k = line - first_line
    start = int(ends[k - 1]) + 1 if 0 < k <= len(ends) else 0
    end = int(ends[k]) if k < len(ends) else nbuf
    return bytes(buf[start:end])


def _parsed_chunk(path, parsed, outs, buf, nbuf, first_line, input_pos, stops=_SPACE, weights=None, **fields):
    """The :class:`RowChunk` a parse kernel produced, or None if it found no row.

    Parameters
    ----------
    parsed : tuple
        What the kernel returned: ``(n_rows, nnz, code, err_pos, err_line, err_col,
        first_row_line)``.
    outs : tuple of ndarray
        The labels, indptr, indices and data outputs handed to the kernel.
    buf, nbuf, first_line :
        The text parsed and the line number of its first byte.
    input_pos : int
        Input bytes consumed so far (for progress).
    stops, **fields :
        For messages: the bytes that end a token, and the ``ncols``/``dtype``/``largest``
        some messages name.
    weights : ndarray, optional
        The row weights the kernel wrote (one slot per possible row); kept only when one
        of them is not 1.

    Raises
    ------
    InputError
        The kernel stopped at an error: its message, with file, line and column.
    """
    m, nnz, code, pos, line, col, row_line = parsed
    if code != _k.OK:
        if code == _k.ERR_TOO_FEW_COLUMNS:  # pos is the count found, not a byte offset
            tok = ""
        else:
            tok = _token_at(buf, pos, nbuf, stops)
        msg = _MESSAGES[code].format(tok=tok, found=pos, **fields)
        msg += _cr_hint(_line_text(buf, nbuf, first_line, line))
        raise InputError(path, msg, line=int(line), column=int(col))
    if m == 0:
        return None
    labels, indptr, indices, data = outs
    if weights is not None:
        weights = weights[:m] if np.any(weights[:m] != 1.0) else None
    return RowChunk(labels[:m], indptr[: m + 1], _trim(indices, nnz), _trim(data, nnz),
                    int(row_line), int(input_pos), weights)


def _some_rows(path, chunks, head=b""):
    """Yield the chunks that are not None; raise "no data rows" when there is none.

    ``head`` is the text that was expected to hold data (the first line of a CSV), for
    the carriage-return hint.
    """
    any_rows = False
    for chunk in chunks:
        if chunk is not None:
            any_rows = True
            yield chunk
    if not any_rows:
        raise InputError(path, "no data rows" + _cr_hint(head, "the first line"))


def _value_fields(value_dtype):
    dtype = np.dtype(value_dtype)
    return {"dtype": str(dtype), "largest": float(np.finfo(dtype).max)}


def iter_svmlight(path, chunk_bytes=32 << 20, value_dtype=np.float64, threads=1) -> Iterator[RowChunk]:
    """Stream an svmlight/LIBSVM file as CSR row chunks.

    Parameters
    ----------
    path : str or os.PathLike
        Plain, .gz, .bz2 or .xz file (compression found from the magic bytes).
    chunk_bytes : int, default 32 MiB
        Bytes of (decompressed) text parsed per chunk; memory stays at a few times this.
    value_dtype : float32 or float64, default float64
        The type the values will be stored as: a feature value that overflows it is an
        error located in the file (labels are always float64).
    threads : int, default 1
        Threads parsing each chunk (0: every core this process may use); the chunks are
        the same whatever the count (see :func:`iter_parsed`).

    Yields
    ------
    RowChunk
        Rows in file order; feature ids as written (0- or 1-based is for the caller to
        decide). Matches ``sklearn.datasets.load_svmlight_file(path, zero_based=True)``
        row for row, explicit zeros included.

    Raises
    ------
    InputError
        With file, line and column of the first bad token, or ``'{path}: no data rows'``.
        A carriage return inside a line (a CR-only file) is pointed out in the message.
    """
    path = os.fspath(path)
    max_abs = overflow_limit(value_dtype)

    def size(text, n):
        return _k.count_bytes(text, n, 10, 58)  # rows <= newlines, entries <= colons

    def parse(text, n, line, *outs):
        return _k.parse_svmlight(text, n, line, max_abs, *outs)

    kernel = PieceKernel(size, parse, _SPACE, _value_fields(value_dtype))
    blocks = ((buf, 0, nbuf, pos) for buf, nbuf, pos in _iter_blocks(path, chunk_bytes))
    yield from _some_rows(path, iter_parsed(path, blocks, kernel, threads))


def _trim(a, n):
    # A view would pin the whole buffer; copy when much of it is unused (qid, comments).
    return a[:n] if 2 * n >= len(a) else a[:n].copy()


# --------------------------------------------------------------------------- CSV

_DELIMITERS = {",": 44, "\t": 9, ";": 59, " ": 32}


def _first_lines(path, max_lines, max_bytes=1 << 20):
    """Up to ``max_lines`` non-blank, non-comment lines near the top, with their line numbers.

    Each line is returned without its comment but not stripped: in a tab-separated file a
    leading tab is an empty first cell.
    """
    out = []
    if is_stream(path):  # what is read past the kept head could not be read again
        max_bytes = min(max_bytes, STDIN_HEAD_BYTES)
    with open_text(path) as f:
        head = f.read(max_bytes)
    lines = head.split(b"\n")
    if len(head) == max_bytes and len(lines) > 1:
        lines = lines[:-1]  # the last one may be cut
    for k, ln in enumerate(lines, start=1):
        s = ln.split(b"#", 1)[0]
        if s.strip():
            out.append((k, s))
            if len(out) >= max_lines:
                break
    return out


def _is_number(cell):
    try:
        float(cell)
    except ValueError:
        return False
    return b"_" not in cell


def _split_cells(line, delim):
    if delim == " ":
        return line.split()
    sep = delim.encode()
    # whitespace pads cells, but the delimiter itself never counts as padding
    return [c.strip() for c in line.strip(_SPACE.replace(sep, b"")).split(sep)]


class CsvLayout(NamedTuple):
    """The shape of a delimited file, found from its first non-blank line.

    Attributes
    ----------
    delimiter : str
        One of ``,``, tab, ``;``, or space (runs of whitespace).
    header_line : int
        1-based line number of the header, 0 when there is none.
    ncols : int
        Cells per row, the label included.
    label_col : int
        0-based column of the label.
    head : bytes
        The first non-blank line (for messages).
    weight_col : int or None
        0-based column of the sample weights, if the rows carry them.
    header_why : str
        How the header was decided: ``'option'`` (said by the caller), else
        :func:`ooc.store.input_rules.header_guess`'s ``'names'`` or ``'numbered'`` (a header), or
        ``'data'`` (the first line is a row).
    """

    delimiter: str
    header_line: int
    ncols: int
    label_col: int
    head: bytes
    weight_col: int | None = None
    header_why: str = "option"

    @property
    def n_features(self) -> int:
        """Feature columns: every column but the label's (and the weights'), zero or not."""
        return self.ncols - 1 - (self.weight_col is not None)

    @property
    def names(self) -> tuple | None:
        """The header's cells (str, stripped, in column order), None when the first line is data."""
        if not self.header_line:
            return None
        return tuple(c.decode("utf-8", "replace") for c in _split_cells(self.head, self.delimiter))


def csv_layout(path, delimiter=None, label_column=0, header="auto", weight_column=None) -> CsvLayout:
    """Find the delimiter, header and column count of a dense CSV/TSV file.

    Parameters are those of :func:`iter_csv`.

    Returns
    -------
    CsvLayout

    Raises
    ------
    InputError
        No data line, an unsupported delimiter, or a label or weight column the file lacks.
    """
    path = os.fspath(path)
    first = _first_lines(path, 1)
    if not first:
        raise InputError(path, "no data rows")
    first_no, first_text = first[0]
    if delimiter is None:
        stripped = first_text.strip()
        for d in ("\t", ",", ";"):
            if d.encode() in stripped:
                delimiter = d
                break
        else:
            delimiter = " "
    if delimiter not in _DELIMITERS:
        raise InputError(
            path, f"unsupported delimiter {delimiter!r} (use one of , \\t ; or space)"
        )
    cells = _split_cells(first_text, delimiter)
    why = "option"
    if header == "auto":  # names, or numbers counting the columns: any other mix with bad cells is data, an error
        why = header_guess([c.decode("utf-8", "replace") for c in cells], lambda c: _is_number(c.encode())) or "data"
        header = why != "data"
    elif header not in (True, False):
        raise ValueError(f"header must be 'auto', True or False, not {header!r}")
    ncols = len(cells)
    label_col = label_column + ncols if label_column < 0 else label_column
    if not 0 <= label_col < ncols:
        raise InputError(
            path, f"label column {label_column} does not exist: the file has {ncols} columns",
            line=first_no,
        )
    weight_col = None
    if weight_column is not None:
        weight_col = weight_column + ncols if weight_column < 0 else weight_column
        if not 0 <= weight_col < ncols:
            raise InputError(path, f"weight column {weight_column} does not exist: the file has {ncols} columns",
                             line=first_no)
        if weight_col == label_col:
            raise InputError(path, f"weight column {weight_column} is the label column")
    return CsvLayout(delimiter, first_no if header else 0, ncols, label_col, first_text, weight_col, why)


def iter_csv(
    path, chunk_bytes=32 << 20, delimiter=None, label_column=0, header="auto",
    value_dtype=np.float64, weight_column=None, threads=1,
) -> Iterator[RowChunk]:
    """Stream a dense numeric CSV/TSV file as sparse CSR row chunks.

    Parameters
    ----------
    path : str or os.PathLike
        Plain, .gz, .bz2 or .xz file.
    chunk_bytes : int, default 32 MiB
        Bytes of text parsed per chunk.
    delimiter : {None, ',', '\\t', ';', ' '}
        None detects it from the first line (tab, then comma, then semicolon, else runs of
        whitespace).
    label_column : int, default 0
        Column holding the label; negative counts from the end.
    header : {'auto', True, False}
        Whether the first non-empty line is a header; 'auto' says yes when none of its cells
        is a number, or when its numbers count the columns (``0,1,2``; ``label,1,2``:
        :func:`ooc.store.input_rules.header_guess`): any other first line that mixes numbers
        with something else is data, and its bad cell an error with line and column.
    value_dtype : float32 or float64, default float64
        The type the feature cells will be stored as; a cell that overflows it is an error.
    weight_column : int, optional
        Column holding each row's sample weight (finite, >= 0); negative counts from the end.
    threads : int, default 1
        Threads parsing each chunk, as in :func:`iter_svmlight`.

    Yields
    ------
    RowChunk
        Labels and the nonzero feature cells; ids are 0-based positions among the feature
        columns (the label and weight columns removed), and the weights with ``weight_column``. The number of feature columns is
        :func:`csv_layout`'s ``n_features`` (trailing all-zero columns count). Blank lines
        and ``#`` comments are skipped; a delimiter is never padding, so a leading tab in a
        tab-separated row is an empty first cell.

    Raises
    ------
    InputError
        Bad or non-finite cell, empty cell, ragged row (with line and column), a negative
        weight, or no rows.
    """
    path = os.fspath(path)
    lay = csv_layout(path, delimiter, label_column, header, weight_column)
    delim = _DELIMITERS[lay.delimiter]
    count_a, count_b = (32, 9) if delim == 32 else (delim, delim)
    stops = _SPACE if delim == 32 else _SPACE + bytes([delim])
    max_abs = overflow_limit(value_dtype)

    def size(text, n):
        n_newlines, n_a = _k.count_bytes(text, n, 10, count_a)
        if delim == 32:
            n_a += _k.count_bytes(text, n, count_b, count_b)[0]
        return n_newlines, min(n_newlines * max(lay.ncols - 1, 0), n_a + n_newlines)

    def parse(text, n, line, *outs):
        return _k.parse_csv(text, n, line, delim, lay.ncols, lay.label_col, max_abs, *outs)

    def weights(chunk, text, n):
        return _take_weights(path, chunk, lay, text, n)

    kernel = PieceKernel(size, parse, stops, dict(_value_fields(value_dtype), ncols=lay.ncols),
                         weights if lay.weight_col is not None else None)

    def blocks():
        line = 1
        for buf, nbuf, pos in _iter_blocks(path, chunk_bytes):
            # Skip the header lines (in the first megabyte, so in the first block unless
            # chunk_bytes is tiny); ``line`` counts lines only until the header is passed.
            start = 0
            while start < nbuf and line <= lay.header_line:
                start = int(np.argmax(buf[start:nbuf] == 10)) + start + 1
                line += 1
            yield buf, start, nbuf, pos

    yield from _some_rows(path, iter_parsed(path, blocks(), kernel, threads), lay.head)


# --------------------------------------------------------------------------- hashed inputs

def iter_vw(path, chunk_bytes=32 << 20, hash_bits=DEFAULT_HASH_BITS, value_dtype=np.float64,
            threads=1) -> Iterator[RowChunk]:
    """Stream a Vowpal Wabbit text file as hashed CSR row chunks.

    Parameters
    ----------
    path : str or os.PathLike
        Plain, .gz, .bz2 or .xz file of VW text examples,
        ``label [weight [base]] [tag]|namespace[:scale] feature[:value] ...``.
    chunk_bytes : int, default 32 MiB
        Bytes of text parsed per chunk.
    hash_bits : int, default 18
        Columns are VW's feature hashes modulo ``2**hash_bits`` (VW's ``-b``), so a
        feature lands in the column VW gives it (:mod:`ooc.kernels.vw`).
    value_dtype : float32 or float64
        The type the values will be stored as; a value that overflows it is an error.
    threads : int, default 1
        Threads parsing each chunk, as in :func:`iter_svmlight`.

    Yields
    ------
    RowChunk
        Labels as written (VW's -1/1, 1..k or real numbers), the importance weights in
        ``weights`` (None for a chunk whose weights are all 1), each row's columns sorted
        with colliding features summed. VW's constant feature is not added: train with
        ``--bias`` for an intercept.

    Raises
    ------
    InputError
        With file, line and column of the first malformed token (VW would warn and go on),
        or ``'{path}: no data rows'``.
    """
    path = os.fspath(path)
    mask = (1 << check_hash_bits(hash_bits)) - 1
    max_abs = overflow_limit(value_dtype)
    fields = _value_fields(value_dtype)
    stops = _SPACE + b"|"

    def size(text, n):
        return _k.count_bytes(text, n, 10, 10)[0], _kv.count_separators(text, n)

    def parse(text, n, line, labels, indptr, indices, data, weights):
        return _kv.parse_vw(text, n, line, mask, max_abs, labels, weights, indptr, indices, data)

    kernel = PieceKernel(size, parse, stops, fields, row_weights=True)
    blocks = ((buf, 0, nbuf, pos) for buf, nbuf, pos in _iter_blocks(path, chunk_bytes))
    yield from _some_rows(path, iter_parsed(path, blocks, kernel, threads))


class TextLayout(NamedTuple):
    """Where the label and the text are in a delimited file of raw text (:func:`text_layout`).

    Attributes
    ----------
    delimiter : str
        Tab or comma.
    header_line : int
        1-based line number of the header, 0 when there is none.
    label_col, text_col : int
        0-based columns.
    names : tuple of str or None
        The header's cells (None: no header); recorded in a store's recipe, against which a later
        file's header is compared (:func:`ooc.store.recipe.text_order`).
    """

    delimiter: str
    header_line: int
    label_col: int
    text_col: int
    names: tuple | None = None


def _column(spec, header, path, line, option):
    """The 0-based column that ``spec`` (a cell of ``header``, the first line, or an integer) designates."""
    spec = str(spec).strip()
    if spec.lstrip("-").isdigit():
        return int(spec)
    if spec in header:
        return header.index(spec)
    shown = ", ".join(repr(h) for h in header[:20])
    raise InputError(path, f"{option}: no column {spec!r} in the header (columns: {shown})", line=line)


def text_layout(path, label="0", text="1") -> TextLayout:
    """Find the delimiter, the header and the label and text columns of a raw-text CSV/TSV.

    Parameters are those of :func:`iter_text`. The delimiter is a tab when the first
    non-blank line holds one, else a comma. That line is a header when ``label`` or
    ``text`` is a name (not a number), or when its label cell is not a number.

    Raises
    ------
    InputError
        No data line, a column name the header lacks, or twice the same column.
    """
    import csv

    path = os.fspath(path)
    first = _first_lines(path, 1)
    if not first:
        raise InputError(path, "no data rows")
    no, head = first[0]
    # _first_lines cuts at '#', which raw text may hold: read the whole first line again
    with open_text(path) as f:
        for _ in range(no):
            raw = f.readline(1 << 20)  # as _first_lines reads: a line without its newline is not read whole
    head = raw.rstrip(b"\r\n")
    delimiter = "\t" if b"\t" in head else ","
    try:
        cells = next(csv.reader([head.decode("utf-8")], delimiter=delimiter))
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(path, f"cannot read the first line: {e}", line=no) from None
    named = not all(str(c).strip().lstrip("-").isdigit() for c in (label, text))
    lc = _column(label, cells, path, no, "label column")
    tc = _column(text, cells, path, no, "text column")
    for spec, c in ((label, lc), (text, tc)):
        if c < 0:
            raise InputError(path, f"column {spec!r}: columns are counted from 0", line=no)
    if lc == tc:
        raise InputError(path, f"the label and the text are both column {lc}", line=no)
    header = named or (lc < len(cells) and not _is_number(cells[lc].strip().encode()))
    return TextLayout(delimiter, no if header else 0, lc, tc, tuple(c.strip() for c in cells) if header else None)


def iter_text(path, chunk_bytes=32 << 20, label="0", text="1", hash_bits=DEFAULT_HASH_BITS,
              value_dtype=np.float64) -> Iterator[RowChunk]:
    """Stream a CSV/TSV of labeled raw text as hashed bag-of-words rows.

    Parameters
    ----------
    path : str or os.PathLike
        Plain, .gz, .bz2 or .xz file, UTF-8; comma- or tab-separated, fields optionally in
        double quotes (``""`` for a quote inside; a quoted field cannot span lines).
    chunk_bytes : int, default 32 MiB
        Bytes of text parsed per chunk.
    label, text : str or int
        The label's and the text's column: a 0-based number, or else a name in the header
        (the first non-blank line). Other columns are ignored.
    hash_bits : int, default 18
        Unigrams and bigrams are hashed into ``2**hash_bits`` columns.
    value_dtype : float32 or float64, default float64
        The type the store holds; a label beyond its range is an error with its line.

    Yields
    ------
    RowChunk
        Numeric labels; column ``j`` of a row counts the row's unigrams and bigrams whose
        MurmurHash3 (seed 0) is ``j`` modulo ``2**hash_bits``. Tokens are runs of ASCII
        letters, digits, ``_`` and non-ASCII characters, ASCII letters lowered; a bigram is
        two consecutive tokens joined by one space (:mod:`ooc.kernels.vw`).

    Raises
    ------
    InputError
        A bad label, a row with too few columns, a bad quote or bytes that are not UTF-8
        (file, line, column); ``no data rows``.
    """
    path = os.fspath(path)
    mask = (1 << check_hash_bits(hash_bits)) - 1
    max_abs = overflow_limit(value_dtype)
    lay = text_layout(path, label, text)
    delim = _DELIMITERS[lay.delimiter]
    stops = b"\r\n" + bytes([delim])
    need = max(lay.label_col, lay.text_col) + 1

    def chunks():
        line = 1
        for buf, nbuf, pos in _iter_blocks(path, chunk_bytes):
            start = 0
            while line <= lay.header_line and start < nbuf:  # the header, in the first block
                start = int(np.argmax(buf[start:nbuf] == 10)) + start + 1
                line += 1
            if start >= nbuf:
                continue
            view = buf[start:]
            n = nbuf - start
            n_newlines, _ = _k.count_bytes(view, n, 10, 10)
            cap = 2 * _kv.count_words(view, n)
            outs = (np.empty(n_newlines, np.float64), np.empty(n_newlines + 1, np.int64),
                    np.empty(cap, np.int64), np.empty(cap, np.float64))
            parsed = _kv.parse_text(view, n, line, delim, lay.label_col, lay.text_col, mask, max_abs, *outs)
            yield _parsed_chunk(path, parsed, outs, view, n, line, pos, stops, ncols=f"at least {need}",
                                **_value_fields(value_dtype))
            line += n_newlines

    yield from _some_rows(path, chunks())


def _take_weights(path, chunk: RowChunk, lay: CsvLayout, buf, nbuf) -> RowChunk:
    """``chunk`` with the weight column's cells taken out of the features into ``weights``.

    The parser read the weight column as a feature (zeros are no entry: weight 0); its
    feature position is removed and the later ones shift down by one.
    """
    wf = lay.weight_col - (lay.weight_col > lay.label_col)  # its position among the parsed features
    m = len(chunk.labels)
    rows = np.repeat(np.arange(m), np.diff(chunk.indptr))
    is_w = chunk.indices == wf
    weights = np.zeros(m)
    weights[rows[is_w]] = chunk.data[is_w]
    bad = np.flatnonzero(weights < 0)
    if len(bad):
        k = int(bad[0])
        raise InputError(path, f"sample weight {weights[k]:g} is negative (weight column {lay.weight_col}: "
                         "weights must be >= 0)", line=_row_line(buf, nbuf, chunk.first_line, k),
                         column=lay.weight_col + 1)
    keep = ~is_w
    indices = chunk.indices[keep]
    indices -= indices > wf
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows[keep], minlength=m), out=indptr[1:])
    return chunk._replace(indptr=indptr, indices=indices, data=chunk.data[keep], weights=weights)


def _row_line(buf, nbuf, first_line, k):
    """Line number of the ``k``-th data row of ``buf[:nbuf]``, whose first row is on line ``first_line``
    (blank and comment-only lines hold no row)."""
    text = bytes(buf[:nbuf]).split(b"\n")
    data_lines = [i for i, t in enumerate(text) if t.split(b"#", 1)[0].strip()]
    return first_line + (data_lines[k] - data_lines[0]) if k < len(data_lines) else first_line + k


# --------------------------------------------------------------------------- format detection

_EXT_FORMATS = {
    ".svm": "svmlight",
    ".svmlight": "svmlight",
    ".libsvm": "svmlight",
    ".csv": "csv",
    ".tsv": "csv",
    ".npz": "npz",
    ".vw": "vw",
}


def _binary_head_bytes(path) -> int:
    """How much of an input's start the binary check reads: :data:`BINARY_HEAD_BYTES`, within the head a stream
    keeps (:data:`STDIN_HEAD_BYTES`: what is read past it could not be read again)."""
    return min(BINARY_HEAD_BYTES, STDIN_HEAD_BYTES) if is_stream(path) else BINARY_HEAD_BYTES


def binary_head(path):
    """What the input ``path`` is when its start (decompressed) is not text
    (:func:`ooc.store.input_rules.binary_kind`, its ``kind`` naming the compression too); None for text,
    and for a URL (not opened twice for this). A stream's head is kept: reading it here loses nothing."""
    if is_url(path):
        return None
    with open_text(path) as f:
        head = f.read(_binary_head_bytes(path))
        raw = getattr(f, "raw", None)
        packed = raw.kind if isinstance(raw, _Decompressed) else None
    found = binary_kind(head)
    return found if found is None or packed is None else found._replace(kind=f"{found.kind}, {packed}-compressed")


def format_from_name(path) -> str | None:
    """The input format a file's name says (its extension, after .gz/.bz2/.xz), or None."""
    name = os.path.basename(os.fspath(path)).lower()
    for ext in _COMPRESSED_EXT:
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return _EXT_FORMATS.get(os.path.splitext(name)[1])


def detect_format(path):
    """Tell the input format of a file.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    {'svmlight', 'csv', 'npz', 'vw'}
        From the extension (after stripping .gz/.bz2/.xz: .svm .svmlight .libsvm -> svmlight,
        .csv .tsv -> csv, .npz -> npz, .vw -> vw); otherwise (.txt, no extension, ...) from the
        content: a zip archive is npz, a ``|`` means Vowpal Wabbit, ``id:value`` tokens mean
        svmlight, numbers in columns mean csv. Raw text is never guessed (``--text``). Other binary
        content (:func:`ooc.store.input_rules.binary_kind`) is refused.

    Raises
    ------
    InputError
        The file cannot be read, or its content fits none of the formats.
    """
    path = os.fspath(path)
    fmt = format_from_name(path)
    if fmt is not None:
        return fmt
    with open_text(path) as f:
        head = f.read(_binary_head_bytes(path))
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        return "npz"
    found = binary_kind(head)
    if found is not None:  # not text: no text format's parser is to name its bytes as a bad first line
        raise InputError(path, f"is {found.kind}, which is none of the formats ooc reads (svmlight, CSV, Vowpal "
                               "Wabbit text, raw text with --text, .npz)", line=found.line, column=found.column)
    lines = [(k, t.strip()) for k, t in _first_lines(path, 20)]
    if not lines:
        raise InputError(path, "no data rows")
    if any(b"|" in t for _, t in lines):
        return "vw"
    if any(b":" in t for _, t in lines):
        return "svmlight"
    if all(len(t.split()) == 1 for _, t in lines) and not any(
        d in t for _, t in lines for d in (b",", b";", b"\t")
    ):
        return "svmlight"  # label-only rows: svmlight with empty rows and a 1-column CSV agree
    return "csv"

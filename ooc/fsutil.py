"""Durable file-system operations shared by the store writer and the run directory."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import zlib

import numpy as np

#: errno values that mean "no room left to write": a full file system or an exhausted quota.
_DISK_FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None)) if e is not None)


def fsync_path(path: str) -> None:
    """fsync a file or directory by path; raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync a directory so the entries renamed into it survive a power loss (best effort)."""
    try:
        fsync_path(path)
    except OSError:
        pass


def disk_full_error(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT error behind ``exc`` (itself or a cause in its chain), or None.

    Libraries wrap the OS error (zarr's codec pipeline, h5py's HDF5 error stack, which
    keeps only the text), so the chain and the message are both searched.
    """
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and (exc.errno in _DISK_FULL_ERRNOS
                                         or "No space left on device" in str(exc)
                                         or "Disk quota exceeded" in str(exc)):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def write_all(f, buffer) -> None:
    """Write every byte of ``buffer`` to the binary file ``f`` or raise ``OSError``.

    ``ndarray.tofile`` goes through C stdio and can lose a short write (a full disk)
    without an error; a file object's ``write`` raises, and the count is checked too
    because a raw (unbuffered) file may legally write less than asked.
    """
    view = memoryview(buffer).cast("B")
    done = 0
    while done < len(view):
        n = f.write(view[done:])
        if not n:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), getattr(f, "name", None))
        done += n


#: Bytes read at a time to checksum a file (:func:`file_crc`): a small transient, never charged to
#: ``--memory`` (a MiB made a 1 MiB run's checks go over it), still few system calls.
CRC_PIECE = 64 << 10


def file_crc(fd: int, stop: int | None = None) -> tuple[int, int]:
    """``(crc, size)``: the CRC-32 of the open file ``fd``'s bytes up to ``stop`` (None: its end), read
    :data:`CRC_PIECE` at a time from offset 0 (the file position is not moved)."""
    crc = pos = 0
    while stop is None or pos < stop:
        piece = os.pread(fd, CRC_PIECE if stop is None else min(stop - pos, CRC_PIECE), pos)
        if not piece:
            break
        crc = zlib.crc32(piece, crc)
        pos += len(piece)
    return crc, pos


@contextlib.contextmanager
def temporary_file(path: str, suffix: str = ""):
    """Open ``path``'s temporary sibling for writing; it replaces ``path`` only if all went well.

    On any failure (a full disk mid-write) the temporary is deleted and ``path`` is untouched.
    """
    tmp = temporary_sibling(path, "tmp") + suffix
    try:
        f = open(tmp, "wb")
    except OSError as exc:  # name the file being replaced, not our temporary
        raise type(exc)(exc.errno, exc.strerror, path) from None
    try:
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def check_parent(path: str) -> None:
    """Raise ``FileNotFoundError`` / ``NotADirectoryError`` (one line) unless ``path``'s parent is a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        if os.path.lexists(parent):
            raise NotADirectoryError(f"{path}: {parent} is not a directory")
        raise FileNotFoundError(f"{path}: the parent directory {parent} does not exist")


def make_parents(path: str) -> None:
    """Create the missing parent directories of an output ``path`` (``--out a/b`` makes ``a/``, as
    ``mkdir -p`` would); raise ``NotADirectoryError`` (one line) when a parent is a file.

    Only directories are made, never anything replaced; they stay when the command fails later.
    """
    if "://" in os.fspath(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    probe = parent
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        raise NotADirectoryError(f"{path}: {probe} is not a directory")
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:  # (a file made there meanwhile)
        raise NotADirectoryError(f"{path}: {parent} is not a directory") from None
    check_parent(path)


@contextlib.contextmanager
def atomic_output(path: str, mode: str = "w"):
    """Open a hidden temporary sibling of ``path`` for writing; rename it to ``path`` when the block ends well.

    Readers of ``path`` see the old file or the whole new one, never a truncated or half-written
    one; on any error (a full disk, Ctrl-C) the temporary is deleted and ``path`` is untouched.
    Missing parent directories of ``path`` are made (:func:`make_parents`).
    """
    make_parents(path)
    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory")
    tmp = temporary_sibling(path, "tmp")
    try:
        f = open(tmp, mode)
    except OSError as exc:  # name the user's path, not our temporary's
        raise type(exc)(exc.errno, exc.strerror, path) from None
    try:
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(parent)


def os_error_line(exc: BaseException) -> str | None:
    """One line for the OS error behind ``exc`` (itself or a cause): ``path: reason``; None if there is none."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError):
            if exc.filename is not None and exc.strerror:
                extra = f" -> {exc.filename2}" if exc.filename2 is not None else ""
                return f"{exc.filename}{extra}: {exc.strerror}"
            return str(exc) or os.strerror(exc.errno or 0)
        exc = exc.__cause__ or exc.__context__
    return None


def atomic_write_bytes(path: str, payload: bytes, fsync: bool = True) -> None:
    """Write ``payload`` to ``path`` via a temporary file and a rename."""
    with temporary_file(path) as f:
        f.write(payload)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


def atomic_save_npy(path: str, arr: np.ndarray, fsync: bool = False) -> None:
    """``np.save`` through a temporary file and a rename (a reader never sees half an array)."""
    with temporary_file(path, ".npy") as f:
        np.save(f, arr, allow_pickle=False)
        if fsync:
            f.flush()
            os.fsync(f.fileno())


# -- temporaries built beside their final path ---------------------------------------------------
#: Suffixes of the companions of a temporary (same stem, so one rule removes all).
_LOCK_SUFFIX = ".lock"
_SCRATCH_SUFFIX = ".scratch"


#: The name of every temporary ooc makes: ``.NAME.TAG-PID-NONCE+MAC`` and optional suffixes (``.lock``,
#: ``.scratch``, ``.old``, an extension): hidden, the process that owns it, a random nonce (12 hex digits)
#: and a proof (12 hex digits, :func:`_temporary_mac`). A name of this shape proves nothing by itself.
TEMPORARY = re.compile(r"^(?P<stem>\..+\.[a-z][a-z-]*-(?P<pid>[0-9]+)-(?P<nonce>[0-9a-f]{12}))"
                       r"(?P<mac>[0-9a-f]{12})(\.[A-Za-z0-9.]+)?$")


def temporary_key_dir() -> str:
    """Where this user's key for temporaries' names lives (``OOC_STATE_DIR``, else ``$XDG_CACHE_HOME/ooc``,
    else ``~/.cache/ooc``)."""
    return os.environ.get("OOC_STATE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "ooc")


#: This process's key: (the directory it was read from, the key); read once.
_KEY: list = []


def _read_or_make_key(directory: str) -> bytes | None:
    """The key in ``directory/temporaries.key`` (made once, mode 0600, published with a link that never
    replaces another process's), or None where it cannot be read nor made, or anyone else could change it."""
    import stat

    path = os.path.join(directory, "temporaries.key")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        st = os.stat(directory)
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return None  # a directory another user could put a key in
        if not os.path.exists(path):
            tmp = f"{path}.{os.getpid()}-{os.urandom(6).hex()}"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                write_all(os.fdopen(fd, "wb", closefd=False), os.urandom(32).hex().encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)  # another process's key, made first, wins
            os.unlink(tmp)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                return None
            key = os.read(fd, 128).strip()
        finally:
            os.close(fd)
    except OSError:
        return None
    return key if len(key) == 64 else None


def temporary_key() -> bytes | None:
    """This user's secret key for temporaries' names (:func:`temporary_key_dir`, else a directory of this
    user's in the system's temporary directory); None where none can be kept: nothing is then proven ooc's."""
    import tempfile

    where = temporary_key_dir()
    if _KEY and _KEY[0] == where:
        return _KEY[1]
    key = _read_or_make_key(where)
    if key is None:
        key = _read_or_make_key(os.path.join(tempfile.gettempdir(), f"ooc-{os.getuid()}"))
    _KEY[:] = [where, key]
    return key


def _temporary_mac(stem: str, key: bytes) -> str:
    """The proof of a temporary's name ``stem`` (``.NAME.TAG-PID-NONCE``): an HMAC under this user's key."""
    import hashlib
    import hmac

    return hmac.new(key, stem.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()[:12]


def temporary_match(name: str):
    """The match of :data:`TEMPORARY` for ``name`` when it is a temporary ooc made (its proof verifies
    under this user's key), else None: a name of that shape without the proof is not ooc's."""
    import hmac

    m = TEMPORARY.match(name)
    if m is None:
        return None
    key = temporary_key()
    if key is None or not hmac.compare_digest(m.group("mac"), _temporary_mac(m.group("stem"), key)):
        return None
    return m


def is_temporary_name(name: str) -> bool:
    """Whether the file name ``name`` is one of ooc's temporaries, proven (:func:`temporary_match`)."""
    return temporary_match(name) is not None


def temporary_sibling(path: str, tag: str = "partial") -> str:
    """A hidden, unique sibling of ``path`` (same directory, so a rename to ``path`` is atomic).

    Its name (:data:`TEMPORARY`) carries this process's id, a random nonce and their proof, and its
    directory is registered (:func:`register_temporary_dir`), so that whatever kills this process, the next
    ooc command removes what it left (:func:`sweep_temporaries`). Where no key can be kept
    (:func:`temporary_key`), the proof is random: nothing then sweeps the temporary (never a user's file).
    """
    import uuid

    head, tail = os.path.split(os.path.abspath(path))
    register_temporary_dir(head)
    # the nonce starts with this process's registration's token: a sweep removes only what that process
    # made, even where another process (another pid namespace on a shared disk) has the same id
    nonce = ((_REGISTRATION[4] if _REGISTRATION and _REGISTRATION[0] == os.getpid() else "")
             + uuid.uuid4().hex)[:12]
    stem = f".{tail}.{tag}-{os.getpid()}-{nonce}"
    key = temporary_key()
    return os.path.join(head, stem + (_temporary_mac(stem, key) if key is not None else uuid.uuid4().hex[:12]))


# -- the registry of directories holding temporaries ---------------------------------------------
#: This process's registration: (pid, lock fd, list path, directories listed, token prefix of its temporaries).
_REGISTRATION: list = []


#: Hex digits of a registration's token that start the token of each temporary its process makes.
_PREFIX = 6


def registry_dir() -> str:
    """Where processes register the directories they make temporaries in (``OOC_STATE_DIR``, else
    ``$XDG_STATE_HOME/ooc``, else ``~/.local/state/ooc``; then ``temporaries/``)."""
    base = os.environ.get("OOC_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "ooc")
    return os.path.join(base, "temporaries")


def registry_dirs() -> list[str]:
    """:func:`registry_dir`, then this user's directory in the system's temporary directory (where the key
    falls back to too, :func:`temporary_key`): a process registers in the first it can write (a read-only or
    missing home still registers), and every sweep looks in both."""
    import tempfile

    return [registry_dir(), os.path.join(tempfile.gettempdir(), f"ooc-{os.getuid()}", "temporaries")]


def _private_dir(path: str, make: bool = True) -> bool:
    """Make ``path`` (mode 0700) where missing (``make``); whether it is this user's and no one else can
    write in it (a registry another user could add to is not read)."""
    import stat

    try:
        if make:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.lstat(path)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def register_temporary_dir(directory: str) -> None:
    """Note that this process makes temporaries in ``directory`` (before it makes them).

    A process registers once (``PID-TOKEN.lock``, locked for its lifetime, and ``PID-TOKEN.list``,
    one directory a line). Best effort: where the registry cannot be written, nothing is noted and
    the temporaries are left to the local sweeps (:func:`remove_stale_temporaries`).
    """
    import fcntl
    import uuid

    pid = os.getpid()
    if not _REGISTRATION or _REGISTRATION[0] != pid:  # first time, or a forked child
        sweep_temporaries()
        token = uuid.uuid4().hex[:12]
        for reg in registry_dirs():
            if reg != registry_dir() and not _private_dir(reg):
                continue
            try:
                os.makedirs(reg, exist_ok=True)
                stem = os.path.join(reg, f"{pid}-{token}")
                fd = os.open(stem + ".lock", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                with open(stem + ".list", "a"):  # writable: the directories go here
                    pass
            except OSError:
                continue
            _REGISTRATION[:] = [pid, fd, stem + ".list", set(), token[:_PREFIX]]
            break
        else:
            return
    listed = _REGISTRATION[3]
    if directory not in listed:
        try:
            with open(_REGISTRATION[2], "a") as f:
                f.write(directory + "\n")
            listed.add(directory)
        except OSError:
            pass


def sweep_temporaries() -> list[str]:
    """Remove the temporaries of processes that died, wherever they made them; return their paths.

    A registration whose lock can be taken belongs to a dead process: each directory it listed is
    searched for temporaries (:data:`TEMPORARY`) carrying its process id and its token's prefix, which
    are removed, then the registration. A process id in use again (by another process) leaves the registration for later.
    """
    removed = []
    for reg in registry_dirs():
        if reg == registry_dir() or _private_dir(reg, make=False):
            removed += _sweep_registry(reg)
    return removed


def _sweep_registry(reg: str) -> list[str]:
    """:func:`sweep_temporaries` for the registrations in ``reg``."""
    import fcntl

    try:
        names = os.listdir(reg)
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.endswith(".lock"):
            continue
        stem = os.path.join(reg, name[:-5])
        if _REGISTRATION and stem + ".list" == _REGISTRATION[2]:
            continue
        try:
            fd = os.open(stem + ".lock", os.O_RDWR)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process is alive
            pid, _, token = name[:-5].partition("-")
            if not _pid_is_dead(pid):  # the id is someone else's now: their temporaries carry it too
                continue
            try:
                with open(stem + ".list") as f:
                    dirs = {line.rstrip("\n") for line in f if line.strip()}
            except OSError:
                dirs = set()
            for d in sorted(dirs):
                try:
                    entries = os.listdir(d)
                except OSError:
                    continue
                for entry in entries:
                    m = temporary_match(entry)  # proven ooc's: a user's file of that shape is never removed
                    if m is not None and m.group("pid") == pid and m.group("nonce").startswith(token[:_PREFIX]):
                        remove_tree(os.path.join(d, entry))
                        removed.append(os.path.join(d, entry))
            for p in (stem + ".list", stem + ".lock"):
                with contextlib.suppress(OSError):
                    os.unlink(p)
        finally:
            os.close(fd)
    return removed


class Temporary:
    """A temporary sibling of ``final`` to build into, claimed by this process until :meth:`release`.

    Beside the temporary (``.NAME.partial-PID-XXXXXX``) live a lock file (``... .lock``),
    held with ``flock`` for as long as this object is alive, and a scratch directory
    (``... .scratch``) for scratch files. The kernel drops the lock when the process dies,
    however it dies, so :func:`remove_stale_temporaries` can tell for sure which temporaries
    nobody is building any more (a pid could have been reused; a lock cannot be held by a
    dead process).

    Parameters
    ----------
    final : str
        The path the temporary will be published to.
    """

    def __init__(self, final: str):
        import fcntl

        self.final = final
        self.path = temporary_sibling(final)
        try:
            self._fd = os.open(self.path + _LOCK_SUFFIX, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:  # name the user's path, not our lock file
            raise type(exc)(exc.errno, exc.strerror, final) from None
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # new file: nobody else has it

    @property
    def scratch(self) -> str | None:
        """A directory for scratch files next to the temporary."""
        return self.path + _SCRATCH_SUFFIX

    def remove(self) -> None:
        """Delete the temporary and the scratch directory (the claim stays)."""
        remove_tree(self.path)
        remove_tree(self.scratch)

    def release(self) -> None:
        """Give up the claim: remove the lock file, then drop the lock."""
        if self._fd is not None:
            # unlink before unlocking: a cleaner that opens the file later finds nothing
            with contextlib.suppress(OSError):
                os.unlink(self.path + _LOCK_SUFFIX)
            os.close(self._fd)
            self._fd = None


def remove_stale_temporaries(final: str) -> list[str]:
    """Delete the temporaries for ``final`` whose process has died.

    A temporary is stale when its lock file can be locked (the process holding it is
    gone), or, for a temporary without a lock file (the lock is made first, so only an
    older ooc leaves these), when the process id in its name no longer exists on this
    machine. A temporary of a live process is never touched, nor a name of that shape whose proof does
    not verify (:func:`temporary_match`: not ooc's). A temporary that holds the
    *old* content of ``final`` (a crash between :func:`swap_into_place` and the removal of
    the old content) is stale in the same way.

    Returns
    -------
    list of str
        The paths removed.
    """
    import fcntl

    head, tail = os.path.split(os.path.abspath(final))
    prefix = f".{tail}.partial-"
    try:
        names = os.listdir(head)
    except OSError:
        return []
    stems = set()
    for name in names:
        if name.startswith(prefix) and is_temporary_name(name):  # proven ooc's, never a user's look-alike
            for sfx in (_LOCK_SUFFIX, _SCRATCH_SUFFIX):
                if name.endswith(sfx):
                    name = name[:-len(sfx)]
                    break
            stems.add(name)
    removed = []
    for stem in sorted(stems):
        base = os.path.join(head, stem)
        lock = base + _LOCK_SUFFIX
        fd = None
        if os.path.exists(lock):
            try:
                fd = os.open(lock, os.O_RDWR)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held: a live process (or the file vanished meanwhile)
                if fd is not None:
                    os.close(fd)
                continue
        elif not _pid_is_dead(stem[len(prefix):].split("-", 1)[0]):
            continue
        try:
            for p in (base, base + _SCRATCH_SUFFIX):
                if os.path.lexists(p):
                    remove_tree(p)
                    removed.append(p)
            if fd is not None:
                os.unlink(lock)  # last: while it exists the temporary can still be found
        finally:
            if fd is not None:
                os.close(fd)
    return removed


def _pid_is_dead(text: str) -> bool:
    """Whether no process has the id ``text`` here (False when unsure)."""
    try:
        pid = int(text)
    except ValueError:
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists but belongs to someone else
        return False
    return False


def remove_tree(path: str) -> None:
    """Delete a file or a directory tree at ``path``; silent if absent."""
    import shutil

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


# -- replacing what is ours, atomically ------------------------------------------------------------
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


def _renameat2(src: str, dst: str, flags: int) -> bool:
    """Linux ``renameat2``: True when done, False when this system or file system lacks it (nothing done)."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), src, None, dst)


def swap_into_place(new: str, final: str) -> str | None:
    """Put the complete ``new`` at ``final`` in one atomic step; return where the old content now is.

    When ``final`` exists, the two are exchanged (Linux ``renameat2(RENAME_EXCHANGE)``): at every
    instant ``final`` is either the old or the new one, whole, and afterwards the old one is at
    ``new``'s (hidden, claimed) name for the caller to delete; a crash before that leaves it to
    :func:`remove_stale_temporaries`. Where the exchange is not available, ``final`` is renamed
    to a hidden sibling first and ``new`` renamed into place (a crash between the two renames
    leaves both whole under hidden names, never a half of either). When ``final`` does not
    exist, ``new`` is renamed without replacing anything that appeared meanwhile.

    Returns
    -------
    str or None
        The path of the old content (to delete), or None when there was none.
    """
    parent = os.path.dirname(os.path.abspath(final))
    if not os.path.lexists(final):
        if not _renameat2(new, final, _RENAME_NOREPLACE):
            if os.path.lexists(final):
                raise FileExistsError(errno.EEXIST, "appeared meanwhile", final)
            os.rename(new, final)
        fsync_dir(parent)
        return None
    if _renameat2(new, final, _RENAME_EXCHANGE):
        fsync_dir(parent)
        return new
    old = new + ".old"
    os.rename(final, old)
    os.rename(new, final)
    fsync_dir(parent)
    return old


def contains(ancestor: str, path: str) -> bool:
    """Whether ``path`` is ``ancestor`` or inside it, after resolving links (``..``, symlinks)."""
    a, p = os.path.realpath(ancestor), os.path.realpath(path)
    return p == a or p.startswith(a.rstrip(os.sep) + os.sep)


# -- checksums of what ooc reads back ----------------------------------------------------------------
#: The key under which :func:`seal_json` stores a JSON document's own checksum.
CHECKSUM_KEY = "checksum"


def array_checksum(a: np.ndarray, crc: int = 0) -> int:
    """CRC-32 of an array's dtype, shape and bytes (zlib's, which releases the GIL on large buffers)."""
    import zlib

    a = np.ascontiguousarray(a)
    crc = zlib.crc32(repr((a.dtype.str, a.shape)).encode(), crc)
    return zlib.crc32(memoryview(a.reshape(-1)).cast("B"), crc) if a.size else crc


def read_npy(path: str, crc: int | None = None, mmap: bool = False) -> np.ndarray:
    """The array ooc saved at ``path``, verified: it reads, its :func:`array_checksum` is ``crc`` (when one
    was recorded) and a floating array is finite. ``ValueError`` (one line naming ``path``) otherwise.

    The one way ooc reads back an array file it wrote (a model's, a run's final duals, a checkpoint's).
    """
    try:
        a = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError, EOFError, SyntaxError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    except Exception as exc:  # noqa: BLE001 - a damaged header: numpy parses it with tokenize (TokenError)
        raise ValueError(f"{path}: unreadable (a damaged header: {type(exc).__name__})") from None
    if crc is not None and array_checksum(a) != crc:
        raise ValueError(f"{path}: failed its checksum (the file is damaged)")
    if a.dtype.kind in "fc":
        flat, step = a.reshape(-1), 1 << 20
        for i in range(0, flat.size, step):
            if not np.isfinite(flat[i:i + step]).all():
                raise ValueError(f"{path}: holds NaN or infinite values (damaged)")
    return a


def npz_checksums(path: str, chunk: int = 1 << 22) -> dict[str, int]:
    """:func:`array_checksum` of every array in the ``.npz`` file ``path``, read a piece at a time.

    Gives what ``{k: array_checksum(np.load(path)[k])}`` gives without making the arrays: each
    member's bytes are streamed through one buffer of ``chunk`` bytes at most (no larger than the
    largest member: a small state costs its own size, never a fixed 4 MB). A checkpoint read back right
    after its write otherwise allocated, faulted in and freed the whole state again (0.2-0.6 s a
    checkpoint of 144 MB, on the core the training threads share); streamed, the read-back is the
    checksum's own time. Floating arrays are also checked finite, piece by piece: ``ValueError``
    names the first that is not. An uncompressed member (what ``np.savez`` writes) is read from its
    offset in the file, past the zip layer, whose CRC-32 of the same bytes is left unchecked here:
    the array's own checksum covers them. A compressed member, or an array in Fortran order or of
    an object dtype (never written by ooc), goes through :mod:`zipfile` or is loaded whole.
    """
    import io
    import struct
    import zipfile
    import zlib

    fmt = np.lib.format
    out: dict[str, int] = {}
    with open(path, "rb") as raw, zipfile.ZipFile(raw) as z:
        members = z.infolist()
        chunk = max(64, min(int(chunk), max((i.file_size for i in members), default=0)))
        view = memoryview(bytearray(chunk))
        for info in members:
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            with z.open(info) as f:
                version = fmt.read_magic(f)
                if version not in ((1, 0), (2, 0)):
                    raise ValueError(f"array {name!r}: .npy format version {version} not written by ooc")
                read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                shape, fortran, dtype = read_header(f)
                header_len = f.tell()
                left = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                if fortran or dtype.hasobject:
                    # loaded whole (an object array is refused there), its C-order bytes streamed below
                    with np.load(path, allow_pickle=False) as whole:
                        a = np.ascontiguousarray(whole[name])
                    src = io.BytesIO(a.tobytes())
                elif info.file_size != header_len + left:
                    raise ValueError(f"array {name!r}: {info.file_size - header_len} bytes of data for shape "
                                     f"{tuple(shape)} (truncated or padded)")
                elif info.compress_type == zipfile.ZIP_STORED:
                    # the local header: 30 bytes, then the name and the extra field, then the member's bytes
                    raw.seek(info.header_offset)
                    local = raw.read(30)
                    if len(local) != 30 or local[:4] != b"PK\x03\x04":
                        raise ValueError(f"array {name!r}: damaged zip entry")
                    n_name, n_extra = struct.unpack("<HH", local[26:30])
                    raw.seek(info.header_offset + 30 + n_name + n_extra + header_len)
                    src = raw
                else:
                    src = f
                # as array_checksum sees it: np.ascontiguousarray makes a 0-d array 1-d
                crc = zlib.crc32(repr((dtype.str, tuple(shape) or (1,))).encode())
                floating = dtype.kind in "fc"
                while left > 0:
                    want = min(left, chunk - chunk % dtype.itemsize)
                    got = 0
                    while got < want:  # whole items a piece: the finite check needs them
                        r = src.readinto(view[got:want])
                        if not r:
                            raise ValueError(f"array {name!r}: truncated ({left - got} bytes missing)")
                        got += r
                    crc = zlib.crc32(view[:got], crc)
                    if floating and not np.isfinite(np.frombuffer(view[:got], dtype=dtype)).all():
                        raise ValueError(f"array {name!r} holds NaN or infinite values")
                    left -= got
                out[name] = crc
    return out


def _json_digest(body: dict) -> str:
    import hashlib

    return hashlib.blake2b(json_dumps_canonical(body).encode(), digest_size=12).hexdigest()


def json_dumps_canonical(obj) -> str:
    import json

    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def seal_json(obj: dict, indent: int | None = 2) -> bytes:
    """``obj`` as JSON with a checksum of its content under :data:`CHECKSUM_KEY` (see :func:`read_sealed_json`)."""
    import json

    from .jsonout import dumps

    # as it will read back (numpy scalars, paths as text; strict JSON: a non-finite number is null)
    body = json.loads(dumps(obj, default=str))
    body.pop(CHECKSUM_KEY, None)
    return json.dumps({**body, CHECKSUM_KEY: _json_digest(body)}, indent=indent).encode()


def unseal_json_line(line: bytes, required: bool = True) -> dict:
    """One JSON object written by :func:`seal_json` (a line of a ``.jsonl`` file), verified; its checksum removed.

    Raises ``ValueError`` (the reason, without a path: the caller names the file and the line).
    """
    import json

    try:
        body = json.loads(line.decode())
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(body, dict):
        raise ValueError("not a JSON object")
    digest = body.pop(CHECKSUM_KEY, None)
    if digest is None:
        if required:
            raise ValueError("its checksum is missing")
        return body
    if digest != _json_digest(body):
        raise ValueError("failed its checksum")
    return body


def read_sealed_json(path: str, required: bool = True) -> dict:
    """A JSON object written by :func:`seal_json`, its checksum verified and removed.

    Raises ``ValueError`` naming ``path`` when the file is not a JSON object, its checksum does not match
    (a damaged byte), or it has none and ``required`` (older files: pass ``required=False``).
    """
    import json

    try:
        with open(path, "rb") as f:
            body = json.loads(f.read().decode())
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: damaged (not UTF-8 text: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: damaged (not valid JSON: {exc.msg} at line {exc.lineno})") from None
    if not isinstance(body, dict):
        raise ValueError(f"{path}: damaged (not a JSON object)")
    digest = body.pop(CHECKSUM_KEY, None)
    if digest is None:
        if required:
            raise ValueError(f"{path}: its checksum is missing (damaged)")
        return body
    if digest != _json_digest(body):
        raise ValueError(f"{path}: failed its checksum (the file is damaged)")
    return body

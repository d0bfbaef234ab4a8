"""What ooc owns on disk: the one rule for replacing or deleting anything, by manifest.

Every directory ooc makes (a store, a run directory) holds a manifest,
``.ooc-owned.json``, written when its content is written: a random ownership token, the kind
of thing it is, and every entry ooc put there (files with their size and CRC-32, directories),
sealed with its own checksum (:func:`ooc.fsutil.seal_json`). A directory whose content keeps
changing while ooc works in it (a run's checkpoints, dual buffers and history) lists, besides
its exact entries, the *names* ooc generates there (``generated``: shell patterns). A name proves
nothing: a file of a generated name is ooc's only when it proves its own content, by the checks
of its kind (:func:`register_verifier`: a run's checkpoints carry a sealed ``meta.json`` listing
their files and checksums, its dual files a CRC-32 trailer, its history one checksum a line).
A file ooc writes into a directory
it did not make (an export, predictions, a batch's ``results.csv``, the demo's data) is listed
in that directory's manifest (``whole`` false: the directory itself is not ooc's).

The rule (:func:`check_replaceable`), used by ``--overwrite`` and every in-place update:

* a symbolic link is never ooc's (ooc makes none): nothing is written through or in place of one;
* a manifest vouches only for what it lists, with the same content, and for files of generated
  names that prove their own content: copied with its whole directory (``cp -r RUN COPY``) it
  vouches for the copy as for the original; copied alone into a folder of the user's, every file
  there that is neither listed with its content nor proves itself is foreign;
* a directory is ooc's when its manifest is intact and every entry under it is the manifest,
  a listed file whose size and CRC-32 still match, a listed directory, an entry of a generated
  name that its kind's verifier proves ooc wrote (a file changed since it was listed too, when
  it proves its new content), or a temporary of ooc's (proven by its name's HMAC,
  :func:`ooc.fsutil.temporary_match`; a name of that shape alone proves nothing); a generated
  name with no verifier for the manifest's kind proves nothing;
* a file is ooc's when its directory's manifest lists it with the same size and CRC-32.

Anything else is refused by :class:`NotOurs`, one line naming the foreign entry.

Replacing an output (:func:`put`, :func:`exclusive`):

* a command replaces only an output of its own kind (``kind``: a directory's manifest's, a listed file's
  entry's; :data:`KINDS`), never another kind of ooc's artifact nor a file inside a store or a run;
* the rule is applied again at the moment of the swap: the new output is exchanged in, the old one is
  verified where it now lies (a hidden name nobody writes to) and, if it is not ooc's any more, exchanged
  back and named;
* a store has one writer at a time (its lock, taken from the first check to the swap); a second is
  refused at once, naming the first.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os

from . import fsutil

#: The manifest's file name (hidden: it is ooc's bookkeeping, not output).
MANIFEST = ".ooc-owned.json"
#: Version of the manifest's format.
FORMAT = 1


class NotOurs(FileExistsError):
    """A path ooc was asked to replace or delete holds something ooc did not write (one line)."""


# -- manifests ---------------------------------------------------------------------------------
def file_entry(path: str) -> dict:
    """A listed file as the manifest records it: its size and CRC-32 (read a piece at a time)."""
    with open(path, "rb") as f:
        crc, size = fsutil.file_crc(f.fileno())
    return {"size": size, "crc": crc}


def _manifest_path(directory: str) -> str:
    return os.path.join(directory, MANIFEST)


def read_manifest(directory: str) -> dict | None:
    """The manifest of ``directory``, verified; None when there is none.

    Raises
    ------
    NotOurs
        The manifest is damaged or is not a file (a link, a directory).
    """
    p = _manifest_path(directory)
    if not os.path.lexists(p):
        return None
    if os.path.islink(p) or not os.path.isfile(p):
        raise NotOurs(f"{p}: is not a file ooc wrote (a link or a directory); refusing to touch {directory}")
    try:
        m = fsutil.read_sealed_json(p)
    except (OSError, ValueError) as exc:
        raise NotOurs(f"{fsutil.os_error_line(exc) or exc}; refusing to touch {directory}") from None
    if m.get("ooc_owned") != FORMAT or not isinstance(m.get("entries"), dict):
        raise NotOurs(f"{p}: not an ooc manifest of format {FORMAT}; refusing to touch {directory}")
    return m


def _write_manifest(directory: str, manifest: dict) -> None:
    fsutil.atomic_write_bytes(_manifest_path(directory), fsutil.seal_json(manifest, indent=None))


@contextlib.contextmanager
def _locked(directory: str):
    """Hold ``directory``'s lock while its manifest is read and rewritten (another ooc may add to it)."""
    import fcntl

    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def new_token() -> str:
    """A random ownership token (also the id of a conversion, in a store's shard records)."""
    return os.urandom(12).hex()


def seal_dir(directory: str, kind: str, generated=(), token: str | None = None, extra: dict | None = None) -> dict:
    """Write the manifest of ``directory``, which ooc has just built: every entry in it now, and the
    ``generated`` names ooc will add while it works there. Call before it is renamed into place.
    ``extra``: more keys for the manifest (a store's shard records), sealed with it."""
    entries = {}
    for rel, full, is_dir in _walk(directory):
        if os.path.islink(full):
            raise NotOurs(f"{full}: a symbolic link in a directory ooc built (not written by ooc)")
        entries[rel] = {"dir": True} if is_dir else file_entry(full)
    manifest = {**(extra or {}), "ooc_owned": FORMAT, "token": token or new_token(), "kind": kind, "whole": True,
                "entries": entries, "generated": list(generated)}
    _write_manifest(directory, manifest)
    return manifest


def record(directory: str, names, kind: str = "files") -> None:
    """List the files ``names`` (relative to ``directory``) ooc has just written there, with their
    content now. A directory without a manifest gets one that lists only them (``whole`` false:
    ooc did not make that directory, and never replaces or deletes it)."""
    directory = os.path.abspath(directory)
    with _locked(directory):
        m = read_manifest(directory) or {"ooc_owned": FORMAT, "token": new_token(), "kind": kind,
                                         "whole": False, "entries": {}, "generated": []}
        for name in names:
            full = os.path.join(directory, name)
            if os.path.isfile(full) and not os.path.islink(full):
                m["entries"][name] = file_entry(full)
                # the directories on the way are ooc's too when the whole directory is
                parent = os.path.dirname(name)
                while parent and m["whole"]:
                    m["entries"].setdefault(parent, {"dir": True})
                    parent = os.path.dirname(parent)
        _write_manifest(directory, m)


def forget(path: str, names=None) -> None:
    """Drop the file ``path`` from its directory's manifest (it was removed, or is about to be rewritten:
    until it is listed again, only a generated name covers it); or, with ``names``, those files (relative
    to the directory ``path``) from ``path``'s own manifest."""
    if names is None:
        path, names = os.path.split(os.path.abspath(path))
        names = [names]
    with contextlib.suppress(OSError, NotOurs), _locked(path):
        m = read_manifest(path)
        if m is not None and any([m["entries"].pop(n, None) is not None for n in names]):
            _write_manifest(path, m)


# -- the rule ----------------------------------------------------------------------------------
def _walk(directory: str):
    """``(relative path, full path, is a directory)`` of every entry under ``directory`` but the
    manifest, parents first, never following a link."""
    for root, dirs, files in os.walk(directory, followlinks=False):
        for name in sorted(dirs) + sorted(files):
            full = os.path.join(root, name)
            rel = os.path.relpath(full, directory)
            if rel == MANIFEST:
                continue
            yield rel, full, name in dirs and not os.path.islink(full)


def _generated(rel: str, patterns) -> bool:
    """Whether ``rel`` matches one of ``patterns`` segment by segment (a ``*`` never crosses a ``/``)."""
    parts = rel.split(os.sep)
    for p in patterns:
        pp = p.split("/")
        if len(pp) == len(parts) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pp)):
            return True
    return False


#: kind -> factory of the verifier of a directory of that kind (:func:`register_verifier`)
_VERIFIERS: dict = {}


def register_verifier(kind: str, factory) -> None:
    """Let ``factory(directory, manifest, contents)`` prove the entries of generated names in directories of
    ``kind``: it returns ``check(rel, full, is_dir)``, which returns None when ``full`` is provably ooc's and
    otherwise one line naming it and saying why. ``contents`` false: checks of content that the caller
    makes itself when it reads the file (a resume verifies the checkpoint it reads) may be skipped.
    The module that writes a kind registers its verifier (a layer above this one)."""
    _VERIFIERS[kind] = factory


def _unproven(rel: str, full: str, is_dir: bool) -> str:
    return f"{full}: has a name ooc generates, but nothing proves ooc wrote it"


def _same(want: dict, got: dict) -> bool:
    """Whether ``got`` (a file's size and CRC-32) is the content ``want`` lists, or the content it replaces
    (``was``: listed before a replacement is renamed into place, :func:`install`)."""
    return any(w and "size" in w and got == {"size": w["size"], "crc": w["crc"]} for w in (want, want.get("was")))


def foreign_entry(path: str, contents: bool = True) -> str | None:
    """Why ``path`` may not be replaced or deleted by ooc (one line naming the entry), or None if it may.

    See the module's docstring for the rule. A path that does not exist is None (nothing to lose).
    ``contents=False``: the verifiers may skip the checks of content the caller makes when it reads the
    files (an update in place: resume verifies the checkpoint it reads).
    """
    path = os.path.abspath(path)
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        return f"{path}: is a symbolic link (ooc never writes through or replaces a link it did not make)"
    try:
        if os.path.isdir(path):
            return _foreign_in_dir(path, contents)
        return _foreign_file(path)
    except NotOurs as exc:
        return str(exc)


def _foreign_file(path: str) -> str | None:
    directory, name = os.path.split(path)
    m = read_manifest(directory)
    want = None if m is None else m["entries"].get(name)
    if not want or "size" not in want:
        return f"{path}: was not written by ooc (not in an ooc manifest)"
    if not _same(want, file_entry(path)):
        return f"{path}: changed since ooc wrote it"
    return None


def _foreign_in_dir(path: str, contents: bool = True) -> str | None:
    m = read_manifest(path)
    if m is None or not m.get("whole"):
        try:
            first = sorted(os.listdir(path))
        except OSError:
            first = []
        first = [n for n in first if n != MANIFEST]
        holds = f" (it holds {', '.join(first[:3])}{', ...' if len(first) > 3 else ''})" if first else ""
        return f"{path}: is a directory ooc did not make (no ooc manifest){holds}"
    entries, generated = m["entries"], m.get("generated") or []
    factory = _VERIFIERS.get(m.get("kind"))
    prove = factory(path, m, contents) if factory is not None and generated else _unproven
    for rel, full, is_dir in _walk(path):
        if os.path.islink(full):
            return f"{full}: is a symbolic link ooc did not make"
        if any(fsutil.is_temporary_name(part) for part in rel.split(os.sep)):
            continue  # a temporary of ooc's, or inside one (a checkpoint being written)
        want = entries.get(rel)
        if want is not None:
            if is_dir != bool(want.get("dir")):
                return f"{full}: is not the {'directory' if want.get('dir') else 'file'} ooc wrote"
            if is_dir or _same(want, file_entry(full)):
                continue
            # rewritten since it was listed (run.json): ooc's only if it proves its new content
            if not _generated(rel, generated) or prove(rel, full, is_dir) is not None:
                return f"{full}: changed since ooc wrote it"
            continue
        if not _generated(rel, generated):
            return f"{full}: was not written by ooc (not in {os.path.join(path, MANIFEST)})"
        why = prove(rel, full, is_dir)
        if why is not None:
            return why
    return None


def check_replaceable(path: str, what: str = "", kind: str | None = None) -> None:
    """Raise :class:`NotOurs` (one line naming the foreign entry) unless ooc may replace or delete ``path``.

    ``kind``: the kind of output replacing it (:data:`KINDS`); ``path`` must then be an output of that
    kind (a command replaces only its own kind of output, never another kind of ooc's artifact).
    """
    why = foreign_entry(path)
    if why is not None:
        verb = f"refusing to replace it{' with ' + what if what else ''}"
        raise NotOurs(f"{why}; {verb} (ooc replaces only what it wrote: remove it yourself or choose another path)")
    if kind is not None and os.path.lexists(path):
        why = _other_kind(os.path.abspath(path), kind)
        if why is not None:
            raise NotOurs(f"{why}; refusing to replace it{' with ' + what if what else ''} (a command replaces only "
                          "an output of its own kind: choose another path)")


#: The kinds of output ooc records (a directory's manifest's ``kind``, a listed file's ``kind``), as a refusal
#: names them: a command replaces only an output of the kind it writes.
KINDS = {"store": "an ooc store", "run": "an ooc run directory", "predictions": "predictions ooc wrote",
         "export": "an ooc export", "batch": "a report ooc batch wrote", "data": "a data file ooc generated"}


def _describe(kind) -> str:
    if kind is None:
        return "a file an older ooc wrote without recording what it is"
    return KINDS.get(kind, f"an ooc {kind}")


def _kind_of_folder(directory: str, m: dict | None) -> str | None:
    """Why no output may be made in ``directory`` (manifest ``m``): it is a whole directory of ooc's, whose
    entries are its own kind's (a store's, a run's); None for a folder of the user's."""
    if m is not None and m.get("whole"):
        return f"is inside {_describe(m.get('kind'))} ({directory}), whose files are its own"
    return None


def check_folder(path: str) -> None:
    """Raise :class:`NotOurs` (one line) when a new output at ``path`` would be made inside a directory of
    ooc's (a store, a run): their entries are their own kind's, listed by their manifest."""
    directory = os.path.dirname(os.path.abspath(path))
    why = _kind_of_folder(directory, read_manifest(directory) if os.path.isdir(directory) else None)
    if why is not None:
        raise NotOurs(f"{path}: {why}; choose another path")


def _other_kind(path: str, kind: str, manifest_path: str | None = None) -> str | None:
    """One line when the ooc output at ``path`` (proven ooc's) is not of ``kind``; None when it is.
    ``manifest_path``: where the directory ``path``'s manifest is now (it was moved aside)."""
    if os.path.isdir(manifest_path or path):
        got = (read_manifest(manifest_path or path) or {}).get("kind")
        return None if got == kind else f"{path}: is {_describe(got)}, not {_describe(kind)}"
    directory, name = os.path.split(path)
    m = read_manifest(directory) or {"entries": {}}
    inside = _kind_of_folder(directory, m)
    if inside is not None:
        return f"{path}: {inside}, not {_describe(kind)}"
    got = (m["entries"].get(name) or {}).get("kind")
    return None if got == kind else f"{path}: is {_describe(got)}, not {_describe(kind)}"


def refuse_to_replace(target: str, what: str, inputs=(), kind: str | None = None) -> None:
    """Raise ``FileExistsError`` (one line) unless the existing ``target`` may be replaced by a new ``what``.

    ``target`` must not be nor contain any of ``inputs`` (the files the new ``what`` is made from), nor be
    the current directory or one of its ancestors, and must be ooc's output of ``kind`` (:func:`check_replaceable`).
    """
    for src in inputs:
        if src is not None and "://" not in str(src) and os.path.lexists(src) and fsutil.contains(target, src):
            same = os.path.realpath(target) == os.path.realpath(src)
            raise FileExistsError(f"{target}: {'is' if same else 'contains'} the input {src}; "
                                  "refusing to replace it (choose another output path)")
    if fsutil.contains(target, os.getcwd()):
        raise FileExistsError(f"{target}: is the current directory or one of its parents; refusing to replace it")
    check_replaceable(target, what, kind)


def check_target(path: str) -> None:
    """Refuse to write at ``path`` through a link: ooc writes only to paths it can own."""
    if os.path.islink(path):
        raise NotOurs(f"{path}: is a symbolic link (ooc never writes through or replaces a link it did not make)")


def remove(path: str) -> None:
    """Delete ``path`` after :func:`check_replaceable`; a file leaves its directory's manifest too."""
    check_replaceable(path)
    is_file = os.path.isfile(path)
    fsutil.remove_tree(path)
    if is_file:
        forget(path)


# -- one writer at a time ------------------------------------------------------------------------
class InUse(FileExistsError):
    """Another live process is replacing or updating the same output (one line naming both)."""


def _lock_path(path: str) -> str | None:
    """The lock file of the output ``path``: in ooc's state directory (``OOC_STATE_DIR``, else
    ``$XDG_STATE_HOME/ooc``, else ``~/.local/state/ooc``; ``locks/``), named by a hash of the path with its
    folder resolved, never beside the output (nothing is added to the user's folder); None where no
    directory for it can be made."""
    import hashlib
    import tempfile

    head, tail = os.path.split(os.path.abspath(path))
    key = hashlib.sha256(os.fsencode(os.path.join(os.path.realpath(head), tail))).hexdigest()[:32]
    base = os.environ.get("OOC_STATE_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state"), "ooc")
    for d in (os.path.join(base, "locks"), os.path.join(tempfile.gettempdir(), f"ooc-{os.getuid()}", "locks")):
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
            return os.path.join(d, key + ".lock")
        except OSError:
            continue
    return None


@contextlib.contextmanager
def exclusive(path: str, what: str):
    """Hold the lock of the output ``path`` (a store being updated in place or replaced) for the block.

    Another process holding it is refused at once, never waited for: :class:`InUse`, one line naming
    ``path`` and the other process (its id and command line, which it writes into the lock file). The
    kernel releases the lock when its process dies, however it dies. Paths that are URLs are not locked.
    """
    import fcntl
    import sys

    lock = None if "://" in os.fspath(path) else _lock_path(path)
    if lock is None:
        yield
        return
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.pread(fd, 512, 0).decode(errors="replace").strip()
            except OSError:
                holder = ""
            raise InUse(f"{path}: is being written by another ooc process ({holder or 'still starting'}); "
                        f"wait for it to finish, then run {what} again") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))}"
                  .encode()[:500], 0)
        yield
    finally:
        os.close(fd)


# -- writing files ooc owns ---------------------------------------------------------------------
@contextlib.contextmanager
def output(path: str, mode: str = "w", overwrite: bool = True, *, kind: str, what: str = ""):
    """Write the file ``path`` whole or not at all and list it in its directory's manifest as an output of
    ``kind``. An existing ``path`` is replaced only when ``overwrite`` and it is ooc's output of ``kind``:
    checked before anything is written, and again when the new file is put in place (:func:`put`).

    Raises
    ------
    NotOurs
        ``path`` is a link, holds a file ooc did not write (or changed since), another kind of ooc's
        output, or is inside a directory of ooc's (a store, a run).
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    """
    check_target(path)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(f"{path}: exists (--overwrite replaces a file ooc wrote)")
        check_replaceable(path, what, kind)
    fsutil.make_parents(path)  # --out a/b makes a/ (a file in the way: one line)
    check_folder(path)  # a store's or a run's folder, which ooc cannot add to: refused before writing
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a directory")
    tmp = fsutil.temporary_sibling(path, "tmp")
    try:
        try:
            f = open(tmp, mode)
        except OSError as exc:  # name the user's path, not our temporary's
            raise type(exc)(exc.errno, exc.strerror, path) from None
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        put(tmp, path, kind, what)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _aside_line(line: str, aside: str, final: str) -> str:
    """A refusal about the content moved aside to ``aside`` names it where the user put it (``final``)."""
    return line.replace(aside, final)


def _foreign_aside(aside: str, final: str, kind: str, listed: dict | None) -> str | None:
    """Why the content just moved from ``final`` to ``aside`` (by :func:`put`'s exchange) is not ooc's output of
    ``kind`` (one line naming the entry at ``final``), or None. ``listed``: ``final``'s entry in its folder's
    manifest before the exchange (a file's proof)."""
    if os.path.islink(aside):
        return f"{final}: is a symbolic link (ooc never writes through or replaces a link it did not make)"
    if os.path.isdir(aside):
        try:
            why = _foreign_in_dir(aside) or _other_kind(final, kind, manifest_path=aside)
        except NotOurs as exc:
            why = str(exc)
        return None if why is None else _aside_line(why, aside, final)
    if not listed or "size" not in listed:
        return f"{final}: was not written by ooc (not in an ooc manifest)"
    if file_entry(aside) != {"size": listed["size"], "crc": listed["crc"]}:
        return f"{final}: changed since ooc wrote it"
    if listed.get("kind") != kind:
        return f"{final}: is {_describe(listed.get('kind'))}, not {_describe(kind)}"
    return None


def put(tmp: str, final: str, kind: str, what: str = "") -> None:
    """Put the complete ``tmp`` (a file or a directory ooc built beside ``final``) at ``final``; what was at
    ``final`` is replaced only if it is still ooc's output of ``kind``, verified at the moment it is replaced.

    The two are exchanged in one step (:func:`ooc.fsutil.swap_into_place`: ``final`` is always the old or
    the new, whole), then the old content, now at a hidden name nobody writes to, is verified by the rule
    (:func:`check_replaceable`): anything the user added or changed until the exchange is seen. If it is not
    ooc's, the two are exchanged back, the new one is removed and :class:`NotOurs` names the entry; if it is,
    it is deleted. A file is put under its folder's lock (other ooc processes writing there wait) and
    listed in the folder's manifest, with ``kind`` and the content it replaces (``was``) before the exchange,
    so that a crash leaves a file the manifest vouches for. The caller checked ``final`` before its work (an
    early refusal) and holds the output's lock where it has one (:func:`exclusive`: a store's).
    """
    final = os.path.abspath(final)
    check_target(final)
    directory, name = os.path.split(final)
    is_dir = os.path.isdir(tmp)
    new = None if is_dir else {**file_entry(tmp), "kind": kind}
    with _locked(directory):
        m = read_manifest(directory)
        listed = None if m is None else m["entries"].get(name)
        inside = _kind_of_folder(directory, m)
        if inside is not None:
            raise NotOurs(f"{final}: {inside}; choose another path")
        if new is not None:
            m = m or {"ooc_owned": FORMAT, "token": new_token(), "kind": "files", "whole": False, "entries": {},
                      "generated": []}
            m["entries"][name] = {**new, "was": {k: listed[k] for k in ("size", "crc")}} \
                if listed and "size" in listed else new
            _write_manifest(directory, m)
        try:
            aside = fsutil.swap_into_place(tmp, final)
            why = None if aside is None else _foreign_aside(aside, final, kind, listed)
        except BaseException:
            if new is not None:
                _relist(directory, m, name, listed)
            raise
        if why is not None:
            if new is not None:
                _relist(directory, m, name, listed)
            _refuse_after_exchange(aside, final, why, what, new)
        if new is not None:
            m["entries"][name] = new
            _write_manifest(directory, m)
        elif listed is not None:  # a directory in place of a listed file (a Zarr store over an HDF5 one)
            m["entries"].pop(name)
            _write_manifest(directory, m)
    if aside is not None:
        fsutil.remove_tree(aside)


def _relist(directory: str, m: dict, name: str, listed: dict | None) -> None:
    """Put back ``name``'s entry as it was before :func:`put` listed the new content."""
    if listed is None:
        m["entries"].pop(name, None)
    else:
        m["entries"][name] = listed
    _write_manifest(directory, m)


def _refuse_after_exchange(aside: str, final: str, why: str, what: str, new: dict | None) -> None:
    """Exchange back what :func:`put` found not to be ooc's, remove the new content, raise :class:`NotOurs`.
    ``new``: the new file's size and CRC-32 (None for a directory, which proves itself by its manifest)."""
    new_at = fsutil.swap_into_place(aside, final)  # the user's content at final again, the new one aside
    if new_at is not None and os.path.lexists(new_at):
        if os.path.islink(new_at):
            changed = True
        elif new is None:
            changed = not os.path.isdir(new_at) or foreign_entry(new_at) is not None
        else:
            changed = not os.path.isfile(new_at) or file_entry(new_at) != {"size": new["size"], "crc": new["crc"]}
        if not changed:
            fsutil.remove_tree(new_at)
        else:  # written into while it was in place: not only ooc's any more, kept where the user sees it
            n, kept = 0, f"{final}.new-{os.getpid()}"
            while os.path.lexists(kept):
                n, kept = n + 1, f"{final}.new-{os.getpid()}-{n + 1}"
            os.rename(new_at, kept)
            why += f" (the new output, changed meanwhile, is kept at {kept})"
    raise NotOurs(f"{why}; refusing to replace it{' with ' + what if what else ''} (it changed while the command "
                  "ran; ooc replaces only what it wrote: remove it yourself or choose another path)")


def install(tmp: str, path: str) -> None:
    """Rename the complete file ``tmp`` to ``path``, listed in its directory's manifest before and after.

    The new content is listed (with the content it replaces as ``was``) before the rename, so that at
    every instant, a crash included, the file at ``path`` is one the manifest vouches for.
    """
    directory, name = os.path.split(os.path.abspath(path))
    new = file_entry(tmp)
    with _locked(directory):
        m = read_manifest(directory)
        if m is not None:
            old = m["entries"].get(name)
            m["entries"][name] = {**new, "was": {k: old[k] for k in ("size", "crc")}} if old and "size" in old else new
            _write_manifest(directory, m)
    os.replace(tmp, path)
    if m is not None:
        with _locked(directory):
            m = read_manifest(directory)
            m["entries"][name] = new
            _write_manifest(directory, m)


def write_bytes(path: str, payload: bytes, overwrite: bool = True, *, kind: str, what: str = "") -> None:
    """:func:`output` of ``payload``."""
    with output(path, "wb", overwrite=overwrite, kind=kind, what=what) as f:
        f.write(payload)

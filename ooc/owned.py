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


def check_replaceable(path: str, what: str = "") -> None:
    """Raise :class:`NotOurs` (one line naming the foreign entry) unless ooc may replace or delete ``path``."""
    why = foreign_entry(path)
    if why is not None:
        verb = f"refusing to replace it{' with ' + what if what else ''}"
        raise NotOurs(f"{why}; {verb} (ooc replaces only what it wrote: remove it yourself or choose another path)")


def refuse_to_replace(target: str, what: str, inputs=()) -> None:
    """Raise ``FileExistsError`` (one line) unless the existing ``target`` may be replaced by a new ``what``.

    ``target`` must not be nor contain any of ``inputs`` (the files the new ``what`` is made from), nor be
    the current directory or one of its ancestors, and must be ooc's (:func:`check_replaceable`).
    """
    for src in inputs:
        if src is not None and "://" not in str(src) and os.path.lexists(src) and fsutil.contains(target, src):
            same = os.path.realpath(target) == os.path.realpath(src)
            raise FileExistsError(f"{target}: {'is' if same else 'contains'} the input {src}; "
                                  "refusing to replace it (choose another output path)")
    if fsutil.contains(target, os.getcwd()):
        raise FileExistsError(f"{target}: is the current directory or one of its parents; refusing to replace it")
    check_replaceable(target, what)


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


# -- writing files ooc owns ---------------------------------------------------------------------
@contextlib.contextmanager
def output(path: str, mode: str = "w", overwrite: bool = True):
    """Write the file ``path`` whole or not at all (:func:`ooc.fsutil.atomic_output`) and list it in its
    directory's manifest. An existing ``path`` is replaced only when ``overwrite`` and ooc wrote it.

    Raises
    ------
    NotOurs
        ``path`` is a link, or holds a file ooc did not write (or changed since).
    FileExistsError
        ``path`` exists and ``overwrite`` is false.
    """
    check_target(path)
    if os.path.lexists(path):
        if not overwrite:
            raise FileExistsError(f"{path}: exists (--overwrite replaces a file ooc wrote)")
        check_replaceable(path)
    fsutil.make_parents(path)  # --out a/b makes a/ (a file in the way: one line)
    read_manifest(os.path.dirname(os.path.abspath(path)))  # one ooc cannot add to: refused before writing
    with fsutil.atomic_output(path, mode) as f:
        yield f
    directory, name = os.path.split(os.path.abspath(path))
    record(directory, [name])


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


def write_bytes(path: str, payload: bytes, overwrite: bool = True) -> None:
    """:func:`output` of ``payload``."""
    with output(path, "wb", overwrite=overwrite) as f:
        f.write(payload)

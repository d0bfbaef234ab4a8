"""How a store's input was read (its *recipe*), and the one reader of new input that follows it.

A store's columns mean what its input's reader made of them: the svmlight id ``j`` is column
``j - index_base``; a VW feature or a raw-text word is the column its hash falls in modulo
``2**hash_bits``; a CSV cell is its position among the feature columns once the label (and
weight) column is taken out. Reading later input any other way gives other columns under the
same numbers, silently. So ``ooc convert`` records the recipe in the store (attribute
:data:`ooc.store.layout.RECIPE`, :meth:`Recipe.as_attr`), training copies it into the model
(``model.json``'s ``meta.input_recipe``), and every later reader of new input (``ooc append``,
``ooc predict``, ``ooc evaluate``, ``ooc train --validation``) goes through
:func:`ooc.store.ingest.open_input` with it. Options the user passes to those commands are checked against it (:func:`follow`):
one that differs is refused with one line naming the option and the recorded value.

Rules for a file read with a recipe (docs/formats.rst, "Input recipe"):

- A recipe of format ``svmlight``, ``csv``, ``vw`` or ``text`` fixes the format: the file is read
  as that format (a file whose name or content says another format is refused, naming the
  recipe's format, unless ``--input-format`` says it), with the recorded index base (a file
  numbered the other way is read with ``--index-base``: same columns), hash bits, text columns and tokenizer, CSV delimiter and label/weight columns, and
  the CSV header's names: a later file's header is matched to them by name (:func:`header_order`). The
  header of a CSV is as ``--header``/``--no-header`` said, for the store's input and every later file;
  without them it is found per file (:func:`ooc.store.input_rules.header_guess`), a first line whose
  numbers count the columns announced as a guess.
- A recipe of format ``npz`` or ``matrix`` (arrays given from Python), and stores without a
  recipe (older ones), have columns that are array positions: new input in any non-hashed
  format is read by its own format (svmlight with the store's ``index_base``, 0 for arrays).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np

from ..kernels.hash_bits import DEFAULT_HASH_BITS, check_hash_bits
from .layout import RECIPE
from .readers import InputError, detect_format

#: Version of the recipe attribute's layout (a dict; new keys may be added, none removed).
RECIPE_VERSION = 1
#: Formats whose columns are hashes (fixed width ``2**hash_bits``).
HASHED = ("vw", "text")
#: Formats whose recipe fixes how every later file is read.
STRICT = ("svmlight", "csv", "vw", "text")
#: File formats a user may name (``--input-format``; raw text is ``--text``).
FILE_FORMATS = ("svmlight", "csv", "npz", "vw", "text")
#: The raw-text tokenizer of :func:`ooc.store.readers.iter_text` (fixed: recorded so that a later
#: ooc with another one refuses instead of hashing other features).
TOKENIZER = "ascii-alnum-lower+bigrams/murmur3-seed0"
#: How :func:`ooc.store.readers.iter_vw` reads VW text (fixed, as :data:`TOKENIZER`).
VW_READER = {"namespaces": "all, hashed with their name as VW does", "constant_feature": False,
             "importance_weights": "sample weights"}
#: ``--index-base``'s values: the recipe's ``index_base_source``.
BASE_FROM_OPTION, BASE_DETECTED, BASE_GUESSED = "option", "detected", "guessed"
#: The ``index_base_source`` of a file read against array columns (a recipe of format ``npz``,
#: ``matrix``, ``generated``) with no ``--index-base``: nothing says which svmlight id is column 0.
BASE_UNRECORDED = "unrecorded"
#: Formats whose columns are array positions: they record no index base for later svmlight ids.
ARRAY_FORMATS = ("npz", "matrix", "generated")


class Options(NamedTuple):
    """What the user said about how to read a file (None: not said).

    ``index_base``: 0, 1 or None (``auto`` on convert). ``text_columns``: ``(label, text)``.
    ``header``: whether a CSV's first line is a header (None: found per file).
    """

    input_format: str | None = None
    index_base: int | None = None
    hash_bits: int | None = None
    text_columns: tuple | None = None
    weight_column: int | None = None
    header: bool | None = None


class Recipe(NamedTuple):
    """How an input was (or is to be) read; :meth:`as_attr` is the store attribute.

    ``format`` None: not known (a store from before recipes were recorded). ``csv_header_source``:
    how ``csv_header`` was decided, ``'option'`` (``--header``/``--no-header``: every later file is
    read so too), else the guess of the file read (:attr:`ooc.store.readers.CsvLayout.header_why`).
    ``csv_names``: the header's names, in column order (None: no header, or a store from before they
    were recorded); a later file with a header is read by them (:func:`header_order`). ``text_names``:
    the same for raw text's header (:func:`text_order`), whether ``--text`` named or numbered its columns.
    """

    format: str | None = None
    index_base: int | None = None
    index_base_source: str | None = None
    hash_bits: int | None = None
    text_columns: tuple | None = None
    csv_delimiter: str | None = None
    csv_label_column: int | None = None
    csv_weight_column: int | None = None
    csv_header: bool | None = None
    dtype: str | None = None
    label_kind: str | None = None
    label_values: list | None = None
    classes: list | None = None
    csv_header_source: str | None = None
    csv_names: tuple | None = None
    text_names: tuple | None = None

    # -- the attribute ------------------------------------------------------------------------
    def as_attr(self) -> dict:
        """The store attribute (JSON): format, index base, hashing, text, CSV, dtype and labels."""
        return {
            "version": RECIPE_VERSION,
            "format": self.format,
            "index_base": self.index_base,
            "index_base_source": self.index_base_source,
            "hash_bits": self.hash_bits,
            "vw": dict(VW_READER) if self.format == "vw" else None,
            "text": ({"label": str(self.text_columns[0]), "text": str(self.text_columns[1]), "tokenizer": TOKENIZER,
                      "names": None if self.text_names is None else list(self.text_names)}
                     if self.format == "text" else None),
            "csv": ({"delimiter": self.csv_delimiter, "label_column": self.csv_label_column,
                     "weight_column": self.csv_weight_column, "header": self.csv_header,
                     "header_source": self.csv_header_source,
                     "names": None if self.csv_names is None else list(self.csv_names)}
                    if self.format == "csv" else None),
            "dtype": self.dtype,
            "label_kind": self.label_kind,
            "label_values": self.label_values,
            "classes": self.classes,
        }

    @classmethod
    def from_attrs(cls, attrs: dict, where: str) -> Recipe:
        """The recipe of a store's attributes (or a model's meta); a store without one gets a recipe of
        unknown format with its ``index_base``, dtype and labels.

        Raises
        ------
        ValueError
            A recipe this ooc cannot follow (a newer version, another tokenizer), naming ``where``.
        """
        r = attrs.get(RECIPE)
        if not r:
            return cls(None, attrs.get("index_base"), None, None, None, None, None, None, None,
                       attrs.get("dtype"), attrs.get("label_kind"), attrs.get("label_values"), attrs.get("classes"))
        if not isinstance(r, dict) or r.get("version") != RECIPE_VERSION:
            raise ValueError(f"{where}: input recipe version {r.get('version') if isinstance(r, dict) else r!r} "
                             f"(attribute {RECIPE!r}) is not one this ooc follows ({RECIPE_VERSION})")
        text = r.get("text") or None
        if text is not None and text.get("tokenizer") != TOKENIZER:
            raise ValueError(f"{where}: its raw text was tokenized by {text.get('tokenizer')!r}, which this ooc "
                             f"does not have ({TOKENIZER!r}); convert the text again")
        csv = r.get("csv") or {}
        return cls(r.get("format"), r.get("index_base"), r.get("index_base_source"), r.get("hash_bits"),
                   (text["label"], text["text"]) if text else None, csv.get("delimiter"), csv.get("label_column"),
                   csv.get("weight_column"), csv.get("header"), r.get("dtype"), r.get("label_kind"),
                   r.get("label_values"), r.get("classes"), csv.get("header_source"),
                   None if csv.get("names") is None else tuple(str(n) for n in csv["names"]),
                   None if not text or text.get("names") is None else tuple(str(n) for n in text["names"]))

    def finished(self, index_base: int | None, zero_based_option, attrs: dict) -> Recipe:
        """This recipe once a conversion is done: the index base it read svmlight ids with (and
        whether it was the option, detected from an id 0, or guessed), the labels it settled."""
        rec = self
        if self.format == "svmlight":
            source = (BASE_FROM_OPTION if zero_based_option != "auto" else
                      BASE_DETECTED if index_base == 0 else BASE_GUESSED)
            rec = rec._replace(index_base=index_base, index_base_source=source)
        elif self.format in ARRAY_FORMATS and zero_based_option in (True, False):
            # array columns have no ids: a base said for them (``convert(X, index_base=1)``: the matrix was
            # read from a 1-based file) is how later svmlight files map onto them, recorded as said
            rec = rec._replace(index_base=0 if zero_based_option else 1, index_base_source=BASE_FROM_OPTION)
        return rec._replace(label_kind=attrs.get("label_kind"), label_values=attrs.get("label_values"),
                            classes=attrs.get("classes"))

    def values_dtype(self) -> np.dtype:
        """The type new input's values are read as: the store's (float64 for a recipe that names none,
        from before dtypes were recorded). Read so, a file's values are rounded as the store made from it
        holds them (the same predictions), and a value that overflows it is refused as convert refuses it."""
        return np.dtype(self.dtype or "float64")

    # -- descriptions ---------------------------------------------------------------------------
    def describe(self) -> str | None:
        """One line on how the input was read (``ooc convert`` and ``ooc info`` print it), e.g.
        ``'svmlight, index base 1 (guessed: no feature id 0 occurs; ...)'``; None when unknown."""
        fmt = self.format
        if fmt == "svmlight":
            why = {BASE_FROM_OPTION: " (--index-base)",
                   BASE_DETECTED: " (detected: a feature id 0 occurs)",
                   BASE_GUESSED: " (guessed: no feature id 0 occurs; if the file is 0-based, convert again "
                                 "with --index-base 0)"}.get(self.index_base_source, "")
            return f"svmlight, index base {self.index_base}{why}"
        if fmt == "vw":
            return f"Vowpal Wabbit text, hashed into 2**{self.hash_bits} columns"
        if fmt == "text":
            return (f"raw text (--text {self.text_columns[0]}:{self.text_columns[1]}), unigrams and bigrams hashed "
                    f"into 2**{self.hash_bits} columns")
        if fmt == "csv":
            w = "" if self.csv_weight_column is None else f", weight column {self.csv_weight_column}"
            return (f"CSV, delimiter {self.csv_delimiter!r}, {header_said(self.csv_header, self.csv_header_source)}, "
                    f"label column {self.csv_label_column}{w}, index base 0 (columns)")
        if fmt in ARRAY_FORMATS:
            said = ("" if self.index_base_source != BASE_FROM_OPTION else
                    f"; svmlight files are read {self.index_base}-based (index_base)")
            return f"{fmt_name(fmt)}, index base 0 (columns){said}"
        if self.index_base is not None:
            return f"index base {self.index_base} (a store without an input recipe)"
        return None


def header_said(header: bool | None, source: str | None) -> str:
    """How a CSV's header was decided, in words, with the option that says otherwise where it was a guess."""
    if source == "option":
        return "a header (--header)" if header else "no header (--no-header)"
    if source == "numbered":
        return ("a header (guessed: its first line's numbers count the columns; if that line is a row of data, "
                "convert with --no-header)")
    if source == "data":
        return "no header (its first line is data; if it names the columns, convert with --header)"
    return "a header" if header else "no header"


def from_options(opts: Options, path: str | None, dtype) -> Recipe:
    """The recipe ``ooc convert`` reads ``path`` with (None: an array or a chunk source).

    ``index_base`` None is ``auto`` (settled by the conversion: :meth:`Recipe.finished`)."""
    if opts.text_columns is not None and opts.input_format not in (None, "text"):
        raise ValueError(f"{path}: text columns are for raw text input, not {opts.input_format}")
    fmt = "text" if opts.text_columns is not None else (opts.input_format or detect_format(path))
    if fmt == "text" and opts.text_columns is None:
        raise ValueError(f"{path}: raw text needs its label and text columns (--text LABEL:TEXT)")
    if opts.weight_column is not None and fmt != "csv":
        raise ValueError(f"{path}: --weight-column is for CSV input (this file is {fmt})")
    if opts.header is not None and fmt != "csv":
        raise ValueError(f"{path}: --{'' if opts.header else 'no-'}header is for CSV input (this file is {fmt})")
    if fmt not in FILE_FORMATS:
        raise ValueError(f"unknown input format {fmt!r}")
    bits = check_hash_bits(opts.hash_bits if opts.hash_bits is not None else DEFAULT_HASH_BITS) \
        if fmt in HASHED else None
    return Recipe(fmt, opts.index_base if fmt == "svmlight" else None, None, bits,
                  tuple(opts.text_columns) if fmt == "text" else None,
                  csv_weight_column=opts.weight_column if fmt == "csv" else None, dtype=str(dtype),
                  csv_header=opts.header if fmt == "csv" else None,
                  csv_header_source="option" if fmt == "csv" and opts.header is not None else None)


def _shown(option: str, value) -> str:
    """An option as the user types it: ``--hash-bits 12``, ``--text label:review``."""
    if option == "--text":
        return f"--text {value[0]}:{value[1]}"
    return f"{option} {value}"


def follow(recipe: Recipe, opts: Options, owner: str) -> Recipe:
    """The recipe to read new input with: ``recipe``, where ``opts`` agree with it.

    Parameters
    ----------
    recipe : Recipe
        How ``owner``'s input was read.
    opts : Options
        What the user passed (None: not passed).
    owner : str
        What the recipe belongs to, for the message (``'the store s.zarr'``, ``'the model of RUN'``).

    Raises
    ------
    ValueError
        One line: the option, its value, and what ``owner`` recorded.
    """
    fmt = recipe.format
    given_fmt = "text" if opts.text_columns is not None else opts.input_format
    if opts.header is not None:
        # whether a file's first line is a header is the file's own: said for it, it holds for it only
        recipe = recipe._replace(csv_header=opts.header, csv_header_source="option")
    elif recipe.csv_header_source != "option":
        recipe = recipe._replace(csv_header=None, csv_header_source=None)  # found per file, as the store's was
    if fmt not in STRICT:
        # array columns (or a store from before recipes): the file is read by its own format, as the user says.
        # Array columns record no index base: an svmlight file's ids map onto them only as --index-base says
        # (open_input refuses one read without it); a store from before recipes keeps the base it recorded
        if opts.index_base is not None:
            base, source = opts.index_base, BASE_FROM_OPTION
        elif fmt in ARRAY_FORMATS and recipe.index_base_source == BASE_FROM_OPTION:
            base, source = recipe.index_base, BASE_FROM_OPTION  # said when the array was converted
        elif fmt in ARRAY_FORMATS:
            base, source = None, BASE_UNRECORDED
        else:
            base, source = recipe.index_base or 0, recipe.index_base_source
        return recipe._replace(format=given_fmt, index_base=base, index_base_source=source,
                               hash_bits=opts.hash_bits, text_columns=opts.text_columns,
                               csv_weight_column=opts.weight_column)
    if opts.header is not None and fmt != "csv":
        raise ValueError(f"--{'' if opts.header else 'no-'}header: {owner}'s input was {fmt_name(fmt)}, which it "
                         "does not apply to")
    if given_fmt is not None and given_fmt != fmt:
        opt = _shown("--text", opts.text_columns) if opts.text_columns is not None else f"--input-format {given_fmt}"
        raise ValueError(f"{opt}: {owner}'s input was {fmt_name(fmt)}; new input is read the same way "
                         "(leave the option out)")
    text = None if opts.text_columns is None else tuple(str(c) for c in opts.text_columns)
    if fmt == "svmlight" and opts.index_base is not None:
        if recipe.index_base_source == BASE_GUESSED and opts.index_base != recipe.index_base:
            # the store's columns are its input's ids less a base that was only a guess: a file said to be
            # numbered otherwise maps onto them only if the guess was right (a 0-based training file
            # without feature 0 is read 1-based: every id of a 0-based new file would land one column off)
            b, rb = opts.index_base, recipe.index_base
            raise ValueError(f"--index-base {b}: {owner}'s index base {rb} was guessed from its input (no id 0 "
                             f"there), so its columns are right only if that input is {rb}-based. If it is {b}-based "
                             f"like this file, convert it again with --index-base {b} (and train again); if it really "
                             f"is {rb}-based, convert it with --index-base {rb} to record that, then pass "
                             f"--index-base {b} here")
        # how this file numbers its features (column = id - base): the recipe's base is the default, and a
        # file numbered the other way, said so, has the same columns
        recipe = recipe._replace(index_base=opts.index_base, index_base_source=BASE_FROM_OPTION)
    checks = (("--index-base", opts.index_base, recipe.index_base, fmt == "svmlight"),
              ("--hash-bits", opts.hash_bits, recipe.hash_bits, fmt in HASHED),
              ("--text", text, recipe.text_columns and tuple(str(c) for c in recipe.text_columns), fmt == "text"),
              ("--weight-column", opts.weight_column, recipe.csv_weight_column, fmt == "csv"))
    for option, given, recorded, applies in checks:
        if given is None or (applies and given == recorded):
            continue
        if not applies:
            raise ValueError(f"{_shown(option, given)}: {owner}'s input was {fmt_name(fmt)}, which {option} "
                             "does not apply to")
        was = _shown(option, recorded) if recorded is not None else f"no {option}"
        raise ValueError(f"{_shown(option, given)}: {owner}'s input was read with {was}; new input is read "
                         "the same way (leave the option out)")
    return recipe


def fmt_name(fmt: str | None) -> str:
    """How messages name an input format (``'CSV'``, ``'Vowpal Wabbit text'``, ...)."""
    return {"svmlight": "svmlight", "csv": "CSV", "npz": "an .npz archive", "vw": "Vowpal Wabbit text",
            "text": "raw text (--text)", "matrix": "an in-memory matrix", "generated": "generated rows (ooc synth)",
            None: "of unknown format"}.get(fmt, str(fmt))


def check_same_columns(ours: Recipe, theirs: Recipe, our_owner: str, their_owner: str) -> None:
    """Refuse a store read another way than ``ours`` (its columns are other features under the same
    numbers): the format family, the index base (where either was guessed), the hash bits, the text
    columns, the CSV columns.
    Recipes of unknown format (stores from before recipes) and array columns are not compared.

    Raises
    ------
    ValueError
        One line naming both and the first difference.
    """
    if ours.format not in STRICT or theirs.format not in STRICT:
        return
    # a column is an id less its file's base, so stores of files numbered otherwise, each base stated or
    # seen (an id 0), have the same columns; a base that was only guessed (no id 0) may be one off
    guessed = BASE_GUESSED in (ours.index_base_source, theirs.index_base_source)
    diffs = (("format", ours.format, theirs.format),
             ("index base", ours.index_base if guessed else None, theirs.index_base if guessed else None),
             ("hash bits", ours.hash_bits, theirs.hash_bits),
             ("text columns", ours.text_columns and tuple(map(str, ours.text_columns)),
              theirs.text_columns and tuple(map(str, theirs.text_columns))),
             ("CSV label column", ours.csv_label_column, theirs.csv_label_column),
             ("CSV weight column", ours.csv_weight_column, theirs.csv_weight_column),
             # header names: compared where both stores recorded names of columns (a store from before has
             # none; a numbered header's names are positions, header_order)
             ("CSV header", *((ours.csv_names, theirs.csv_names) if _named(ours) and _named(theirs) else (None, None))),
             ("text header", *((ours.text_names, theirs.text_names)
                               if None not in (ours.text_names, theirs.text_names) else (None, None))))
    for what, a, b in diffs:
        if a != b and what == "index base":
            who = our_owner if ours.index_base_source == BASE_GUESSED else their_owner
            base = a if who == our_owner else b
            raise ValueError(f"{their_owner}: its input was read with index base {b}, {our_owner}'s with {a}, and "
                             f"{who}'s base {base} was only guessed (no id 0 in its input): convert that input again "
                             "with --index-base 0 or 1, whichever numbers it, so that the two stores' columns are "
                             "known to be the same features")
        if a != b:
            shown = {"format": fmt_name, "CSV header": _header_shown, "text header": _header_shown}.get(what, repr)
            raise ValueError(f"{their_owner}: its input was read with {what} {shown(b)}, but {our_owner}'s with "
                             f"{shown(a)}: its columns are other features (convert its input again as {our_owner}'s "
                             "was)")


def check_file_format(path: str, recipe: Recipe, owner: str, stated: str | None) -> None:
    """Refuse a file that says it is another format than ``recipe``'s, naming the recipe's format (the
    field that differs) rather than what reading it the recipe's way would trip on later.

    ``stated`` is the format the user gave (``--input-format``, ``text`` for ``--text``): a file so
    stated is read as it, whatever its name or content. Otherwise its name's format (its extension),
    or, for a name that says none, its content's (:func:`ooc.store.readers.detect_format`: a ``|``
    is VW, ``id:value`` tokens svmlight, numbers in columns CSV) must be the recipe's. Recipes that
    do not fix a format, and streams (which cannot be read twice), are not checked.

    Raises
    ------
    InputError
        One line naming the file, what it looks like, the recipe's format and ``--input-format``.
    """
    from .readers import format_from_name, is_local, is_stream

    fmt = recipe.format
    if fmt not in STRICT or stated == fmt or is_stream(path):
        return
    named = format_from_name(path)
    seen, how = named, "is named as"
    if named is None and fmt != "text" and is_local(path) and os.path.isfile(path):
        try:
            seen, how = detect_format(path), "looks like"
        except InputError:
            return  # the reader names what is wrong with it
    if seen == fmt == "csv" and recipe.csv_delimiter and is_local(path) and os.path.isfile(path):
        _check_csv_delimiter(path, recipe.csv_delimiter, owner)
    if seen is None or seen == fmt or (fmt == "text" and seen in ("csv", "svmlight")):
        return
    say = "--text LABEL:TEXT" if fmt == "text" else f"--input-format {fmt}"
    raise InputError(path, f"{how} {fmt_name(seen)}, but {owner}'s input recipe says {fmt_name(fmt)} (its format): "
                           f"new input is read that way; convert the file to {fmt_name(fmt)}, or pass {say} if it "
                           "is that")


#: The formats read as text (their parsers would name a binary input's bytes as a bad first line).
TEXT_FORMATS = ("svmlight", "csv", "vw", "text")


def check_not_binary(path: str, fmt: str, owner: str | None) -> None:
    """Refuse reading as text (``fmt``, one of :data:`TEXT_FORMATS`) an input whose start is not text:
    an ``.npz`` piped to ``ooc predict RUN -`` against an svmlight recipe was reported as a bad label on
    line 1. (A format sniffed from the content is never a text format for such an input:
    :func:`ooc.store.readers.detect_format` refuses it.)

    Raises
    ------
    InputError
        One line: the input, what it is (:func:`ooc.store.readers.binary_head`) and what it is read as.
    """
    from .readers import binary_head

    if fmt not in TEXT_FORMATS:
        return
    found = binary_head(path)
    if found is None:
        return
    how = (f"{owner}'s input recipe says {fmt_name(fmt)} (its format): new input is read that way"
           if owner else f"it is read as {fmt_name(fmt)} (as --input-format or its name says)")
    raise InputError(path, f"is {found.kind}, but {how}; give the rows as {fmt_name(fmt)}", line=found.line,
                     column=found.column)


#: The delimiters a CSV file may use, for naming the one a file uses against the recipe's.
CSV_DELIMITERS = (",", "\t", ";", "|")


def _check_csv_delimiter(path: str, delimiter: str, owner: str) -> None:
    """Refuse a CSV file whose first line has none of the recipe's ``delimiter`` but another delimiter:
    read the recipe's way it would be one column of bad cells (the symptom named instead, before)."""
    import gzip

    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8-sig", errors="replace") as f:
            first = next((line for line in f if line.strip()), "")
    except OSError:
        return  # the reader names what is wrong with it
    if delimiter in first:
        return
    other = next((d for d in CSV_DELIMITERS if d != delimiter and d in first), None)
    if other is not None:
        raise InputError(path, f"its cells are separated by {other!r}, but {owner}'s input recipe says CSV separated "
                               f"by {delimiter!r} (its delimiter): new input is read that way; write the file with "
                               f"{delimiter!r} between cells")


def pass_base(b: int) -> str:
    """How a user states the index base ``b`` of a file read for ``predict``/``evaluate``/``append``."""
    return f"pass --index-base {b}"


def check_base_recorded(path: str, recipe: Recipe, owner: str | None, say_base=pass_base) -> None:
    """Refuse reading the svmlight file ``path`` with no index base to read it with
    (:data:`BASE_UNRECORDED`: array columns, no ``--index-base``): 0-based or 1-based would be a
    guess, and the wrong one shifts every feature by one column, silently.

    Raises
    ------
    InputError
        One line naming the file, the recipe's format and the option (``say_base``).
    """
    if recipe.index_base_source != BASE_UNRECORDED:
        return
    whose = f"{owner}'s input" if owner else "the input it follows"
    raise InputError(path, f"svmlight ids: {whose} was an array (in memory, .npz or generated), whose columns "
                           "record no index base (whether column 0 is id 0 or id 1; ooc.convert(X, ..., "
                           "index_base=B) records one): reading this file either way would be a guess; if it is "
                           f"0-based, {say_base(0)}; if 1-based, {say_base(1)}")


def check_path(path: str) -> None:
    """Refuse a local input file that does not exist (one line naming it)."""
    from .readers import is_local

    if is_local(path) and not os.path.exists(path):
        raise InputError(path, "no such file")


def _named(recipe: Recipe) -> bool:
    """Whether ``recipe`` recorded a CSV header whose names name columns (not a numbered one: positions)."""
    return recipe.csv_names is not None and recipe.csv_header_source != "numbered"


def _header_shown(names) -> str:
    """A CSV header's names for a message (the first 20)."""
    more = ", ..." if len(names) > 20 else ""
    return "(" + ", ".join(repr(n) for n in names[:20]) + more + ")"


class HeaderOrder(NamedTuple):
    """Where a new CSV file holds the columns of a recipe's header (:func:`header_order`): its label and
    weight columns (0-based, in the file), and ``features[p]``, the recipe's feature column of the file's
    ``p``-th feature column."""

    label_col: int
    weight_col: int | None
    features: np.ndarray


def header_order(path: str, line: int, names: tuple, recipe: Recipe, owner: str | None) -> HeaderOrder | None:
    """How the CSV file ``path``, whose header (line ``line``) is ``names``, maps onto ``recipe``'s columns,
    recorded by name (``recipe.csv_names``): None when the headers are the same (read by position), a
    :class:`HeaderOrder` when the file has the same names in another order (read by name, exactly).

    Raises
    ------
    InputError
        One line naming the file, the header's line and cell, and both names: a name the recorded header
        lacks (a column renamed or added), a recorded name the file lacks (a column dropped), or, where a
        name occurs twice so that names cannot place the columns, the first cell where the order differs.
    """
    recorded = tuple(recipe.csv_names)
    names = tuple(names)
    if names == recorded:
        return None
    _same_names(path, line, names, recorded, owner)
    where = {n: k for k, n in enumerate(names)}
    label = 0 if recipe.csv_label_column is None else int(recipe.csv_label_column)
    weight = recipe.csv_weight_column
    if weight is not None and weight < 0:
        weight += len(recorded)
    ours = [k for k in range(len(recorded)) if k not in (label, weight)]  # the recipe's feature columns
    theirs_label = where[recorded[label]]
    theirs_weight = None if weight is None else where[recorded[weight]]
    theirs = [k for k in range(len(names)) if k not in (theirs_label, theirs_weight)]
    feature_of = {recorded[k]: f for f, k in enumerate(ours)}
    features = np.array([feature_of[names[k]] for k in theirs], dtype=np.int64)
    return HeaderOrder(theirs_label, theirs_weight, features)


def _same_names(path: str, line: int, names: tuple, recorded: tuple, owner: str | None) -> None:
    """Refuse a header ``names`` (line ``line`` of ``path``) whose names are not ``recorded``'s, each once, in
    any order: the rule of :func:`header_order` and :func:`text_order`, written once.

    Raises
    ------
    InputError
        One line naming the file, the header's line and cell, and both names.
    """
    whose = f"{owner}'s input" if owner else "the input it follows"
    said = f"new input's columns are found by the names of its header {_header_shown(recorded)}"
    for i, name in enumerate(names):
        if name not in recorded:
            there = f" (its column {i + 1} was {recorded[i]!r})" if i < len(recorded) else ""
            raise InputError(path, f"column {i + 1} is named {name!r}, but {whose} has no column of that name"
                                   f"{there}; {said}", line=line, column=i + 1)
    for j, name in enumerate(recorded):
        if name not in names:
            here = f", this file's column {j + 1} is {names[j]!r}" if j < len(names) else ""
            raise InputError(path, f"no column named {name!r} ({whose}'s column {j + 1}{here}); {said}", line=line)
    if len(set(names)) < len(names) or len(set(recorded)) < len(recorded):
        i = next((k for k, (a, b) in enumerate(zip(names, recorded)) if a != b), None)
        twice = "a name occurs twice in a header, so names cannot place the columns"
        if i is None:
            raise InputError(path, f"this header has {len(names)} columns and {whose} had {len(recorded)}, and {twice}; "
                                   f"{said}", line=line)
        raise InputError(path, f"column {i + 1} is named {names[i]!r}, but {whose}'s column {i + 1} is "
                               f"{recorded[i]!r}, and {twice}: write them in the order of {whose}", line=line,
                         column=i + 1)


def text_order(path: str, line: int, names: tuple, recipe: Recipe, owner: str | None) -> tuple[int, int] | None:
    """Where a new raw-text file, whose header (line ``line``) is ``names``, holds the label and the text of
    ``recipe``'s header (``recipe.text_names``, its label and text placed by ``recipe.text_columns``, numbers or
    names): None when the headers are the same (read as ``--text`` says), else ``(label, text)``, the file's
    0-based columns of the recorded label's and text's names (the same names in another order are read by
    name, as a CSV's are, :func:`header_order`).

    Raises
    ------
    InputError
        As :func:`header_order`: a name renamed, added or dropped, or one twice where the order differs.
    """
    recorded = tuple(recipe.text_names)
    names = tuple(names)
    if names == recorded:
        return None
    _same_names(path, line, names, recorded, owner)
    where = {n: k for k, n in enumerate(names)}

    def placed(spec) -> int:
        # the recorded header's column that --text designated (a number, else its name), found here by name
        spec = str(spec).strip()
        return where[recorded[int(spec)] if spec.lstrip("-").isdigit() else spec]
    return placed(recipe.text_columns[0]), placed(recipe.text_columns[1])

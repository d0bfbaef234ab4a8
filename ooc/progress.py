"""Progress reporting: a tqdm bar on a terminal, silence in pipes unless verbose."""

from __future__ import annotations

import sys


def wanted(verbose: bool = False) -> bool:
    """Show progress when stderr is a terminal, or when asked to with ``-v``."""
    return verbose or sys.stderr.isatty()


class ConvertProgress:
    """Turns ``convert`` progress dicts into tqdm bars (bytes read, then transpose)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.phase = None
        self.by_rows = False

    def __call__(self, ev: dict) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        phase = ev.get("phase")
        if phase != self.phase:
            self.close()
            self.phase = phase
            # rows read from a file count its bytes; a generated source's (synth, arrays) count rows
            self.by_rows = phase == "rows" and not ev.get("total") and not ev.get("bytes")
            if self.by_rows:
                self.bar = tqdm(total=ev.get("total_rows"), unit="row", unit_scale=True, desc="rows",
                                file=sys.stderr, leave=False)
            elif phase == "rows":
                self.bar = tqdm(total=ev.get("total"), unit="B", unit_scale=True, desc="parse",
                                file=sys.stderr, leave=False)
            elif phase in ("transpose", "assemble"):
                self.bar = tqdm(total=ev.get("total"), unit="block", desc=phase, file=sys.stderr, leave=False)
        if self.bar is None:
            return
        if phase == "rows" and self.by_rows:
            self.bar.n = ev.get("rows") or 0
            self.bar.refresh()
        elif phase == "rows":
            self.bar.n = ev.get("bytes") or 0
            self.bar.set_postfix(rows=ev.get("rows"), refresh=False)
            self.bar.refresh()
        elif "done" in ev:
            self.bar.n = ev["done"]
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def gap_fraction(first: float, gap: float, tol: float) -> float:
    r"""How far training is from its first certified gap to ``--tol``, on a log scale.

    ``log(first / gap) / log(first / tol)`` clipped to ``[0, 1]``: each factor of 10 the relative
    gap shrinks moves the bar by the same length (the gap falls geometrically under a linear rate,
    so the bar moves about evenly in time); 1 once ``gap <= tol``.
    """
    import math

    if not (gap > tol) or gap <= 0:
        return 1.0
    if not (first > tol) or not math.isfinite(first):
        return 0.0
    return min(1.0, max(0.0, math.log(first / gap) / math.log(first / tol)))


class EpochProgress:
    """A tqdm bar of ``train`` / ``resume``: the relative gap against ``--tol`` (log scale, from the
    first gap of this session), the epoch of ``--max-epochs``, and MB/s of the epochs that read the
    store (none once the rows are all in the cache); silent when disabled."""

    STEPS = 1000  # bar resolution

    def __init__(self, enabled: bool, tol: float | None, max_epochs: int | None):
        self.bar = None
        self.tol, self.max_epochs = tol, max_epochs
        self.first = None
        if enabled:
            from tqdm import tqdm

            # the gap, epoch and speed are the description, after the bar (tqdm's postfix would start with ", ")
            self.bar = tqdm(total=self.STEPS, file=sys.stderr, leave=False,
                            bar_format="train: {percentage:3.0f}%|{bar}| {desc} [{elapsed}]")

    def __call__(self, h: dict) -> None:
        if self.bar is None:
            return
        gap = float(h["rel_gap"])
        if self.first is None:
            self.first = gap
        shown = [f"gap {gap:.2e}" + (f" -> tol {self.tol:g}" if self.tol else "")]
        shown.append(f"epoch {h['epoch']}" + (f"/{self.max_epochs}" if self.max_epochs else ""))
        if h.get("mb_per_s"):  # the epoch read from the store (0 or None: served from the cache)
            shown.append(f"{h['mb_per_s']:.3g} MB/s")
        if self.tol:
            self.bar.n = round(self.STEPS * gap_fraction(self.first, gap, self.tol))
        self.bar.set_description_str(", ".join(shown), refresh=False)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


class RowsProgress:
    """A tqdm bar of ``predict`` / ``evaluate``: rows of a store (or an .npz), or the input bytes of a
    text file, as :func:`ooc.evaluate.progress_event` reports them; silent when disabled."""

    def __init__(self, enabled: bool, desc: str):
        import time

        self.enabled, self.desc = enabled, desc
        self.bar = None
        self.t0 = time.time()  # the rate counts from the start of reading, not from the first piece

    def __call__(self, ev: dict) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=ev["total"] or None, unit=ev["unit"], unit_scale=True, desc=self.desc,
                            file=sys.stderr, leave=False)
            self.bar.start_t = self.t0
        if ev["unit"] != "rows":
            self.bar.set_postfix(rows=ev["rows"], refresh=False)
        self.bar.update(ev["done"] - self.bar.n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

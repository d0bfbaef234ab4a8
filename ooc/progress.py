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


def echo(line: str) -> None:
    """Write one line to stderr above any progress bar there: the bar is cleared, the line written
    whole, the bar drawn again below it (a line written plainly would be glued to the bar's text)."""
    tqdm = sys.modules.get("tqdm")  # no bar was ever made without tqdm imported
    if tqdm is not None and getattr(tqdm.tqdm, "_instances", None):
        tqdm.tqdm.write(line, file=sys.stderr)
    else:
        import click

        click.echo(line, err=True)


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


class EpochProgress:
    """A tqdm bar of ``train`` / ``resume``: the relative gap against ``--tol`` (log scale, from the
    first gap of this session), the epoch of ``--max-epochs``, MB/s of the epochs that read the store
    (none once the rows are all in the cache), and an estimate of the time left; silent when disabled.

    The bar moves inside an epoch too (:meth:`within`, the share of the epoch's groups, blocks or
    steps done): by that share of the last epoch's step on the gap's log scale. It never moves back
    within a run: a certificate whose gap is above what the bar already shows (gaps are not
    monotone: acc-sdca's momentum, a pass that fell short of the step expected of it) holds the
    bar where it is until the gap passes that point. The time left is
    ``epochs left x seconds per epoch`` (both of this session), less the current epoch's share done;
    the epochs left are the fewer of ``--max-epochs`` less the epoch, and, once two gaps are known
    and the gap falls, ``log(gap / tol) / r``, ``r`` the mean decrease of ``log(gap)`` per epoch so far.
    """

    STEPS = 1000  # bar resolution

    def __init__(self, enabled: bool, tol: float | None, max_epochs: int | None):
        import time

        self.bar = None
        self.tol, self.max_epochs = tol, max_epochs
        self.first = None  # (epoch, gap) of the first certificate of this session
        self.last = None  # (epoch, gap) of the latest
        self.t0 = time.perf_counter()
        self.t_first = self.t_last = None  # when the first and latest certificates came
        self.shown = ""
        self.high = 0  # the furthest the bar has been (it never moves back)
        if enabled:
            from tqdm import tqdm

            # the gap, epoch and speed are the description, after the bar (tqdm's postfix would start with ", ")
            self.bar = tqdm(total=self.STEPS, file=sys.stderr, leave=False,
                            bar_format="train: {percentage:3.0f}%|{bar}| {desc} [{elapsed}]")

    def _fraction(self, gap: float) -> float:
        if self.tol:
            return gap_fraction(self.first[1], gap, self.tol)
        if self.max_epochs:
            return min(1.0, self.last[0] / self.max_epochs)
        return 0.0

    def _rate(self) -> float | None:
        """Mean decrease of ``log(gap)`` per epoch in this session (None: unknown, or not falling)."""
        import math

        (e0, g0), (e1, g1) = self.first, self.last
        if e1 <= e0 or not (g0 > 0 and g1 > 0):
            return None
        r = math.log(g0 / g1) / (e1 - e0)
        return r if r > 0 else None

    def epochs_left(self) -> float | None:
        """Epochs to the end as the estimate sees them (None: no limit and no rate)."""
        import math

        if self.last is None:  # nothing certified yet in this session
            return None
        e, gap = self.last
        left = [self.max_epochs - e] if self.max_epochs else []
        r = self._rate()
        if self.tol and gap <= self.tol:
            return 0.0
        if self.tol and r is not None:
            left.append(math.log(gap / self.tol) / r)
        return max(0.0, min(left)) if left else None

    def seconds_per_epoch(self) -> float | None:
        if self.t_last is None:
            return None
        e0, e1 = self.first[0], self.last[0]
        if e1 > e0:
            return (self.t_last - self.t_first) / (e1 - e0)
        return self.t_last - self.t0  # one epoch known: the first one (with the set-up)

    def eta(self, fraction: float = 0.0) -> float | None:
        """Seconds left, ``fraction`` of the current epoch done (None: not known yet)."""
        left, per = self.epochs_left(), self.seconds_per_epoch()
        if left is None or per is None:
            return None
        return max(0.0, (left - fraction if left >= 1 else left) * per)

    def __call__(self, h: dict) -> None:
        import time

        gap = float(h["rel_gap"])
        now = time.perf_counter()
        if self.first is None:
            self.first, self.t_first = (int(h["epoch"]), gap), now
        self.last, self.t_last = (int(h["epoch"]), gap), now
        if self.bar is None:
            return
        shown = [f"gap {gap:.2e}" + (f" -> tol {self.tol:g}" if self.tol else "")]
        shown.append(f"epoch {h['epoch']}" + (f"/{self.max_epochs}" if self.max_epochs else ""))
        if h.get("mb_per_s"):  # the epoch read from the store (0 or None: served from the cache)
            shown.append(f"{h['mb_per_s']:.3g} MB/s")
        self.shown = ", ".join(shown)
        self._move(self._fraction(gap))
        self._describe(0.0)

    def _move(self, fraction: float) -> None:
        """Put the bar at ``fraction`` of its length, or leave it where it is if it has been further."""
        self.high = max(self.high, round(self.STEPS * min(1.0, max(0.0, fraction))))
        self.bar.n = self.high

    def _describe(self, fraction: float) -> None:
        eta = self.eta(fraction)
        self.bar.set_description_str(self.shown + (f", ETA {_duration(eta)}" if eta is not None else ""),
                                     refresh=False)
        self.bar.refresh()

    def within(self, epoch: int, fraction: float) -> None:
        """The share ``fraction`` of the epoch after ``epoch`` certified states is done: the bar moves
        by that share of one epoch's expected step (1 / max-epochs, without a rate or a tol)."""
        if self.bar is None:
            return
        base = self._fraction(self.last[1]) if self.last is not None else 0.0
        step = 0.0
        if self.tol and self.first is not None:
            import math

            r = self._rate()
            span = math.log(self.first[1] / self.tol) if self.first[1] > self.tol else 0.0
            if r is not None and span > 0:
                step = r / span
            elif self.max_epochs:
                step = (1.0 - base) / max(1, self.max_epochs - self.last[0])
        elif self.max_epochs:
            step = 1.0 / self.max_epochs
        self._move(base + fraction * step)
        if self.last is None:
            self.shown = f"epoch {epoch}" + (f"/{self.max_epochs}" if self.max_epochs else "")
        self._describe(fraction)

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

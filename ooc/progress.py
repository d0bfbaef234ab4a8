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

    def __call__(self, ev: dict) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        phase = ev.get("phase")
        if phase != self.phase:
            self.close()
            self.phase = phase
            if phase == "rows":
                self.bar = tqdm(total=ev.get("total"), unit="B", unit_scale=True, desc="parse",
                                file=sys.stderr, leave=False)
            elif phase in ("transpose", "assemble"):
                self.bar = tqdm(total=ev.get("total"), unit="block", desc=phase, file=sys.stderr, leave=False)
        if self.bar is None:
            return
        if phase == "rows":
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

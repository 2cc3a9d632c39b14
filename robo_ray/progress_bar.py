"""The CLI's progress bar on a terminal (tqdm): the Convert stage's episodes with their rate and ETA, frames per
second and quarantined episodes, moved once per episode (robo_ray/stages/progress.py). While it is shown, every
line written to stderr (quarantine lines, warnings, log records, Ray's forwarded lines) is printed above the bar
with `tqdm.write`, never through it."""
from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Any, Iterator, TextIO

from robo_ray.stages.progress import Progress

if TYPE_CHECKING:  # tqdm is imported when a bar is made (a terminal): a job's log has none (~0.05 CPU s)
    from tqdm import tqdm

SMOOTHING = 0.3  # tqdm's moving average of the rate (0 = average since the start, 1 = the last episode only)


class LinesAbove(io.TextIOBase):
    """A text stream whose complete lines go above the bar (`tqdm.write` on the terminal)."""

    def __init__(self, terminal: TextIO) -> None:
        from tqdm import tqdm

        self.terminal = terminal
        self._partial = ""
        self._write = tqdm.write

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def write(self, s: str) -> int:
        *lines, self._partial = (self._partial + s).split("\n")
        for line in lines:
            self._write(line, file=self.terminal)
        return len(s)

    def flush(self) -> None:
        if self._partial:
            self._write(self._partial, file=self.terminal)
            self._partial = ""


class ProgressBar:
    """`__call__(Progress)` draws the convert bar; `lines_above()` routes stderr above it while the run lasts."""

    def __init__(self, terminal: TextIO) -> None:
        from tqdm import tqdm

        self._tqdm = tqdm
        self.terminal = terminal
        self.bar: tqdm | None = None
        self.t0 = 0.0
        self.frames0 = 0

    def __call__(self, p: Progress) -> None:
        if self.bar is None:
            if p.final:
                return
            # `initial`: episodes a resumed run had already converted do not count in the rate
            width = _columns(self.terminal)  # a terminal that reports no size (0) gets 100 columns
            self.bar = self._tqdm(total=p.episodes_total, initial=p.episodes, unit="ep", desc="convert",
                            file=self.terminal, smoothing=SMOOTHING, mininterval=0.1, dynamic_ncols=bool(width),
                            ncols=None if width else 100)
            self.t0, self.frames0 = time.monotonic(), p.frames
        dt = time.monotonic() - self.t0
        fps = (p.frames - self.frames0) / dt if dt > 0 and p.frames > self.frames0 else 0.0
        self.bar.set_postfix_str(f"{fps:.0f} frames/s, {p.quarantined} quarantined", refresh=False)
        self.bar.update(p.episodes - self.bar.n)
        if p.final:
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    @contextlib.contextmanager
    def lines_above(self) -> Iterator[TextIO]:
        """stderr (sys.stderr and robo-ray's log handlers) printed above the bar; yields the stream to use."""
        above = LinesAbove(self.terminal)
        handlers = [h for h in logging.getLogger("robo_ray").handlers
                    if isinstance(h, logging.StreamHandler) and h.stream is self.terminal]
        for h in handlers:
            h.setStream(above)
        try:
            with contextlib.redirect_stderr(above):
                yield above
        finally:
            above.flush()
            self.close()
            for h in handlers:
                h.setStream(self.terminal)


def _columns(stream: Any) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return 0


def progress_bar(stream: Any = None) -> ProgressBar | None:
    """A bar on a terminal; None otherwise (plain periodic status lines, as job logs want)."""
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return ProgressBar(stream) if tty else None

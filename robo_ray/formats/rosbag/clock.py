"""The steps of a bag episode: a clock of ticks and every topic sampled as-of each tick (format-free numpy).

The rule (README "ROS bags"): times are integer nanoseconds. The window runs from the first time every data topic
has a message (the latest of their first messages) to the last (the earliest of their last messages). Ticks are
`start + round(k * 1e9 / fps)` for k = 0, 1, ... while <= end (`--fps`), or the messages of a reference topic that
lie in the window. Each topic gives, at tick t, its latest message at or before t (of equal times the last
recorded). A topic's nominal period P is the median interval between its messages. A tick is *filled* when its
message is at least P old and the topic's next message came more than 1.5 P after it (a dropped message: the
previous one is used, and counted). A tick whose message is older than the maximum skew (default 2 P per topic) is a
*gap*: the episode is quarantined, or with `on_gap: hold` the previous message is kept and counted.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

GAP_FACTOR = 1.5  # an interval over 1.5 x the nominal period misses at least one message
DEFAULT_SKEW_PERIODS = 2.0  # default maximum skew: 2 nominal periods (one dropped message is filled)


def nominal_period(times: np.ndarray) -> int | None:
    """The median interval (ns) between a topic's messages; None with fewer than two or all at one time."""
    if len(times) < 2:
        return None
    p = int(np.median(np.diff(times)))
    return p if p > 0 else None


def first_decrease(times: np.ndarray) -> int | None:
    """The index of the first message whose time is earlier than the one before it, or None."""
    bad = np.flatnonzero(np.diff(times) < 0)
    return int(bad[0]) + 1 if len(bad) else None


def gaps(times: np.ndarray, period: int | None) -> np.ndarray:
    """Indices i where the interval times[i] -> times[i+1] is over GAP_FACTOR periods (messages missing)."""
    if period is None:
        return np.zeros(0, np.int64)
    return np.flatnonzero(np.diff(times) > GAP_FACTOR * period)


def window(times: dict[str, np.ndarray]) -> tuple[int, int] | None:
    """(start, end): the latest first message and the earliest last message over the topics; None when a topic
    has no message or the window is empty."""
    if not times or any(len(t) == 0 for t in times.values()):
        return None
    start = max(int(t[0]) for t in times.values())
    end = min(int(t[-1]) for t in times.values())
    return (start, end) if end >= start else None


def fps_ticks(start: int, end: int, fps: float) -> np.ndarray:
    """start + round(k * 1e9 / fps) for k = 0, 1, ... while <= end."""
    n = int(np.floor((end - start) * fps / 1e9 + 1e-9)) + 1
    ticks = start + np.rint(np.arange(n + 1) * (1e9 / fps)).astype(np.int64)
    return ticks[ticks <= end]


def reference_ticks(ref: np.ndarray, start: int, end: int) -> np.ndarray:
    """The reference topic's message times inside [start, end]."""
    return ref[(ref >= start) & (ref <= end)].astype(np.int64)


@dataclass
class Sampled:
    """One topic sampled at the ticks: the message index per tick, and what the rule counted."""

    index: np.ndarray  # int64, message index per tick
    filled: int = 0  # ticks served by the previous message because the next one is missing
    held: int = 0  # ticks beyond the skew kept anyway (on_gap: hold)
    worst_age: int = 0  # the oldest message used (ns)
    beyond: list[tuple[int, int]] = field(default_factory=list)  # (tick, age) of the first gap beyond the skew


def sample(times: np.ndarray, ticks: np.ndarray, max_skew: int | None, period: int | None) -> Sampled:
    """The as-of rule for one topic (times non-decreasing). `max_skew` None: DEFAULT_SKEW_PERIODS x `period`
    (no limit when the period is unknown)."""
    idx = np.searchsorted(times, ticks, side="right") - 1
    if len(idx) and idx.min() < 0:
        raise ValueError("a tick before the topic's first message")
    out = Sampled(idx.astype(np.int64))
    if not len(idx):
        return out
    age = ticks - times[idx]
    out.worst_age = int(age.max())
    if period is not None:
        nxt = np.append(times[1:], np.iinfo(np.int64).max)[idx]
        out.filled = int(np.count_nonzero((age >= period) & (nxt - times[idx] > GAP_FACTOR * period)))
    limit = max_skew if max_skew is not None else (None if period is None else int(DEFAULT_SKEW_PERIODS * period))
    if limit is not None:
        over = np.flatnonzero(age > limit)
        out.held = len(over)
        if len(over):
            out.beyond = [(int(ticks[over[0]]), int(age[over[0]]))]
    return out

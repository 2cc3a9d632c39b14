"""One pass over a bag's messages (times in the chosen base, values where asked) and the episode's steps from the
clock rule (clock.py): the ticks, each topic's message per tick, and the rule's counts or the episode's error."""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from robo_ray.errors import DataCorrupt, DataMissing, EpisodeError, EpisodeTooLarge
from robo_ray.formats.rosbag import clock
from robo_ray.formats.rosbag.bags import Bag, has_header, header_stamp
from robo_ray.formats.rosbag.errors import GapBeyondSkew, TimeGoesBack
from robo_ray.safety import MAX_EPISODE_LENGTH


@dataclass
class TopicData:
    """One topic of one bag: receive times, the times the clock uses (header stamps or receive times), the first
    message (deserialised) and, where asked, every message's value."""

    log: list[int] = field(default_factory=list)
    time: list[int] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)
    first: Any = None
    stamped: bool = False  # times are header stamps
    unset: bool = False  # every header stamp was 0 (never set by the publisher): receive times are used

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return np.asarray(self.log, np.int64), np.asarray(self.time, np.int64)


def read_topics(bag: Bag, topics: list[str], stamps: str, values: dict[str, Callable[[Any], Any]],
                first_of: set[str] = frozenset()) -> dict[str, TopicData]:
    """Every message of `topics` in receive order: its times; `values[topic](msg)` for the topics named there;
    the first message deserialised for `first_of`. Header stamps are read from the raw bytes (no deserialising); a
    topic whose stamps are all 0 (its publisher never set them) takes its receive times instead (`unset`)."""
    out = {t: TopicData(stamped=stamps == "header" and has_header(bag.typestore, bag.msgtype(t))) for t in topics
           if t in bag.connections}
    for topic, t, raw in bag.messages(list(out)):
        data = out[topic]
        data.log.append(t)
        try:
            data.time.append(header_stamp(raw, bag.ros1) if data.stamped else t)
        except struct.error:
            raise DataCorrupt(f"{bag.where}: a {topic} message of {len(raw)} bytes is too short for its header "
                              "stamp") from None
        if topic in values or (topic in first_of and data.first is None):
            msg = bag.deserialize(raw, topic)
            if data.first is None:
                data.first = msg
            if topic in values:
                data.values.append(values[topic](msg))
        if len(data.log) > MAX_EPISODE_LENGTH:
            raise EpisodeTooLarge(f"{bag.where}: {topic} has over {MAX_EPISODE_LENGTH} messages")
    for data in out.values():
        if data.stamped and data.time and not any(data.time):  # a publisher that never set header.stamp
            data.time, data.stamped, data.unset = list(data.log), False, True
    return out


@dataclass
class StepPlan:
    """The steps of one episode: tick times, each data topic's message index per tick, the rule's counts, and the
    error that quarantines the episode (None when it converts)."""

    ticks: np.ndarray
    sampled: dict[str, clock.Sampled]
    error: EpisodeError | None = None

    @property
    def length(self) -> int:
        return 0 if self.error is not None else len(self.ticks)


@dataclass(frozen=True)
class ClockRule:
    """How steps are made (the reader's options): `fps` ticks, or the `reference` topic's messages; the maximum
    skew (ns, None: 2 periods per topic); `on_gap` "quarantine" or "hold"."""

    fps: float | None
    reference: str | None
    max_skew: int | None
    on_gap: str

    def describe(self) -> str:
        tick = f"every 1/{self.fps:g} s" if self.reference is None else f"at each {self.reference} message"
        skew = "2 x each topic's median interval" if self.max_skew is None else f"{self.max_skew / 1e9:g} s"
        return f"a step {tick}; topics sampled as-of the step within {skew}; on a gap: {self.on_gap}"


def plan_steps(times: dict[str, np.ndarray], rule: ClockRule, where: str) -> StepPlan:
    """The steps from the data topics' times (non-decreasing, else TimeGoesBack), by the clock rule."""
    empty = StepPlan(np.zeros(0, np.int64), {})
    for topic, t in times.items():
        bad = clock.first_decrease(t)
        if bad is not None:
            empty.error = TimeGoesBack(f"{where}: {topic} times go back at message {bad} "
                                       f"({t[bad - 1]} -> {t[bad]} ns)")
            return empty
    span = clock.window(times)
    if span is None:
        missing = [k for k, t in times.items() if not len(t)]
        empty.error = DataMissing(f"{where}: " + (f"no {', '.join(missing)} messages" if missing else
                                                  "no time at which every mapped topic has data" + _clock_hint(times)))
        return empty
    start, end = span
    if rule.reference is None:
        assert rule.fps
        ticks = clock.fps_ticks(start, end, rule.fps)
    else:
        ticks = clock.reference_ticks(times[rule.reference], start, end)
    plan = StepPlan(ticks, {})
    for topic, t in times.items():
        s = plan.sampled[topic] = clock.sample(t, ticks, rule.max_skew, clock.nominal_period(t))
        if s.beyond and rule.on_gap == "quarantine" and plan.error is None:
            tick, age = s.beyond[0]
            plan.error = GapBeyondSkew(f"{where}: {topic} has no message for {age / 1e9:.3f} s before step "
                                       f"{int(np.searchsorted(ticks, tick))} (t={(tick - start) / 1e9:.3f} s), "
                                       f"over the maximum skew; on_gap=hold keeps the previous message")
    return plan


def _clock_hint(times: dict[str, np.ndarray]) -> str:
    """A hint when the topics' times lie on clocks an hour or more apart (header stamps in simulation time,
    receive times in wall time): receive times throughout put them on one clock."""
    firsts = [int(t[0]) for t in times.values() if len(t)]
    if firsts and max(firsts) - min(firsts) >= 3600 * 10**9:
        return (" (their times are hours apart: header stamps and receive times on different clocks? "
                "--set source.options.stamps=log uses receive times throughout)")
    return ""

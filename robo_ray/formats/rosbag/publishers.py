"""Several publishers on one JointState topic (an arm driver's 7 joints and a gripper driver's 1 on /joint_states, as
ros2_control and most real robots record them), merged by joint name.

Each publisher is told apart by the set of joint names its messages carry. When the first bag's messages on a
JointState topic carry more than one set and the sets share no joint, the topic is read as its publishers: each is
a stream of its own for the clock (its own times, rate, gaps and skew: `/joint_states[joint_0..joint_6]`), sampled
as-of each step on its own, and a step's value is the publishers' values side by side in their first messages'
order (joint names in the order each publisher's first message lists them; a later message listing them in another
order is put back in that order; a publisher that never sets its header stamps takes its receive times). A part
(position / velocity / effort) is taken from the publishers whose first message has it. Sets that overlap cannot be
merged (which value would a shared joint take?), nor a publisher whose messages vary in size: the topic is left out
with its reason. A later bag with a set the first bag did not have quarantines that episode with its line.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from robo_ray.errors import DataCorrupt
from robo_ray.formats.rosbag.messages import JOINT_PARTS, Layout, joint_names
from robo_ray.formats.rosbag.steps import TopicData


def joint_values(msg: Any) -> tuple[tuple[str, ...], dict[str, np.ndarray]]:
    """A JointState message's joint names and its parts (float64)."""
    return (joint_names(msg),
            {p: np.asarray(getattr(msg, p), dtype=np.float64).ravel() for p in JOINT_PARTS})


def stream_name(topic: str, joints: Sequence[str]) -> str:
    """How a publisher of `topic` is named (clock, findings, errors): the topic and its first and last joint."""
    label = joints[0] if len(joints) == 1 else f"{joints[0]}..{joints[-1]}"
    return f"{topic}[{label}]"


@dataclass(frozen=True)
class Publishers:
    """The publishers of one JointState topic: each one's joint names (in its first message's order, publishers in
    the order their first messages came) and, per part, the publishers whose first message has it."""

    topic: str
    groups: tuple[tuple[str, ...], ...]
    parts: dict[str, tuple[int, ...]]

    @property
    def streams(self) -> list[str]:
        return [stream_name(self.topic, g) for g in self.groups]

    def names(self, part: str) -> tuple[str, ...]:
        """The joint names of a part's merged value, in order."""
        return tuple(n for k in self.parts[part] for n in self.groups[k])

    def describe(self) -> str:
        joints = "; ".join(", ".join(g) if len(g) <= 3 else f"{g[0]} .. {g[-1]} ({len(g)})" for g in self.groups)
        return (f"{len(self.groups)} publishers ({joints}) merged by joint name into one value of "
                f"{sum(len(g) for g in self.groups)} joints, each publisher sampled as-of the step on its own")

    def split(self, data: TopicData, where: str) -> dict[str, TopicData]:
        """Each publisher's messages (stream name -> its data) from the topic's, whose values are (joint names,
        payload); a payload of parts is put in the publisher's joint order. A publisher whose header stamps are all
        0 (never set) takes its receive times, as a topic's would."""
        by_set = {frozenset(g): k for k, g in enumerate(self.groups)}
        streams = self.streams
        out = {name: TopicData(stamped=data.stamped, unset=data.unset) for name in streams}
        for lt, t, (names, payload) in zip(data.log, data.time, data.values):
            k = by_set.get(frozenset(names))
            if k is None or len(names) != len(self.groups[k]):
                raise DataCorrupt(f"{where}: a {self.topic} message with joints {list(names)[:8]} is none of the "
                                  f"first bag's publishers ({'; '.join(streams)})")
            if isinstance(payload, dict) and names != self.groups[k]:
                order = [names.index(n) for n in self.groups[k]]
                payload = {p: v[order] if len(v) == len(names) else v for p, v in payload.items()}
            one = out[streams[k]]
            one.log.append(lt)
            one.time.append(t)
            one.values.append(payload)
        for one in out.values():
            if one.stamped and one.time and not any(one.time):
                one.time, one.stamped, one.unset = list(one.log), False, True
        return out


def find_publishers(topic: str, layouts: Sequence[Layout]) -> Publishers | str | None:
    """The publishers of a JointState topic from its messages' layouts in the first bag: None for one publisher
    (one set of joint names), a reason (str) when they cannot be merged (the sets overlap, a publisher's messages
    vary in size), else the Publishers."""
    first: dict[frozenset[str], Layout] = {}
    widths: dict[frozenset[str], set[tuple[int, ...]]] = {}
    for names, lens in layouts:
        first.setdefault(frozenset(names), (names, lens))
        widths.setdefault(frozenset(names), set()).add(lens)
    if len(first) <= 1:
        return None
    groups = [names for names, _ in first.values()]
    seen: set[str] = set()
    for g in groups:
        if seen & set(g) or len(set(g)) != len(g):
            return (f"its messages carry {len(groups)} sets of joint names that share joints (publishers that "
                    "overlap cannot be merged by name)")
        seen |= set(g)
    for key, (names, _) in first.items():
        if len(widths[key]) > 1:
            return (f"the messages of its publisher {stream_name(topic, names)} vary in size "
                    f"({' / '.join(str(list(w)) for w in sorted(widths[key]))} position, velocity, effort values)")
    parts = {p: tuple(k for k, (names, lens) in enumerate(first.values()) if lens[i] == len(names) and lens[i])
             for i, p in enumerate(JOINT_PARTS)}
    return Publishers(topic, tuple(groups), {p: ks for p, ks in parts.items() if ks})

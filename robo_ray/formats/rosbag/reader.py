"""ROS bag reader: a folder of bags, one per episode (an MCAP file, a rosbag2 folder with metadata.yaml and its
.db3 / .mcap files, or a ROS 1 .bag), or one bag. Read with `rosbags` (its typestore deserialises CDR and ROS 1
messages from the definitions the bag carries).

Steps come from a documented clock (robo_ray/formats/rosbag/clock.py): `fps` ticks, or the messages of a reference
topic (`clock`; by default the first camera, else the state, else the first data topic, at its median rate), every
data topic sampled as-of each tick within `max_skew`; `on_gap` quarantine / hold; `stamps` header (a message's
header stamp where its type has one, else its receive time) or log (receive times). Features come from the first
bag that opens (topics.py); every bag is scanned by Discover (topic counts, rates, gaps, the steps), and an episode
whose bag is unreadable, lacks a mapped topic or breaks the clock rule is quarantined alone with its reason.
"""
from __future__ import annotations

import dataclasses
import posixpath
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar, Sequence

import numpy as np

from robo_ray.episode import Episode, EpisodeRef
from robo_ray.errors import ConfigError, DataCorrupt, DataMissing, EpisodeError, SourceFormatError
from robo_ray.formats.rosbag import clock
from robo_ray.formats.rosbag.bags import Bag, bag_kind, entries, list_bags
from robo_ray.formats.rosbag.frames import EncodedFrames, TopicCursor, raw_frames
from robo_ray.formats.rosbag.messages import IMAGE, JOINT_PARTS, JOINT_STATE, READ_ENCODINGS, extractor, joint_names, widths
from robo_ray.formats.rosbag.publishers import Publishers, find_publishers, joint_values
from robo_ray.formats.rosbag.steps import ClockRule, StepPlan, TopicData, plan_steps, read_topics
from robo_ray.formats.rosbag.topics import SKIPPED_TOPICS, Feature, declare
from robo_ray.readers.base import BaseReader, Finding, Inventory, MetaType, ScanTask, check_fps
from robo_ray.safety import MAX_EPISODES, check_count
from robo_ray.storage import is_local

METADATA: dict[str, MetaType] = {"episode_id": "int", "file_path": "text", "bag_format": "text"}
MAX_FINDINGS_LISTED = 20


def _rate(period: int | None) -> float:
    """A median interval as a rate: a whole number when within 2% of one (29.97 Hz stays 29.97)."""
    if not period:
        return 0.0
    r = 1e9 / period
    return float(round(r)) if abs(r - round(r)) <= 0.02 * r else round(r, 3)


@dataclass
class BagScan:
    """What Discover keeps of one bag: per topic (type, count, rate, gaps, largest interval), the steps, the
    language texts, the rule's counts and the error that quarantines the episode."""

    rel: str
    kind: str
    length: int = 0
    topics: dict[str, dict[str, Any]] = field(default_factory=dict)
    texts: list[str] = field(default_factory=list)
    filled: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    error: str = ""
    code: str = ""


class RosbagReader(BaseReader):
    """Reads ROS bags (MCAP, rosbag2 SQLite3 / MCAP, ROS 1) from any fsspec URL (remote bags are copied locally)."""

    format_name = "rosbag"
    sniff_hint: ClassVar[str] = "ROS bags (*.mcap, *.bag, rosbag2 folders with metadata.yaml)"
    sniff_file_hint: ClassVar[str | None] = "a ROS bag (.mcap, .bag)"

    @classmethod
    def sniff(cls, fs: Any, root: str) -> bool:
        if bag_kind(fs, root):
            return True
        return fs.isdir(root) and any(bag_kind(fs, p, is_dir) for p, is_dir in entries(fs, root, 1000))

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, fps: float | None = None,
                 clock: str | None = None, max_skew: float | None = None, on_gap: str = "quarantine",
                 stamps: str = "header", topics: list[str] | None = None,
                 encodings: dict[str, str] | None = None) -> None:
        super().__init__(url, storage_options)
        self.encodings = _checked_encodings(encodings)
        if stamps not in ("header", "log"):
            raise ConfigError(f"source.options.stamps: {stamps!r} is not header or log")
        if on_gap not in ("quarantine", "hold"):
            raise ConfigError(f"source.options.on_gap: {on_gap!r} is not quarantine or hold")
        if max_skew is not None and (isinstance(max_skew, bool) or not isinstance(max_skew, (int, float))
                                     or max_skew <= 0):
            raise ConfigError(f"source.options.max_skew: {max_skew!r} is not a positive number of seconds")
        self.stamps, self.on_gap, self.only = stamps, on_gap, list(topics) if topics else None
        self.scan_threads = 1 if is_local(self.fs) else 4  # remote bags: copied while others are read
        self.max_skew = None if max_skew is None else int(round(max_skew * 1e9))
        paths = [self._single] if self._single else \
            self._storage_call("listing", self.root, lambda: list_bags(self.fs, self.root))
        check_count("number of bags", len(paths), MAX_EPISODES)
        if not paths:
            raise SourceFormatError(f"{self.url}: no ROS bags (*.mcap, *.bag, rosbag2 folders)")
        self.bags = [posixpath.relpath(p, self.root) for p in paths]
        self.publishers: dict[str, Publishers] = {}
        self.feats, self.language, first_times, self.left_out = self._features()
        self.features = {k: f.spec for k, f in self.feats.items()}
        data = self.data_topics()
        if clock is not None and clock not in data and clock not in self.clock_streams():
            raise ConfigError(f"source.options.clock: {clock!r} is not one of the mapped topics "
                              f"({', '.join(dict.fromkeys([*data, *self.clock_streams()]))})")
        ref = clock if clock is not None or fps is not None else self._default_reference()
        ref = self._stream_of(ref) if ref is not None else None
        if fps is not None:
            self.set_fps(check_fps(fps, "source.options.fps"), "--fps", held=False)
        elif ref is not None:
            self.set_fps(_rate(clock_period(first_times.get(ref))),
                         f"the median rate of {ref} in {self.bags[0]} (the reference topic)", held=False)
        self.rule = ClockRule(self.fps if ref is None else None, ref, self.max_skew, on_gap)

    def dataset_root(self, path: str) -> str:
        """The folder of bags; the bag's own folder when the URL names one bag (file or rosbag2 folder)."""
        self._single = path.rstrip("/") if bag_kind(self.fs, path) else None
        return posixpath.dirname(self._single) if self._single else path

    # ---- features and topics -----------------------------------------------------------------------------------
    def _where(self, i: int, rel: str) -> str:
        return f"bag {rel} (episode {i})"

    def _bag(self, rel: str, where: str) -> Bag:
        return Bag(self.fs, posixpath.join(self.root, rel), where)

    def _features(self) -> tuple[dict[str, Feature], str | None, dict[str, np.ndarray], dict[str, str]]:
        """The features of the first bag that opens, the language topic, each topic's times in that bag, and the
        topics left out (topic -> why)."""
        first: EpisodeError | None = None
        for i, rel in enumerate(self.bags[:3]):
            where = self._where(i, rel)
            try:
                with self._bag(rel, where) as bag:
                    wanted = [t for t in bag.connections if self.only is None or t in self.only]
                    topics = [t for t in wanted if bag.defined(t)]
                    undefined = {t: f"{bag.msgtype(t)}: no message definition in {rel} (a type the bag does not "
                                 "describe)" for t in wanted if t not in topics and t not in SKIPPED_TOPICS}
                    counters = {t: fn for t in topics if (fn := widths(bag.msgtype(t))) is not None}
                    got = read_topics(bag, topics, self.stamps, counters, first_of=set(topics))
            except EpisodeError as exc:
                first = first or exc
                continue
            firsts = {t: (bag.msgtype(t), d.first) for t, d in got.items() if d.first is not None}
            publishers, unmerged = _publishers(firsts, {t: got[t].values for t in counters}, rel)
            for topic, pubs in publishers.items():  # declared from their merged value (its widths per part)
                firsts[topic] = (JOINT_STATE, _merged_stand_in(pubs))
            unknown = sorted(t for t in self.encodings if firsts.get(t, ("",))[0] != IMAGE)
            if unknown:
                images = sorted(t for t, (msgtype, _) in firsts.items() if msgtype == IMAGE)
                raise ConfigError(f"source.options.encodings: {', '.join(unknown)} is no sensor_msgs/Image topic of "
                                  f"{rel} (its Image topics: {', '.join(images) or 'none'})")
            feats, language, left_out = declare(firsts, where, self.encodings)
            feats = {k: _named_by_publishers(f, publishers) for k, f in feats.items() if f.topic not in unmerged}
            feats, varying = _steady(feats, {t: got[t].values for t in counters if t not in publishers}, rel)
            left_out.update(unmerged)
            left_out.update(varying)
            self.publishers = {t: p for t, p in publishers.items() if any(f.topic == t for f in feats.values())}
            if not feats:
                why = "".join(f"; {t}: {r}" for t, r in sorted(left_out.items())[:5])
                raise SourceFormatError(f"{where}: no topic with data robo-ray reads (JointState, images, numeric "
                                        f"messages); topics: {', '.join(sorted(bag.connections))}{why}")
            times = {t: d.arrays()[1] for t, d in got.items()}
            for topic, pubs in self.publishers.items():
                times.update({s: d.arrays()[1] for s, d in pubs.split(got[topic], where).items()})
            return feats, language, times, {**undefined, **left_out}
        assert first is not None
        raise SourceFormatError(f"{first} (the first bags cannot be read)")

    def data_topics(self) -> list[str]:
        """The topics the steps are made from (every mapped feature's), in feature order."""
        return list(dict.fromkeys(f.topic for f in self.feats.values()))

    def clock_streams(self) -> list[str]:
        """What the clock samples: every data topic, a topic of several JointState publishers as each of them."""
        return [s for t in self.data_topics() for s in (self.publishers[t].streams if t in self.publishers else [t])]

    def _stream_of(self, topic: str) -> str:
        """A topic's stream for the clock (of several publishers: the first one's)."""
        return self.publishers[topic].streams[0] if topic in self.publishers else topic

    def _streams(self, got: dict[str, TopicData], where: str) -> dict[str, TopicData]:
        """Each clock stream's messages: a data topic's own, a publishers' topic's split into its publishers."""
        out = {t: got[t] for t in self.data_topics() if t not in self.publishers}
        for topic, pubs in self.publishers.items():
            out.update(pubs.split(got[topic], where))
        return {s: out[s] for s in self.clock_streams()}

    def _default_reference(self) -> str | None:
        for role in ("camera", "depth", "state"):
            for f in self.feats.values():
                if f.spec.role == role:
                    return f.topic
        return self.data_topics()[0]

    # ---- discover ----------------------------------------------------------------------------------------------
    def scan_bag(self, i: int, rel: str) -> BagScan:
        """One bag's topics and steps (every message's times read, only text deserialised)."""
        where = self._where(i, rel)
        kind = bag_kind(self.fs, posixpath.join(self.root, rel)) or "?"
        scan = BagScan(rel, kind)
        try:
            with self._bag(rel, where) as bag:
                self._check_topics(bag, where)
                values: dict[str, Any] = {t: _joint_names for t in self.publishers}
                if self.language in bag.connections:
                    values[self.language] = lambda m: str(m.data)
                got = read_topics(bag, list(bag.connections), self.stamps, values)
                streams = self._streams(got, where)
                for topic, d in got.items():
                    scan.topics[topic] = {"type": bag.msgtype(topic), **_timing(d)}
                    if topic in self.publishers:  # the gaps are each publisher's (interleaved, the topic has none)
                        pubs = {s: _timing(streams[s]) for s in self.publishers[topic].streams}
                        scan.topics[topic].update(gaps=sum(p["gaps"] for p in pubs.values()), publishers=pubs)
                if self.language in got:
                    scan.texts = list(dict.fromkeys(got[self.language].values))
        except EpisodeError as exc:
            scan.error, scan.code = str(exc), exc.code
            return scan
        plan = plan_steps({s: d.arrays()[1] for s, d in streams.items()}, self.rule, where)
        if plan.error is not None:
            scan.error, scan.code = str(plan.error), plan.error.code
        scan.length = plan.length
        scan.filled = {t: s.filled for t, s in plan.sampled.items() if s.filled}
        scan.held = {t: s.held for t, s in plan.sampled.items() if s.held}
        return scan

    def _check_topics(self, bag: Bag, where: str) -> None:
        for f in self.feats.values():
            if f.topic not in bag.connections:
                raise DataMissing(f"{where}: no {f.topic} topic")
            if bag.msgtype(f.topic) != f.msgtype:
                raise DataCorrupt(f"{where}: {f.topic} is {bag.msgtype(f.topic)}, the first bag's is {f.msgtype}")
            if not bag.defined(f.topic):
                raise DataCorrupt(f"{where}: no message definition for {f.topic} ({f.msgtype})")

    def discover(self) -> Inventory:
        return self.merge_scans(self.scan_all(self.scan_tasks()))

    def scan_tasks(self) -> list[ScanTask]:
        """One task per bag, in episode order (on Ray, many bags are scanned by the workers)."""
        return [ScanTask(i, (rel,)) for i, rel in enumerate(self.bags)]

    def scan(self, task: ScanTask) -> BagScan:
        return self.scan_bag(task.index, task.files[0])

    def merge_scans(self, rows: Sequence[BagScan]) -> Inventory:
        """The inventory from every bag's scan, in `scan_tasks()` order."""
        scans = list(rows)
        if [s.rel for s in scans] != self.bags:
            raise ValueError(f"merge_scans: {len(scans)} scanned bags for {len(self.bags)} tasks")
        refs, tasks = [], []
        findings = [Finding("warning", "RB105", f"{topic} ({why}): left out; the other topics convert")
                    for topic, why in sorted(self.left_out.items())]
        findings += [Finding("warning", "RB107", f"{f.topic} ({f.msgtype}): {f.value.note}")
                     for f in self.feats.values() if f.value.note]
        findings += [Finding("warning", "RB108", f"{topic} ({JOINT_STATE}): {pubs.describe()}")
                     for topic, pubs in self.publishers.items()]
        findings += [Finding("warning", "RB109", f"{topic} ({IMAGE}): its images are read as {enc} "
                             "(source.options.encodings), whatever encoding their messages name")
                     for topic, enc in sorted(self.encodings.items())]
        topics: dict[str, dict[str, Any]] = {}
        for i, s in enumerate(scans):
            where = self._where(i, s.rel)
            if s.error:
                findings.append(Finding("warning", "RB101", f"{s.error}; episode {i} will be quarantined"))
            for topic, n in s.filled.items():
                findings.append(Finding("warning", "RB102", f"{where}: {topic}: {n} step(s) take the previous "
                                        "message (a dropped message, within the maximum skew)", 0, n))
            for topic, n in s.held.items():
                findings.append(Finding("warning", "RB103", f"{where}: {topic}: {n} step(s) beyond the maximum "
                                        "skew keep the previous message (on_gap=hold)", 0, n))
            for topic, info in s.topics.items():
                agg = topics.setdefault(topic, {"type": info["type"], "count": 0, "gaps": 0, "rates_hz": [],
                                                "stamps": info["stamps"]})
                agg["count"] += info["count"]
                agg["gaps"] += info["gaps"]
                agg["rates_hz"].append(info["rate_hz"])
                for stream, pub in info.get("publishers", {}).items():
                    one = agg.setdefault("publishers", {}).setdefault(stream, {"count": 0, "gaps": 0, "rates_hz": [],
                                                                               "stamps": pub["stamps"]})
                    one["count"] += pub["count"]
                    one["gaps"] += pub["gaps"]
                    one["rates_hz"].append(pub["rate_hz"])
            lang = s.texts[-1] if s.texts else ""
            if lang and lang not in tasks:
                tasks.append(lang)
            refs.append(EpisodeRef(i, s.length, s.rel, tasks=(lang,) if lang else (),
                                   source_id=posixpath.basename(s.rel.rstrip("/"))))
        for topic, agg in topics.items():
            unset = [topic] if agg["stamps"] == "log (stamps unset)" else \
                [s for s, one in agg.get("publishers", {}).items() if one["stamps"] == "log (stamps unset)"]
            if unset and (topic in self.data_topics() or topic == self.language):
                findings += [Finding("warning", "RB106", f"{s} ({agg['type']}): every header stamp is 0 (its publisher "
                                     "never set it): receive times are used for it") for s in unset]
            for one in [agg, *agg.get("publishers", {}).values()]:
                rates = one.pop("rates_hz")
                one["rate_hz"] = float(np.median(rates)) if rates else 0.0
            agg["mapped"] = topic in self.data_topics() or topic == self.language
            if agg["gaps"] and agg["mapped"]:
                findings.append(Finding("warning", "RB104", f"{topic} ({agg['type']}, {agg['rate_hz']:g} Hz): "
                                        f"{agg['gaps']} gap(s) over 1.5 median intervals across the bags",
                                        0, agg["gaps"]))
        name = posixpath.splitext(self.bags[0])[0] if self._single else posixpath.basename(self.root)
        declared = {"bags": self.bags[:100], "topics": topics, "clock": self.rule.describe(),
                    "stamps": self.stamps, "language_topic": self.language, "fps_source": self.fps_source,
                    "left_out": dict(sorted(self.left_out.items())[:50])}
        inv = Inventory(dataset_name=name or "rosbag", dataset_root=self.url, source_format="rosbag",
                        source_version=",".join(sorted({s.kind for s in scans})), episodes_count=len(refs),
                        total_steps=sum(r.length for r in refs), features=self.features, refs=refs, fps=self.fps,
                        tasks=tasks, declared=declared, metadata_types=dict(METADATA),
                        language_source="task" if self.language else "", step_storage="bag")
        inv.findings = findings[:MAX_FINDINGS_LISTED] + self.fps_findings()
        return inv

    # ---- load one episode --------------------------------------------------------------------------------------
    def load_episode(self, ref: EpisodeRef) -> Episode:
        rel = ref.data_path
        where = self._where(ref.episode_index, rel)
        cams = {k: f for k, f in self.feats.items() if f.spec.kind == "image"}
        with self._bag(rel, where) as bag:
            self._check_topics(bag, where)
            values = {f.topic: joint_values if f.topic in self.publishers else _multi(self.feats, f.topic, where)
                      for f in self.feats.values() if f.spec.kind == "tensor"}
            if self.language in bag.connections:
                values[self.language] = lambda m: str(m.data)
            got = read_topics(bag, [*self.data_topics(), *([self.language] if self.language else [])],
                              self.stamps, values)
            kind = bag_kind(self.fs, posixpath.join(self.root, rel)) or "?"
        streams = self._streams(got, where)
        plan = plan_steps({s: d.arrays()[1] for s, d in streams.items()}, self.rule, where)
        if plan.error is not None:
            raise plan.error
        steps = plan.length
        if steps != ref.length:
            raise DataCorrupt(f"{where}: {steps} steps now, {ref.length} when discovered (the bag changed)")
        ep = Episode(ref=ref, length=steps)
        for key, f in self.feats.items():
            if f.spec.kind != "tensor":
                continue
            if f.topic in self.publishers:
                ep.columns[key] = _merged_column(self.publishers[f.topic], f, plan, streams, where)
                continue
            idx = plan.sampled[f.topic].index
            part = f.value.part or ""
            rows = [got[f.topic].values[j][part] for j in idx]
            ep.columns[key] = np.stack(rows) if rows else np.zeros((0, *f.spec.shape))
        for key, f in cams.items():
            ep.images[key] = self._camera(f, got[f.topic], plan, rel, where)
        ep.step_tasks = self._language(got.get(self.language) if self.language else None, plan)
        ep.metadata = {"episode_id": ref.episode_index, "file_path": rel, "bag_format": kind}
        return ep

    def _camera(self, f: Feature, data: TopicData, plan: StepPlan, rel: str, where: str) -> Any:
        log = data.arrays()[0]
        decode = extractor(f.msgtype, f.value, f"{where} {f.topic}")
        idx = plan.sampled[f.topic].index
        cursor = TopicCursor(lambda: self._bag(rel, where), f.topic, log, decode, where,
                             int(idx.max()) if len(idx) else None)
        if f.value.kind == "encoded":
            return EncodedFrames(cursor, idx)
        return raw_frames(cursor, idx, f.spec.shape, f.spec.dtype)

    @staticmethod
    def _language(data: TopicData | None, plan: StepPlan) -> list[str]:
        """Each step's text: the language topic's latest message at or before the step (its first before it)."""
        n = plan.length
        if data is None or not data.values:
            return [""] * n
        idx = np.clip(np.searchsorted(data.arrays()[1], plan.ticks, side="right") - 1, 0, None)
        return [data.values[j] for j in idx]


def _checked_encodings(encodings: Any) -> dict[str, str]:
    """source.options.encodings: {Image topic: the encoding to read its images as}, each one robo-ray reads."""
    if encodings is None:
        return {}
    if not isinstance(encodings, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in encodings.items()):
        raise ConfigError(f"source.options.encodings: {encodings!r:.200} is not a mapping of topic -> encoding")
    bad = {k: v for k, v in encodings.items() if v not in READ_ENCODINGS}
    if bad:
        raise ConfigError(f"source.options.encodings: {bad!r:.200}: not an encoding robo-ray reads "
                          f"({', '.join(READ_ENCODINGS)})")
    return dict(encodings)


def _timing(d: TopicData) -> dict[str, Any]:
    """A stream's count, rate, gaps, largest interval and time base (Discover's per-topic columns)."""
    t = d.arrays()[1]
    period = clock.nominal_period(t)
    diffs = np.diff(t)
    return {"count": len(t), "rate_hz": _rate(period), "gaps": len(clock.gaps(t, period)),
            "max_interval_s": float(diffs.max()) / 1e9 if len(diffs) else 0.0,
            "stamps": "header" if d.stamped else "log (stamps unset)" if d.unset else "log"}


def _joint_names(msg: Any) -> tuple[tuple[str, ...], None]:
    """What Discover keeps of a publishers' topic message: its joint names (which publisher), no values."""
    return joint_names(msg), None


def _publishers(firsts: dict[str, tuple[str, Any]], layouts: dict[str, list[Any]], rel: str
                ) -> tuple[dict[str, Publishers], dict[str, str]]:
    """The JointState topics of several publishers in the first bag (publishers.py), and those whose publishers
    cannot be merged (they share joints, a publisher's messages vary in size: topic -> why they are left out)."""
    found: dict[str, Publishers] = {}
    unmerged: dict[str, str] = {}
    for topic, (msgtype, _) in firsts.items():
        if msgtype != JOINT_STATE or topic not in layouts:
            continue
        pubs = find_publishers(topic, layouts[topic])
        if isinstance(pubs, Publishers):
            found[topic] = pubs
        elif pubs is not None:
            unmerged[topic] = f"{msgtype}: {pubs} in {rel}"
    return found, unmerged


def _merged_stand_in(pubs: Publishers) -> Any:
    """A JointState-shaped first message of the publishers' merged value (what `declare` makes features of)."""
    return SimpleNamespace(name=list(pubs.names("position")) if "position" in pubs.parts else [],
                           **{p: np.zeros(len(pubs.names(p)) if p in pubs.parts else 0) for p in JOINT_PARTS})


def _named_by_publishers(f: Feature, publishers: dict[str, Publishers]) -> Feature:
    """A feature of a publishers' topic with its part's joint names (the stand-in names only the positions')."""
    pubs = publishers.get(f.topic)
    if pubs is None or f.value.part not in pubs.parts:
        return f
    names = pubs.names(f.value.part)
    return Feature(dataclasses.replace(f.spec, names=names), f.topic, f.msgtype,
                   dataclasses.replace(f.value, names=names))


def _merged_column(pubs: Publishers, f: Feature, plan: StepPlan, streams: dict[str, TopicData], where: str
                   ) -> np.ndarray:
    """A publishers' topic feature per step: each publisher's message at the step, side by side."""
    part = f.value.part or "position"
    pieces = []
    for k in pubs.parts[part]:
        stream = pubs.streams[k]
        rows = [streams[stream].values[j][part] for j in plan.sampled[stream].index]
        for row in rows:
            if len(row) != len(pubs.groups[k]):
                raise DataCorrupt(f"{where}: a {stream} message has {len(row)} {part} values for its "
                                  f"{len(pubs.groups[k])} joints")
        pieces.append(np.stack(rows) if rows else np.zeros((0, len(pubs.groups[k]))))
    return np.concatenate(pieces, axis=1)


def _steady(feats: dict[str, Feature], counts: dict[str, list[Any]], rel: str
            ) -> tuple[dict[str, Feature], dict[str, str]]:
    """The features without the topics whose messages in the first bag give a varying number of values (a
    variable-length array; JointState publishers not told apart by joint names): no fixed per-step shape, so
    such a topic is left out (topic -> why) instead of quarantining every episode. `counts`: per message, its
    widths (a JointState's: its layout, names and widths per part)."""
    varying: dict[str, str] = {}
    for f in feats.values():
        k = JOINT_PARTS.index(f.value.part) if f.value.part else 0
        sizes = {(c[1] if f.msgtype == JOINT_STATE else c)[k] for c in counts.get(f.topic, [])}
        if len(sizes) > 1 and f.topic not in varying:
            varying[f.topic] = (f"{f.msgtype}: its messages in {rel} hold {min(sizes)} to {max(sizes)} values"
                                f"{f' ({f.value.part})' if f.value.part else ''}, not one size a step")
    return {k: f for k, f in feats.items() if f.topic not in varying}, varying


def clock_period(times: np.ndarray | None) -> int | None:
    return None if times is None else clock.nominal_period(times)


def _multi(feats: dict[str, Feature], topic: str, where: str) -> Any:
    """One deserialisation per message for every feature of its topic: {part: values}."""
    parts = {f.value.part or "": extractor(f.msgtype, f.value, f"{where} {topic}") for f in feats.values()
             if f.topic == topic and f.spec.kind == "tensor"}
    return lambda msg: {p: fn(msg) for p, fn in parts.items()}

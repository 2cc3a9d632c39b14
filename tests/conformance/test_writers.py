"""The writer conformance suite (issue #13, DESIGN §3): every target format in robo_ray.writers.REGISTRY gets the
same tests, so a new writer gets them for free. A registered writer whose module cannot be imported fails them.

1. round trip: LeRobot v2.1 (1 and 2 H.264 cameras, several tasks), LeRobot v3.0 with lerobot 0.6's language
   columns and Minari (raw pixels) sources, converted and read back through the writer's paired reader: same
   episodes, low-dim values, text features and step fields exact, frame counts equal, every frame within 30 dB
   PSNR of the source frame the writer was given;
2. deterministic bytes: an in-process run, a fresh process, and the contract driven by hand with the units in
   reverse order write byte-identical files (options that embed a time are pinned);
3. atomic units: an aborted sink, or one whose episode fails mid-camera, leaves no file at all; an `add` that
   raises leaves the unit as if the episode had never been offered (same UnitResult, same bytes);
4. resume: a run SIGKILLed once its ledger lists a unit leaves no partial file under a final name, `robo-ray
   validate` names the units not committed, and `--resume` writes the uninterrupted run's bytes, reusing the
   committed units;
5. quarantine: one missing video -> exit 3, that episode quarantined in the ledger, the others read back;
6. edge sizes: a dataset whose every episode is quarantined commits a valid, empty dataset (validation, loader
   read-back included, passes; the paired reader finds no episode); a one-episode dataset round-trips;
7. a 20,000-step episode converts with bounded peak RSS (against a 500-step one) and round-trips;
8. `robo-ray validate` passes on the output and fails (exit 3, naming the file) after one flipped byte.

Sources, options and the read-back live in tests/conformance/writer_cases.py.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Callable

import pytest

from robo_ray.readers import REGISTRY as READERS
from robo_ray.writers import REGISTRY, UnitResult, WriterOptions
from tests.conftest import run_cli, sigkill_when
from tests.conformance import writer_cases as wc
from tests.conformance.writer_cases import WRIST, WriterCase
from tests.fixtures.lerobot_gen import corrupt_video, video_files

pytestmark = pytest.mark.timeout(300)

WRITERS = sorted(REGISTRY)  # every registered target format, importable or not
MAIN = "lerobot-v21-2cam"  # the source of the tests that need one
Sources = Callable[[str], Path]


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Sources:
    """Each source dataset, generated once per module."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            cache[name] = wc.SOURCES[name][0](tmp_path_factory.mktemp(name))
        return cache[name]
    return get


@pytest.fixture(scope="module")
def runs(sources: Sources, tmp_path_factory: pytest.TempPathFactory) -> Callable[[WriterCase, str, str], Path]:
    """A finished conversion of a source by a writer, made once per module: `how` "in-process" (run_pipeline)
    or "cli" (`robo-ray run` in a fresh process). Both must succeed (exit 0)."""
    cache: dict[tuple[str, str, str], Path] = {}

    def get(case: WriterCase, source: str, how: str) -> Path:
        key = (case.name, source, how)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{case.name}-{source}-{how}") / "out"
            src = sources(source)
            if how == "cli":
                r = run_cli(*case.cli_args(src, out, source))
                assert r.returncode == 0, f"robo-ray run --to {case.name} of {source}: exit {r.returncode}\n" \
                                          f"{r.stdout[-2000:]}{r.stderr[-3000:]}"
            else:
                outcome = wc.run_in_process(case, src, out, source)
                assert outcome.exit_code == 0, f"{case.name} of {source}: {outcome.message}"
            cache[key] = out
        return cache[key]
    return get


@pytest.fixture(params=WRITERS)
def case(request: pytest.FixtureRequest) -> WriterCase:
    return wc.load_writer_case(request.param)


# ---- 0. the registry ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", WRITERS)
def test_writer_is_loadable(name: str) -> None:
    case = wc.load_writer_case(name)
    cls = case.cls
    print(f"target format {name}: {cls.__module__}.{cls.__name__}, paired reader {cls.paired_reader}")
    assert cls.title and cls.OUTPUTS, f"{name}: title and OUTPUTS must be set"
    assert issubclass(cls.Options, WriterOptions), f"{name}: Options must subclass WriterOptions"
    assert cls.paired_reader in READERS, \
        f"{name}: paired_reader {cls.paired_reader!r} must name a registered reader ({sorted(READERS)})"
    assert tuple(REGISTRY[name].outputs) == tuple(cls.OUTPUTS), \
        f"{name}: REGISTRY outputs {REGISTRY[name].outputs} differ from {cls.__name__}.OUTPUTS {cls.OUTPUTS}"


# ---- 1. round trip ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", wc.ROUND_TRIP_SOURCES)
def test_round_trip(case: WriterCase, source: str, sources: Sources, runs) -> None:
    out = runs(case, source, "in-process")
    writer = wc.output_writer(out)
    if source == "lerobot-v30-language":  # lerobot 0.6's language columns travel as text features: none dropped
        texts = {fm.target for fm in writer.mapping.steps if fm.kind == "text"}
        assert {"language_persistent", "language_events"} <= texts, f"{case.name}: text features {sorted(texts)}"
    expected = wc.source_views(sources(source), out)
    if source in wc.DEPTH_SOURCES:  # the depth camera reaches the writer and comes back as 16-bit values
        depth = [c for c, frames in expected[0].cameras.items() if frames and frames[0].dtype == "uint16"]
        assert depth and int(expected[0].cameras[depth[0]][0].max()) > 255, f"{source}: no 16-bit depth camera"
    problems = wc.compare_views(expected, wc.output_views(writer), names=writer.read_back_names(),
                                depth_bound=writer.depth_bound)
    assert not problems, f"{case.name} round trip of {source}:\n" + "\n".join(problems[:20])


# ---- 2. deterministic bytes ---------------------------------------------------------------------------------------
def _differ(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def test_deterministic_bytes(case: WriterCase, sources: Sources, runs, tmp_path: Path) -> None:
    in_process = wc.dataset_digests(wc.output_writer(runs(case, MAIN, "in-process")))
    fresh = wc.dataset_digests(wc.output_writer(runs(case, MAIN, "cli")))
    # the contract by hand: units converted in reverse order, their results handed to finalize in that order
    src, out = sources(MAIN), tmp_path / "reversed"
    run = wc.hand_run(case, src, out, MAIN)
    plan = case.config(src, out, MAIN).plan
    try:
        units = run.driver.plan(run.inv.refs, run.inv.features, plan.target_shard_mb, plan.min_shards)
        assert len(units) > 1, f"{case.name}: plan.target_shard_mb=0.001 should give several units"
        results = [run.conv.convert(u) for u in reversed(units)]
    finally:
        run.conv.close()
    run.driver.finalize(results, run.inv)
    by_hand = wc.dataset_digests(run.driver)
    unit_files = {name for r in results for name, _, _ in r.all_files()}
    assert unit_files, f"{case.name}: committed units list no files (UnitResult.filename / files)"
    assert unit_files <= set(by_hand), \
        f"{case.name}: Writer.files() leaves out unit files {sorted(unit_files - set(by_hand))}"
    missing = [n for n in run.driver.commit_files() if n not in by_hand]
    assert not missing, f"{case.name}: commit files {missing} missing from Writer.files()"
    assert fresh == in_process, f"{case.name}: a fresh process wrote other bytes: {_differ(fresh, in_process)}"
    assert by_hand == in_process, \
        f"{case.name}: units committed in reverse order gave other bytes: {_differ(by_hand, in_process)}"


# ---- 3. atomic units ----------------------------------------------------------------------------------------------
def _offer(sink, run: wc.HandRun, ref, broken: bool = False) -> None:
    """Hand one canonical episode to the sink (`broken`: its last camera fails mid-stream, and `add` must raise
    the FrameCountMismatch unchanged: the converter quarantines an episode by its error's code)."""
    ep = run.episode(ref)
    try:
        if broken:
            with pytest.raises(wc.FrameCountMismatch):
                sink.add(wc.break_last_camera(ep))
        else:
            sink.add(ep)
    finally:
        ep.close()


@pytest.mark.parametrize("failing", [False, True], ids=["aborted", "aborted-after-failed-episode"])
def test_aborted_unit_leaves_nothing(case: WriterCase, failing: bool, sources: Sources, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = wc.hand_run(case, sources(MAIN), out, MAIN)
    try:
        unit = wc.one_unit(run.worker, run.inv.refs[:3], run.inv.features)
        sink = run.worker.open_unit(unit)
        _offer(sink, run, unit.refs[0])
        _offer(sink, run, unit.refs[1], broken=failing)
        # a crash now must leave nothing under a final name: an open unit's files are temps (or anonymous)
        visible = [f for f in wc.all_files(out) if f not in wc.temp_files(out)]
        assert not visible, f"{case.name}: an open (uncommitted) unit has files under final names: {visible}"
        sink.abort()
    finally:
        run.conv.close()
    assert wc.all_files(out) == [], f"{case.name}: an aborted unit left files: {wc.all_files(out)}"


@pytest.mark.parametrize("position", [0, 1])
def test_failed_add_is_as_if_never_offered(case: WriterCase, position: int, sources: Sources,
                                           tmp_path: Path) -> None:
    """A unit whose episode raised inside `add` (then quarantined, as the converter does) commits exactly what a
    unit gets when that episode failed before reaching the writer (position 0: the unit's first episode)."""
    results: dict[str, UnitResult] = {}
    dirs: dict[str, Path] = {}
    for variant in ("raised-in-add", "never-offered"):
        out = tmp_path / variant
        run = wc.hand_run(case, sources(MAIN), out, MAIN)
        try:
            unit = wc.one_unit(run.worker, run.inv.refs[:3], run.inv.features)
            sink = run.worker.open_unit(unit)
            for k, ref in enumerate(unit.refs):
                if k != position:
                    _offer(sink, run, ref)
                    continue
                if variant == "raised-in-add":
                    _offer(sink, run, ref, broken=True)
                sink.quarantine(wc.mismatch_record(ref))
            results[variant] = sink.commit()
        finally:
            run.conv.close()
        dirs[variant] = Path(run.worker.dataset_dir)
        assert not wc.temp_files(out), f"{case.name}: temp files after commit: {wc.temp_files(out)}"
        for name, size, _ in results[variant].all_files():
            path = dirs[variant] / name
            assert path.is_file() and path.stat().st_size == size, f"{case.name}: {name} not committed as listed"
    raised, never = results["raised-in-add"], results["never-offered"]
    assert raised.to_dict() == never.to_dict(), \
        f"{case.name}: an episode that raised inside add changed the unit:\n{raised.to_dict()}\n{never.to_dict()}"
    for name, _, _ in raised.all_files():
        assert (dirs["raised-in-add"] / name).read_bytes() == (dirs["never-offered"] / name).read_bytes(), \
            f"{case.name}: {name} differs after an episode raised inside add"


# ---- 4. resume after a killed run ---------------------------------------------------------------------------------
def test_resume_after_kill(case: WriterCase, sources: Sources, runs, tmp_path: Path) -> None:
    reference = wc.dataset_digests(wc.output_writer(runs(case, MAIN, "cli")))
    src, out = sources(MAIN), tmp_path / "out"
    proc = subprocess.Popen(wc.paced_command(case, src, out, MAIN, delay=0.6), cwd=wc.REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def listed() -> bool:
        try:
            return bool(wc.ledger(out)["shards"])
        except (FileNotFoundError, ValueError):
            return False
    sigkill_when(proc, listed, 120, "the ledger to list a committed unit")
    before = wc.ledger(out)
    done = sorted(s["shard_index"] for s in before["shards"])
    assert not before["complete"] and len(done) < before["num_shards"], \
        f"the kill came too late to test a resume: {done} of {before['num_shards']} units listed"
    writer = wc.output_writer(out)
    present = wc.dataset_digests(writer)
    partial = sorted(n for n, d in present.items() if reference.get(n) != d)
    assert not partial, f"{case.name}: files under a final name differ from the uninterrupted run's after a " \
                        f"SIGKILL (partial or uncommitted): {partial}"
    assert not set(writer.commit_files()) & set(present), f"{case.name}: commit files exist before finalize"
    v = run_cli("validate", str(out))  # not committed: names the planned units the ledger does not hold
    not_done = [name for i, name in enumerate(before["unit_files"]) if i not in done]
    assert v.returncode == 3 and "units not committed: " in v.stderr and all(n in v.stderr for n in not_done), \
        f"{case.name}: validate of the killed run does not name its uncommitted units {not_done}:\n{v.stderr}"

    r = run_cli(*case.cli_args(src, out, MAIN), "--resume")
    assert r.returncode == 0, f"--resume: exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
    after = wc.ledger(out)
    assert after["complete"] and set(done) <= set(after["resumed_shards"]), \
        f"{case.name}: units committed before the kill ({done}) were not reused: {after['resumed_shards']}"
    assert wc.dataset_digests(wc.output_writer(out)) == reference, \
        f"{case.name}: the resumed run's files differ from an uninterrupted run's"
    assert not wc.temp_files(out), f"{case.name}: temp files left after --resume: {wc.temp_files(out)}"


# ---- 5. quarantine ------------------------------------------------------------------------------------------------
def test_quarantined_episode(case: WriterCase, sources: Sources, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(sources(MAIN), src)
    (bad,) = [p for p in video_files(src) if WRIST in str(p) and p.name == "episode_000002.mp4"]
    corrupt_video(bad, "delete")
    out = tmp_path / "out"
    r = run_cli(*case.cli_args(src, out, MAIN))
    assert r.returncode == 3, f"exit {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-3000:]}"
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("quarantined[")]
    assert len(lines) == 1 and lines[0].startswith("quarantined[EP101] episode=2 "), r.stderr[-3000:]
    led = wc.ledger(out)
    quarantined = [(q["episode_index"], q["code"]) for s in led["shards"] for q in s["quarantined"]]
    written = sorted(e for s in led["shards"] for e, _ in s["episodes"])
    assert quarantined == [(2, "EP101")] and written == [0, 1, 3, 4, 5], led
    expected = wc.source_views(sources(MAIN), out, skip=(2,))
    problems = wc.compare_views(expected, wc.output_views(wc.output_writer(out)))
    assert not problems, f"{case.name} with episode 2 quarantined:\n" + "\n".join(problems[:20])


# ---- 6. empty and one-episode datasets ----------------------------------------------------------------------------
def test_every_episode_quarantined_commits_an_empty_dataset(case: WriterCase, sources: Sources,
                                                            tmp_path: Path) -> None:
    """Decision (the contract's `quarantine_unit` commits units with no episode): the writer commits a valid empty
    dataset. The run exits 3 only by the quarantine threshold; with max_quarantine_fraction=1.0 it passes,
    validation and the format's loader read-back included (tfds cannot build an empty split: that read-back is
    recorded as skipped, with the reason), and the paired reader opens it and finds no episode."""
    src = tmp_path / "src"
    shutil.copytree(sources(MAIN), src)
    for p in video_files(src):
        corrupt_video(p, "delete")
    out = tmp_path / "out"
    r = run_cli(*case.cli_args(src, out, MAIN, "convert.max_quarantine_fraction=1.0", "validate.tfds_readback=true"))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("quarantined[EP101]")]
    assert len(lines) == len(wc.TWO_CAMS.episode_lengths), r.stderr[-3000:]
    led = wc.ledger(out)
    assert led["complete"] and not [e for s in led["shards"] for e in s["episodes"]], led
    writer = wc.output_writer(out)
    problems = [f"commit file {n} missing" for n in writer.commit_files() if n not in writer.files()]
    if r.returncode != 0 or "validation passed" not in r.stdout:
        others = [ln for ln in r.stderr.splitlines() if not ln.startswith("quarantined[")]
        problems.append(f"run: exit {r.returncode} ({r.stdout.strip()[-300:]}) {' | '.join(others)[-1500:]}")
    checks = json.loads((out / "diff_summary.json").read_text())["checks"] if (out / "diff_summary.json").exists() \
        else []
    problems += [f"check {c['name']} skipped: {c['detail']}" for c in checks if c["status"] == "skipped"
                 and not (c["name"] == "tfds read-back" and "holds no episode" in c["detail"])]  # tfds cannot, said so
    try:
        back = wc.output_views(writer)
        if back:
            problems.append(f"the paired reader finds {len(back)} episodes")
    except Exception as exc:  # noqa: BLE001 - reported with the rest
        problems.append(f"the paired reader ({writer.paired_reader}) cannot open it: {type(exc).__name__}: {exc}")
    assert not problems, f"{case.name}: every episode quarantined (max_quarantine_fraction=1.0) should commit a " \
                         "valid empty dataset:\n" + "\n".join(problems)


def test_one_episode_dataset(case: WriterCase, sources: Sources, runs) -> None:
    source = "lerobot-v21-one-episode"
    out = runs(case, source, "in-process")
    problems = wc.compare_views(wc.source_views(sources(source), out), wc.output_views(wc.output_writer(out)))
    assert not problems, f"{case.name} one-episode round trip:\n" + "\n".join(problems[:20])


# ---- 7. a 20,000-step episode -------------------------------------------------------------------------------------
# peak RSS of the 20,000-step run against the 500-step one: at most 1.5x + 32 MB, and at most 100 MB more (5 KB a
# step: a writer keeping per-step Python objects shows). The canonical episode holds an episode's low-dim arrays
# by design; state-only, so this guards the per-step path (image streaming at scale: bench/memory.py).
MAX_RSS_RATIO = 1.5
RSS_SLACK_MB = 32.0
MAX_GROWTH_MB = 100.0


@pytest.mark.slow
def test_long_episode_bounded_memory(case: WriterCase, sources: Sources, tmp_path: Path) -> None:
    peaks: dict[str, float] = {}
    for source in ("lerobot-v21-state-500", "lerobot-v21-state-20000"):
        out = tmp_path / source
        m = wc.run_cli_measured(case.cli_args(sources(source), out, source))
        assert m.returncode == 0, f"{source}: exit {m.returncode}\n{m.stdout[-2000:]}{m.stderr[-3000:]}"
        peaks[source] = m.peak_rss_mb
    short, long_ = peaks["lerobot-v21-state-500"], peaks["lerobot-v21-state-20000"]
    print(f"{case.name}: peak RSS 500 steps {short:.0f} MB, 20,000 steps {long_:.0f} MB ({long_ / short:.2f}x)")
    assert long_ < MAX_RSS_RATIO * short + RSS_SLACK_MB and long_ - short < MAX_GROWTH_MB, \
        f"{case.name}: peak RSS grows with the episode: {short:.0f} MB for 500 steps, {long_:.0f} MB for 20,000"
    out = tmp_path / "lerobot-v21-state-20000"
    problems = wc.compare_views(wc.source_views(sources("lerobot-v21-state-20000"), out),
                                wc.output_views(wc.output_writer(out)))
    assert not problems, f"{case.name} 20,000-step round trip:\n" + "\n".join(problems[:20])


# ---- 8. validate ------------------------------------------------------------------------------------------------
def test_validate_passes_then_catches_a_flipped_byte(case: WriterCase, runs, tmp_path: Path) -> None:
    finished = runs(case, MAIN, "cli")
    ok = run_cli("validate", str(finished))
    assert ok.returncode == 0, f"{case.name}: validate on a fresh output: exit {ok.returncode}\n{ok.stderr[-3000:]}"
    results = [UnitResult.from_dict(s) for s in wc.ledger(finished)["shards"]]
    largest = max(results, key=lambda r: r.total_bytes())
    # the unit's main file, and its largest further file (a video) when it has any
    targets = [largest.filename] + [max(largest.files, key=lambda f: f["num_bytes"])["name"]
                                    for _ in largest.files[:1]]
    for k, name in enumerate(targets):
        copy = tmp_path / f"copy{k}"
        shutil.copytree(finished, copy)
        path = Path(wc.output_writer(copy).dataset_dir) / name
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))
        r = run_cli("validate", str(copy), "--no-tfds")
        assert r.returncode == 3, f"{case.name}: validate after a flipped byte in {name}: exit {r.returncode}, " \
                                  f"expected 3: {r.stderr.strip()[-1500:]}"
        assert Path(name).name in r.stderr and "Traceback" not in r.stderr, r.stderr[-2000:]

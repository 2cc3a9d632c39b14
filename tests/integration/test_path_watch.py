"""Where robo-ray's files go (issue #9, acceptance 2): every corpus case's run (tests/corpus/fixtures.py: the real CLI
in a subprocess, every Python process of it recorded by tests/corpus/pathwatch.py) reads data only from its source
and writes only inside its destination, and nothing at all touches the real data its unsafe references point at
(inotify on the case's `outside/` folder, which also sees opens made in C by FFmpeg or HDF5).

The watcher itself is checked first: a small script that does each forbidden thing once (in Python, through PyAV,
through HDF5 following an external link, in a child process) must be flagged for each of them."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import h5py
import pytest

from tests.conftest import REPO, run_cli
from tests.corpus.build_corpus import CASES, Case, bases_in, build_outside
from tests.corpus.fixtures import Corpus, case_run, corpus  # noqa: F401 - fixture
from tests.corpus.pathwatch import BaitWatch, read_logs, violations, watch_env


def _under(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(f"{root}/")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_reads_source_writes_destination_only(case: Case, corpus: Corpus) -> None:
    run = case_run(corpus, case.name)
    assert run.returncode == case.exit_code, run.stderr  # the watched run is the real one, with its real outcome
    records = run.records
    assert violations(records, run.source, run.out) == []
    assert run.bait_events == [], f"something opened the real data {case.name}'s references point at"
    # the watch saw the run (robo-ray's own code is read after the hook is in place); a converting run read its
    # source, wrote its destination, and the C-level openers were watched
    assert any(r["access"] == "read" and _under(r["path"], REPO / "robo_ray") for r in records)
    if case.outcome != "refuse":
        assert any(r["access"] == "read" and _under(r["path"], run.source) for r in records)
        assert any(r["access"] == "write" and _under(r["path"], run.out) for r in records)
        # zarr stores and bags (rosbags opens MCAP / ROS 1 files) are read through Python's own open (recorded above)
        if case.base not in ("zarr", "umi", "rosbag"):
            assert any(r["event"] in ("av.open", "h5py.File") and _under(r["path"], run.source) for r in records)


def test_to_ortf_writes_destination_only(corpus: Corpus, tmp_path: Path) -> None:
    """`run --to ortf` (a quarantine case: the ORTF writer's own path) under the same rule."""
    src, out = corpus.source("parquet_cut_footer"), tmp_path / "out"
    proc = run_cli("run", str(src), str(out), "--to", "ortf", env=watch_env(tmp_path / "log"), timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert violations(read_logs(tmp_path / "log"), src, out) == []


ESCAPES = textwrap.dedent("""
    import os, shutil, subprocess, sys
    import av, h5py
    src, dst, outside, elsewhere = sys.argv[1:5]
    open(os.path.join(src, "linked.hdf5"), "rb").read(4)  # allowed: a read in the source
    open(os.path.join(dst, "fine.txt"), "w").write("ok")  # allowed: a write in the destination
    open(os.path.join(outside, "data", "episode_000000.parquet"), "rb").read(8)  # read outside, in Python
    av.open(os.path.join(outside, "videos", "episode_000000.mp4")).close()  # read outside, in FFmpeg (C)
    with h5py.File(os.path.join(src, "linked.hdf5"), "r") as f:  # HDF5 follows the link into outside/ (C)
        f["observations"][()]
    open(os.path.join(elsewhere, "written.txt"), "w").write("x")
    os.mkdir(os.path.join(elsewhere, "made"))
    os.replace(os.path.join(elsewhere, "written.txt"), os.path.join(elsewhere, "moved.txt"))
    shutil.copyfile(os.path.join(elsewhere, "moved.txt"), os.path.join(elsewhere, "copied.txt"))
    os.remove(os.path.join(elsewhere, "copied.txt"))
    os.listdir(elsewhere)
    subprocess.run([sys.executable, "-c", f"open({os.path.join(elsewhere, 'child.txt')!r}, 'w')"], check=True)
""")


def test_the_watch_flags_every_escape(corpus: Corpus, tmp_path: Path) -> None:
    """Negative self-check: each forbidden access of ESCAPES is reported, the allowed ones are not."""
    outside = tmp_path / "outside"  # real data, as a case's outside/ (not one of them: runs watch those)
    build_outside(outside, bases_in(corpus.root / "bases"))
    src, dst, elsewhere = tmp_path / "src", tmp_path / "dst", tmp_path / "elsewhere"
    for d in (src, dst, elsewhere):
        d.mkdir()
    with h5py.File(src / "linked.hdf5", "w") as f:
        f["observations"] = h5py.ExternalLink(str(outside / "bait.hdf5"), "/observations")
    script = tmp_path / "escapes.py"
    script.write_text(ESCAPES)
    with BaitWatch(outside) as watch:
        subprocess.run([sys.executable, str(script), str(src), str(dst), str(outside), str(elsewhere)], check=True,
                       cwd=REPO, env={**os.environ, **watch_env(tmp_path / "log")}, timeout=60)
        bait = watch.events()
    found = violations(read_logs(tmp_path / "log"), src, dst)
    expected = [f"read outside the source: open {outside}/data/episode_000000.parquet",
                f"read outside the source: av.open {outside}/videos/episode_000000.mp4",
                f"read outside the source: os.listdir {elsewhere}",
                f"write outside the destination: open {elsewhere}/written.txt",
                f"write outside the destination: os.mkdir {elsewhere}/made",
                f"write outside the destination: os.rename {elsewhere}/written.txt",  # os.replace's audit event
                f"write outside the destination: os.rename {elsewhere}/moved.txt",
                f"write outside the destination: shutil.copyfile {elsewhere}/copied.txt",
                f"write outside the destination: os.remove {elsewhere}/copied.txt",
                f"write outside the destination: open {elsewhere}/child.txt"]  # from the child process
    assert [e for e in expected if e not in found] == [], found
    assert not [v for v in found if "fine.txt" in v or "linked.hdf5" in v], found
    for name in ("bait.hdf5", "episode_000000.mp4", "episode_000000.parquet"):  # inotify: C opens included
        assert any(f"/{name} " in e for e in bait), (name, bait)

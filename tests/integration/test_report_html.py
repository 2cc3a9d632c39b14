"""report.html (issue #16, acceptance 4): a self-contained visual report beside final_report.md. The page is parsed
and checked against the data recomputed another way (every episode decoded through the convert path of the source
and of the written output read back): every inline image decodes, every camera x sampled episode x first / middle /
last is there with its PSNR, every plot holds the episode's values, the quarantine table names the quarantined
episode; then a real headless Chromium renders it (every image loaded, every plot line drawn, screenshot not blank).

Chromium is required, never skipped: `make test` installs Debian's package when /usr/bin/chromium is missing and it
runs as root; otherwise the browser test fails with one line saying what to install."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pytest
from PIL import Image

from robo_ray.config import load_config
from robo_ray.stages import report_html
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.spec import load_mapping
from tests.conformance.writer_cases import EpisodeView, canonical_views, output_writer
from tests.conftest import psnr, run_cli
from tests.fixtures.lerobot_gen import DatasetSpec, corrupt_video, write_lerobot_dataset

pytestmark = pytest.mark.slow

CHROMIUM = os.environ.get("ROBO_RAY_CHROMIUM", "/usr/bin/chromium")
SCREENSHOT_COPY = Path("/tmp/report_screenshot.png")
POSITIONS = ("first", "middle", "last")
PSNR_TOLERANCE_DB = 0.5


# ---- a small DOM from html.parser -------------------------------------------------------------------------------
@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list["Node"] = field(default_factory=list)
    text: list[str] = field(default_factory=list)

    def iter(self, tag: str | None = None) -> Iterator["Node"]:
        for c in self.children:
            if tag is None or c.tag == tag:
                yield c
            yield from c.iter(tag)

    def all_text(self) -> str:
        return "".join(self.text) + "".join(c.all_text() for c in self.children)


class _Tree(HTMLParser):
    VOID = {"img", "meta", "br", "input", "link", "hr", "source"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for k in range(len(self.stack) - 1, 0, -1):
            if self.stack[k].tag == tag:
                del self.stack[k:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].text.append(data)


def parse(text: str) -> Node:
    tree = _Tree()
    tree.feed(text)
    tree.close()
    return tree.root


def decode_data_uri(uri: str) -> np.ndarray:
    head, _, payload = uri.partition(",")
    assert head.startswith("data:image/") and head.endswith(";base64"), f"not an inline base64 image: {head[:40]}"
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(payload, validate=True))).convert("RGB"))


# ---- runs -------------------------------------------------------------------------------------------------------
@dataclass
class Converted:
    src: Path
    out: Path
    target: str
    proc: subprocess.CompletedProcess
    quarantined: tuple[int, ...] = ()
    pristine: Path | None = None  # the source before it was damaged (the expectation is decoded from it)

    @property
    def page(self) -> Node:
        return parse((self.out / "report.html").read_text())


def _convert(src: Path, out: Path, target: str, quarantined: tuple[int, ...] = (), code: int = 0) -> Converted:
    proc = run_cli("run", str(src), str(out), "--to", target, "--set", "validate.tfds_readback=false")
    assert proc.returncode == code, proc.stderr[-3000:]
    return Converted(src, out, target, proc, quarantined)


@pytest.fixture(scope="module")
def sample_runs(shared: Path, tmp_path_factory) -> dict[str, Converted]:
    """The 2-camera AV1 LeRobot v3.0 sample converted to RLDS and to LeRobot v3.0."""
    src = shared / "samples/lerobot_v30_av1_2cam"
    base = tmp_path_factory.mktemp("report")
    return {t: _convert(src, base / t, t) for t in ("rlds", "lerobot")}


@pytest.fixture(scope="module")
def quarantine_run(tmp_path_factory) -> Converted:
    """A generated LeRobot v2.1 dataset whose episode 2 has lost its video (EP101), converted to ORTF."""
    base = tmp_path_factory.mktemp("report_q")
    spec = DatasetSpec(version="v2.1", episode_lengths=[12, 10, 14, 9])
    src = write_lerobot_dataset(base / "src", spec)
    corrupt_video(src / "videos/chunk-000/observation.images.top/episode_000002.mp4", "delete")
    run = _convert(src, base / "out", "ortf", quarantined=(2,), code=3)
    run.pristine = write_lerobot_dataset(base / "pristine", spec)
    return run


# ---- the independent recomputation -------------------------------------------------------------------------------
@dataclass
class Expected:
    source: dict[int, EpisodeView]  # by source episode index
    written: dict[int, EpisodeView]  # by the source index it pairs with
    names: dict[str, str]  # mapping target -> the name read back
    cameras: list[str]  # mapping targets of the images


def expected(run: Converted) -> Expected:
    """Every episode of the source (the run's mapping) and of the output (its paired reader), decoded through the
    convert path; written episodes pair with the source's non-quarantined ones in order (writers may renumber)."""
    mapping = load_mapping((run.out / "mapping.yaml").read_text(), "mapping.yaml")
    source = {v.index: v for v in canonical_views(str(run.pristine or run.src), None, mapping)}
    writer = output_writer(run.out)
    written_views = canonical_views(writer.dataset_dir, writer.paired_reader)
    kept = [i for i in sorted(source) if i not in run.quarantined]
    assert len(kept) == len(written_views), f"{len(written_views)} episodes read back, {len(kept)} expected"
    written = dict(zip(kept, written_views))
    assert all(written[i].length == source[i].length for i in kept)
    cams = [fm.target for fm in mapping.steps if fm.kind == "image"]
    return Expected(source, written, writer.read_back_names(), cams)


def figures(page: Node) -> list[Node]:
    return [n for n in page.iter("figure") if "pair" in n.attrs.get("class", "")]


# ---- the page ---------------------------------------------------------------------------------------------------
def check_images_decode(page: Node) -> int:
    imgs = list(page.iter("img"))
    assert imgs, "report.html has no images"
    for im in imgs:
        arr = decode_data_uri(im.attrs["src"])
        h, w = arr.shape[:2]
        assert 16 <= w <= report_html.THUMB_MAX_WIDTH and 16 <= h <= 1024, f"implausible thumbnail {w}x{h}"
        assert arr.std() > 1.0, "a thumbnail is one flat colour"
    return len(imgs)


def check_frames(page: Node, exp: Expected) -> None:
    """Every camera x sampled episode x first/middle/last, PSNR equal to the recomputation, thumbnails of the
    right frames."""
    figs = figures(page)
    sampled = sorted({int(f.attrs["data-episode"]) for f in figs})
    assert len(sampled) == min(3, len(exp.written)), f"sampled source episodes {sampled}"
    assert set(sampled) <= set(exp.written), f"sampled {sampled}, written {sorted(exp.written)}"
    seen = {(f.attrs["data-camera"], int(f.attrs["data-episode"]), f.attrs["data-position"]): f for f in figs}
    for cam in exp.cameras:
        for ep in sampled:
            T = exp.written[ep].length
            steps = dict(zip(POSITIONS, sorted({0, T // 2, T - 1})))
            for pos, step in steps.items():
                fig = seen.get((cam, ep, pos))
                assert fig is not None, f"no {pos} frame of camera {cam} for episode {ep}"
                assert int(fig.attrs["data-step"]) == step
                src = exp.source[ep].cameras[cam][step]
                got = exp.written[ep].cameras[exp.names.get(cam, cam)][step]
                want = psnr(src, got)
                shown = float(fig.attrs["data-psnr"])
                assert abs(shown - want) <= PSNR_TOLERANCE_DB, f"{cam} ep {ep} {pos}: {shown} dB, recomputed {want}"
                assert f"PSNR {fig.attrs['data-psnr']} dB" in fig.all_text()
                thumbs = {i.attrs["data-role"]: decode_data_uri(i.attrs["src"]) for i in fig.iter("img")}
                assert psnr(thumbs["source"], src) > 28 and psnr(thumbs["written"], got) > 28, \
                    f"{cam} ep {ep} {pos}: the thumbnails are not the frames at step {step}"


def polyline_xy(node: Node) -> np.ndarray:
    return np.array([[float(v) for v in p.split(",")] for p in node.attrs["points"].split()])


def plot_frame(svg: Node) -> tuple[tuple[float, float, float, float], float, float]:
    """(box x0, y0, x1, y1), value at the bottom, value at the top: what turns points back into values."""
    x0, y0, x1, y1 = (float(v) for v in svg.attrs["data-box"].split(","))
    return (x0, y0, x1, y1), float(svg.attrs["data-y-min"]), float(svg.attrs["data-y-max"])


def plot_width(svg: Node) -> float:
    (x0, _, x1, _), _, _ = plot_frame(svg)
    return x1 - x0


def read_back(svg: Node, line: Node) -> tuple[np.ndarray, np.ndarray]:
    """A polyline's points as (steps, values), through the plot's frame."""
    (x0, y0, x1, y1), lo, hi = plot_frame(svg)
    xy = polyline_xy(line)
    steps = (xy[:, 0] - x0) / (x1 - x0) * (int(svg.attrs["data-length"]) - 1)
    return steps, hi - (xy[:, 1] - y0) / (y1 - y0) * (hi - lo)


def check_axes(svg: Node, label: str) -> None:
    """Value ticks at the bottom / middle / top labelled with the frame's values, step ticks at first and last."""
    (_, y0, _, y1), lo, hi = plot_frame(svg)
    ticks = [t for t in svg.iter("text") if "y" in t.attrs.get("class", "").split()]
    values = sorted(float(t.attrs["data-value"]) for t in ticks)
    assert len(ticks) == 3 and values[0] == lo and values[-1] == hi, f"{label}: value ticks {values}, {lo}..{hi}"
    for t in ticks:
        assert float(t.all_text()) == pytest.approx(float(t.attrs["data-value"]), rel=1e-3, abs=1e-9), label
    steps = {int(t.attrs["data-step"]) for t in svg.iter("text") if "x" in t.attrs.get("class", "").split()}
    T = int(svg.attrs["data-length"])
    assert {0, T - 1} <= steps, f"{label}: step ticks {sorted(steps)} for {T} steps"


def check_plots(page: Node, exp: Expected) -> None:
    """Per sampled episode a state and an action plot with axes; per dimension a source line and a written line,
    each over every step; both lines, turned back into values through the axes, equal the values recomputed from
    the source and from the output (and so each other)."""
    figs = figures(page)
    pairs = {int(f.attrs["data-written-episode"]): int(f.attrs["data-episode"]) for f in figs}
    plots = [n for n in page.iter("svg") if "plot" in n.attrs.get("class", "")]
    target_of = {name: target for target, name in exp.names.items()}
    for written_index, ep in pairs.items():
        sides = {"written": exp.written[ep], "source": exp.source[ep]}
        mine = {p.attrs["data-feature"]: p for p in plots if int(p.attrs["data-episode"]) == written_index}
        assert {k.split(":")[0] for k in mine} == {"state", "action"}, f"episode {ep}: plots {sorted(mine)}"
        for label, svg in mine.items():
            name = label.split(": ", 1)[1]
            want = {"written": sides["written"].tensors[name],
                    "source": sides["source"].tensors[target_of.get(name, name)]}
            length = sides["written"].length
            check_axes(svg, label)
            _, lo, hi = plot_frame(svg)
            both = np.concatenate([w.reshape(-1) for w in want.values()]).astype(np.float64)
            assert (lo, hi) == pytest.approx((both.min(), both.max())) or np.ptp(both) == 0, f"{label}: y range"
            tol = (hi - lo) * 1e-3
            for side, values in want.items():
                values = values.reshape(length, -1).astype(np.float64)
                lines = [ln for ln in svg.iter("polyline") if ln.attrs.get("data-series") == side]
                assert len(lines) == values.shape[1], f"{label}: {len(lines)} {side} lines, {values.shape[1]} dims"
                for d, line in enumerate(lines):
                    steps, got = read_back(svg, line)
                    assert len(got) == length >= 2, f"{label}[{d}] {side}: {len(got)} points for {length} steps"
                    assert np.allclose(steps, np.arange(length), atol=0.06 * length / plot_width(svg)), \
                        f"{label}[{d}] {side}: x does not follow the steps"
                    worst = float(np.max(np.abs(got - values[:, d])))
                    assert worst <= tol, f"{label}[{d}] {side}: the line is {worst} off the values (tolerance {tol})"
            written = [polyline_xy(ln) for ln in svg.iter("polyline") if ln.attrs.get("data-series") == "written"]
            source = [polyline_xy(ln) for ln in svg.iter("polyline") if ln.attrs.get("data-series") == "source"]
            assert all(np.array_equal(w, s) for w, s in zip(written, source)), f"{label}: source and written differ"
            assert "written = source at every step" in svg_heading(page, svg), label


def svg_heading(page: Node, svg: Node) -> str:
    """The heading of the plot box holding `svg`."""
    box = next(b for b in page.iter("div") if "plotbox" in b.attrs.get("class", "") and svg in b.children)
    return next(box.iter("h4")).all_text()


def check_self_contained(text: str, page: Node) -> None:
    for node in page.iter():
        assert node.tag not in ("link", "iframe", "object", "embed"), f"<{node.tag}> in a self-contained report"
        if "src" in node.attrs:
            assert node.attrs["src"].startswith("data:"), f"<{node.tag} src={node.attrs['src'][:60]}>"
        href = node.attrs.get("href", "")
        assert node.tag == "a" or not href, f"<{node.tag} href={href[:60]}>"
    assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", text), "the style sheet loads something"


def check_tables(page: Node, run: Converted) -> None:
    """Checks, statistics and summary as the run's own files say."""
    text = page.all_text()
    diff = json.loads((run.out / "diff_summary.json").read_text())
    for check in diff["checks"]:
        assert check["name"] in text, f"validation check {check['name']!r} missing"
    rows = {}
    for table in page.iter("table"):
        if "statistics" in table.attrs.get("class", ""):
            rows = {tr.children[0].all_text(): tr for tr in table.iter("tr") if tr.children[0].tag == "td"}
    stats = json.loads((run.out / "dataset_statistics.json").read_text())
    features = _stat_features(stats)
    assert features and all(any(r.endswith(f) for r in rows) for f in features), f"stats {features} vs {list(rows)}"
    assert str(run.src) in text and output_writer(run.out).title in text


def _stat_features(d: dict[str, Any]) -> list[str]:
    out = []
    for k, v in d.items():
        if isinstance(v, dict):
            out += [k] if "mean" in v else _stat_features(v)
    return out


@pytest.mark.parametrize("target", ["rlds", "lerobot"])
def test_report_of_a_two_camera_sample(sample_runs: dict[str, Converted], target: str) -> None:
    run = sample_runs[target]
    html_path = run.out / "report.html"
    assert f"{run.out}/report.html" in run.proc.stdout.splitlines()[-1], run.proc.stdout
    assert "[report.html](report.html)" in (run.out / "final_report.md").read_text()
    text = html_path.read_text()
    page = parse(text)
    exp = expected(run)
    assert len(exp.cameras) == 2
    n = check_images_decode(page)
    assert n == 2 * len(exp.cameras) * 3 * 3, f"{n} images"  # source + written x cameras x 3 episodes x 3 steps
    check_frames(page, exp)
    check_plots(page, exp)
    check_self_contained(text, page)
    check_tables(page, run)
    assert page.all_text().count("None: every episode was written") == 1


def test_report_lists_the_quarantined_episode(quarantine_run: Converted) -> None:
    run = quarantine_run
    page = run.page
    table = next(t for t in page.iter("table") if t.attrs.get("id") == "quarantine")
    rows = [[td.all_text() for td in tr.children if td.tag == "td"] for tr in table.iter("tr")]
    rows = [r for r in rows if r]
    ledger = json.loads((run.out / "ledger.json").read_text())
    want = [(str(q["episode_index"]), q["code"]) for s in ledger["shards"] for q in s["quarantined"]]
    assert [(r[0], r[1]) for r in rows] == want == [("2", "EP101")], rows
    assert "episode_000002.mp4" in rows[0][2] + rows[0][3]
    exp = expected(run)
    check_images_decode(page)
    check_frames(page, exp)  # the three written episodes pair with source 0, 1, 3
    check_plots(page, exp)
    assert 2 not in {int(f.attrs["data-episode"]) for f in figures(page)}


def test_a_failing_report_does_not_fail_the_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    src = write_lerobot_dataset(tmp_path / "src", DatasetSpec(episode_lengths=[8, 9]))

    def boom(*_a: Any, **_k: Any) -> None:
        raise RuntimeError("no frames today")

    monkeypatch.setattr(report_html, "collect", boom)
    err = io.StringIO()
    cfg = load_config(None, None, **{"source.url": str(src), "target.url": str(tmp_path / "out")})
    cfg.validate_.tfds_readback = False
    outcome = run_pipeline(cfg, stderr=err)
    assert outcome.exit_code == 0 and outcome.validation_passed and outcome.report_html is None, outcome.message
    assert not (tmp_path / "out/report.html").exists()
    assert err.getvalue().splitlines() == ["report.html not written (the conversion is unaffected): "
                                           "RuntimeError: no frames today"]
    final = (tmp_path / "out/final_report.md").read_text()
    assert "**Visual report**: not written (RuntimeError: no frames today)" in final


def test_statistics_in_any_layout_are_shown() -> None:
    """Statistics are read as a dict: nested or flat, with keys the page does not know (another layout may come)."""
    stats = {"action": {"mean": [0.5, -1.25], "std": [1, 2], "min": [0, -3], "max": [1, 1], "q01": [0, -2.9],
                        "q99": [1, 0.9], "p01": [0, -2.9], "mask": [True, False]},
             "proprio": {"mean": [7.0], "std": [0.0], "min": [7], "max": [7], "q01": [7], "q99": [7]},
             "num_transitions": 42, "num_trajectories": 3, "features": {"reward": {"mean": 0.25, "count": 9}}}
    page = parse(report_html.statistics_section(stats))
    table = next(t for t in page.iter("table") if "statistics" in t.attrs.get("class", ""))
    header = [th.all_text() for th in table.iter("th")]
    rows = {tr.children[0].all_text(): [td.all_text() for td in tr.children] for tr in table.iter("tr")
            if tr.children[0].tag == "td"}
    assert header[:7] == ["feature", "mean", "std", "min", "max", "q01", "q99"] and {"p01", "mask", "count"} <= set(
        header), header
    assert set(rows) == {"action", "proprio", "features/reward"}, rows
    assert rows["action"][header.index("mean")] == "[0.5, -1.25]" and rows["features/reward"][1] == "0.25"
    assert rows["proprio"][header.index("p01")] == ""
    assert "num_transitions" in page.all_text() and "42" in page.all_text()


# ---- a real browser ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def chromium() -> str:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"{CHROMIUM} not found: the report's browser test needs Debian's chromium "
                    "(`apt-get install -y chromium` as root; `make test` does it)", pytrace=False)
    return CHROMIUM


def _chromium(binary: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    profile.mkdir()
    cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired as exc:
        # headless chromium sometimes hangs on exit (dbus) after it has written what was asked for: a whole DOM
        # dump on stdout (ends with </html>) or a screenshot file. That result is checked as usual; a hang
        # before it is still a failure.
        out = exc.output.decode(errors="replace") if isinstance(exc.output, bytes) else (exc.output or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        shots = [a.split("=", 1)[1] for a in args if a.startswith("--screenshot=")]
        done = out.rstrip().endswith("</html>") if "--dump-dom" in args else bool(shots) and Path(shots[0]).is_file()
        if not done:
            raise
        return subprocess.CompletedProcess(cmd, 0, out, err + "\n(chromium hung on exit after its output)")


def test_report_renders_in_headless_chromium(sample_runs: dict[str, Converted], chromium: str,
                                             tmp_path: Path) -> None:
    run = sample_runs["rlds"]
    url = (run.out / "report.html").resolve().as_uri()
    page = run.page
    n_imgs, n_lines = len(list(page.iter("img"))), len(list(page.iter("polyline")))
    dom = _chromium(chromium, tmp_path, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    rendered = parse(dom.stdout)
    body = next(rendered.iter("body"))
    assert body.attrs.get("data-images") == str(n_imgs) and body.attrs.get("data-lines") == str(n_lines), \
        f"the page's check did not run or saw other elements: {body.attrs} (file: {n_imgs} images, {n_lines} lines)"
    assert body.attrs["data-images-broken"] == "0" and body.attrs["data-lines-empty"] == "0", body.attrs
    assert all(i.attrs.get("data-loaded") == "yes" for i in rendered.iter("img"))
    assert all(p.attrs.get("data-drawn") == "yes" for p in rendered.iter("polyline"))

    shot = tmp_path / "report.png"
    proc = _chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,4000", url)
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-2000:]
    im = np.asarray(Image.open(shot).convert("RGB"))
    assert im.shape[:2] == (4000, 1280)
    colours = np.unique(im.reshape(-1, 3)[::7], axis=0)
    assert len(colours) > 200 and im.std() > 20, f"blank screenshot: {len(colours)} colours, std {im.std():.1f}"
    shutil.copyfile(shot, SCREENSHOT_COPY)

"""report.html beside final_report.md: one self-contained page (no server, no external URL; thumbnails inline as
JPEG data: URIs, plots as inline SVG polylines) showing the source / target summary, the validation checks, the
quarantine table, the statistics, and for a few sampled episodes each camera's first / middle / last frame next to
the source frame with PSNR and the state / action series, written over source with value and step axes and their
largest difference (robo_ray.stages.report_samples reads them)."""
from __future__ import annotations

import base64
import html
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

import numpy as np
import simplejpeg
from PIL import Image

from robo_ray.readers.base import Inventory, Reader
from robo_ray.stages.report_samples import EpisodeSample, FramePair, Samples, collect
from robo_ray.stages.check_records import ValidationResult
from robo_ray.stages.validation_report import dataset_statistics
from robo_ray.storage import join, write_text_atomic
from robo_ray.writers import Writer

REPORT_NAME = "report.html"
THUMB_MAX_WIDTH = 256
JPEG_QUALITY = 85
MAX_PLOT_POINTS = 2000
PLOT_W, PLOT_H, PAD = 640, 200, 8
PLOT_LEFT, PLOT_BOTTOM = 64, 22  # room for the value ticks (left) and the step ticks (below)
STAT_COLUMNS = ("mean", "std", "min", "max", "q01", "q99")
STAT_MARKERS = frozenset({*STAT_COLUMNS, "p01", "p99"})
VECTOR_SHOWN = 8

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}.ok{color:#070}.bad{color:#b00}.skip{color:#875c00}
figure{display:inline-block;margin:4px 10px 4px 0}figure img{width:160px;image-rendering:pixelated;border:1px solid #999;margin-right:2px}figcaption{font-size:12px}
svg.plot{border:1px solid #ccc;background:#fff;display:block}.legend span{font-size:11px;margin-right:6px}
code{font-size:12px}.plots{display:flex;flex-wrap:wrap;gap:0 24px}.vec{font-family:monospace;font-size:12px}"""

# marks every image that decoded and every plot line that was drawn (read by tests from the browser's DOM)
SCRIPT = """window.addEventListener("load", function () {
  var imgs = document.images, lines = document.querySelectorAll("svg.plot polyline"), bad = 0, empty = 0;
  for (var i = 0; i < imgs.length; i++) {
    var ok = imgs[i].complete && imgs[i].naturalWidth > 0;
    imgs[i].setAttribute("data-loaded", ok ? "yes" : "no"); if (!ok) bad++;
  }
  for (var j = 0; j < lines.length; j++) {
    var drawn = lines[j].points.numberOfItems >= 2 && lines[j].getBBox().width > 0;
    lines[j].setAttribute("data-drawn", drawn ? "yes" : "no"); if (!drawn) empty++;
  }
  var b = document.body;
  b.setAttribute("data-images", imgs.length); b.setAttribute("data-images-broken", bad);
  b.setAttribute("data-lines", lines.length); b.setAttribute("data-lines-empty", empty);
});"""


def esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def num(x: Any) -> str:
    return f"{x:.4g}" if isinstance(x, (float, np.floating)) else str(x)


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], cls: str = "", ident: str = "") -> str:
    """An HTML table; cells are HTML already (escape text with `esc`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    id_attr = f' id="{ident}"' if ident else ""
    return f'<table class="{cls}"{id_attr}><tr>{head}</tr>{body}</table>'


# ---- thumbnails -----------------------------------------------------------------------------------------------
def rgb8(frame: np.ndarray) -> np.ndarray:
    """An HxWxC frame as HxWx3 uint8 (16-bit depth scaled to its maximum, grey repeated)."""
    a = frame if frame.ndim == 3 else frame[:, :, None]
    if a.dtype == np.uint16:
        a = (a.astype(np.float64) * (255.0 / max(1, int(a.max())))).astype(np.uint8)
    elif a.dtype != np.uint8:
        a = np.clip(a, 0, 255).astype(np.uint8)
    if a.shape[2] == 1:
        a = np.repeat(a, 3, axis=2)
    return np.ascontiguousarray(a[:, :, :3])


def thumbnail_uri(frame: np.ndarray) -> str:
    """A data: URI of the frame as JPEG, at most THUMB_MAX_WIDTH wide."""
    a = rgb8(frame)
    if a.shape[1] > THUMB_MAX_WIDTH:
        h = max(1, round(a.shape[0] * THUMB_MAX_WIDTH / a.shape[1]))
        a = np.ascontiguousarray(Image.fromarray(a).resize((THUMB_MAX_WIDTH, h), Image.Resampling.BILINEAR))
    data = simplejpeg.encode_jpeg(a, quality=JPEG_QUALITY, colorspace="RGB")
    return "data:image/jpeg;base64," + base64.b64encode(data).decode("ascii")


def img(frame: np.ndarray | None, alt: str) -> str:
    if frame is None:
        return f'<span class="bad">{esc(alt)}: not available</span>'
    return f'<img src="{thumbnail_uri(frame)}" alt="{esc(alt)}" data-role="{esc(alt)}">'


# ---- plots ----------------------------------------------------------------------------------------------------
SERIES_STYLE = {  # how the two sides of a plot are drawn: the source wide and light beneath, the written thin and dark
    "source": {"lightness": 80, "width": 4.5, "legend": "source (wide, light)"},
    "written": {"lightness": 32, "width": 1.2, "legend": "written (thin, dark)"},
}


@dataclass(frozen=True)
class PlotFrame:
    """Where a plot's data goes in its SVG: the plotting box (pixels) and the value range its height spans."""

    lo: float
    hi: float
    T: int
    x0: float = PLOT_LEFT
    y0: float = PAD
    x1: float = PLOT_W - PAD
    y1: float = PLOT_H - PLOT_BOTTOM

    def x(self, steps: np.ndarray) -> np.ndarray:
        return self.x0 + steps / max(self.T - 1, 1) * (self.x1 - self.x0)

    def y(self, values: np.ndarray) -> np.ndarray:
        return self.y0 + (self.hi - values) / (self.hi - self.lo) * (self.y1 - self.y0)

    def attrs(self) -> str:
        """The frame as SVG data- attributes, so a reader of the page can turn points back into values."""
        return (f'data-y-min="{self.lo!r}" data-y-max="{self.hi!r}" '
                f'data-box="{self.x0:g},{self.y0:g},{self.x1:g},{self.y1:g}"')


def plot_steps(T: int) -> np.ndarray:
    """The steps drawn: every step, or MAX_PLOT_POINTS spread over a longer episode (first and last kept)."""
    if T <= MAX_PLOT_POINTS:
        return np.arange(T)
    return np.unique(np.linspace(0, T - 1, MAX_PLOT_POINTS).round().astype(np.int64))


def value_range(*series: np.ndarray) -> tuple[float, float]:
    """(lo, hi) of the finite values of every series (widened by 1 around a constant)."""
    finite = np.concatenate([v[np.isfinite(v)] for v in series])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    return (lo - 1.0, hi + 1.0) if hi - lo < 1e-12 else (lo, hi)


def polyline_points(values: np.ndarray, steps: np.ndarray, frame: PlotFrame) -> str:
    v = np.nan_to_num(values[steps], nan=frame.lo, posinf=frame.hi, neginf=frame.lo)
    return " ".join(f"{a:.1f},{b:.1f}" for a, b in zip(frame.x(steps), frame.y(v)))


def axes(frame: PlotFrame) -> str:
    """Grid lines and labelled ticks: the value at the bottom, middle and top, the first / middle / last step."""
    out = [f'<rect x="{frame.x0:g}" y="{frame.y0:g}" width="{frame.x1 - frame.x0:g}" height="{frame.y1 - frame.y0:g}" '
           'fill="none" stroke="#bbb"/>']
    for v in (frame.lo, (frame.lo + frame.hi) / 2, frame.hi):
        y = float(frame.y(np.float64(v)))
        out.append(f'<line class="grid" x1="{frame.x0:g}" x2="{frame.x1:g}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>'
                   f'<text class="tick y" data-value="{v!r}" x="{frame.x0 - 4:g}" y="{y + 4:.1f}" '
                   f'text-anchor="end" font-size="11">{esc(num(v))}</text>')
    last = frame.T - 1
    for step in sorted({0, last // 2, last}):
        x = float(frame.x(np.float64(step)))
        anchor = "start" if step == 0 else "end" if step == last else "middle"  # the end ticks stay inside
        out.append(f'<text class="tick x" data-step="{step}" x="{x:.1f}" y="{PLOT_H - 6:g}" text-anchor="{anchor}" '
                   f'font-size="11">{step}</text>')
    return "".join(out)


def difference(written: np.ndarray, source: np.ndarray | None) -> str:
    """The largest |written - source| of a plot, in words (NaN on both sides counts as equal)."""
    if source is None:
        return "source not available: written values only"
    if source.shape != written.shape:
        return f"source shape {source.shape} differs from the written {written.shape}"
    w_nan, s_nan = np.isnan(written), np.isnan(source)
    with np.errstate(invalid="ignore"):  # inf - inf: the NaN it gives is replaced below
        gap = np.abs(written - source)
    gap = np.where(np.isnan(gap) & ~(w_nan | s_nan), np.where(written == source, 0.0, np.inf), gap)
    delta = np.where(w_nan & s_nan, 0.0, np.where(w_nan | s_nan, np.inf, gap))
    worst = float(delta.max()) if delta.size else 0.0
    return "written = source at every step" if worst == 0 else f"max |written - source| {num(worst)}"


def dim_lines(side: str, values: np.ndarray, steps: np.ndarray, frame: PlotFrame, label: str) -> list[str]:
    style = SERIES_STYLE[side]
    return [f'<polyline class="dim {side}" data-series="{side}" data-dim="{d}" data-points="{len(steps)}" '
            f'fill="none" stroke="hsl({(d * 137.5) % 360:.0f},70%,{style["lightness"]}%)" '
            f'stroke-width="{style["width"]}" stroke-linejoin="round" '
            f'points="{polyline_points(values[:, d], steps, frame)}"><title>{esc(label)}[{d}] {side}</title>'
            "</polyline>" for d in range(values.shape[1])]


def svg_plot(label: str, values: np.ndarray, episode: EpisodeSample) -> str:
    """One inline SVG with axes: each dimension of a (T, D) series as a polyline over the steps, the written values
    drawn over the source's (when the source is paired and has the same shape), and their largest difference."""
    T, D = values.shape
    source = episode.source_series.get(label)
    drawn_source = source if source is not None and source.shape == values.shape else None
    lo, hi = value_range(values, *(() if drawn_source is None else (drawn_source,)))
    frame, steps = PlotFrame(lo, hi, T), plot_steps(T)
    lines = [] if drawn_source is None else dim_lines("source", drawn_source, steps, frame, label)
    lines += dim_lines("written", values, steps, frame, label)
    sides = ("source", "written") if drawn_source is not None else ("written",)
    legend = "".join(f'<span data-series="{side}"><b style="color:hsl(0,0%,{SERIES_STYLE[side]["lightness"]}%)">'
                     f'▬</b> {SERIES_STYLE[side]["legend"]}</span>' for side in sides)
    legend += "".join(f'<span style="color:hsl({(d * 137.5) % 360:.0f},70%,42%)">■{d}</span>' for d in range(D))
    return (f'<div class="plotbox"><h4>{esc(label)} '
            f"<small>({T} steps, {D} dims; {esc(difference(values, source))})</small></h4>"
            f'<svg class="plot" width="{PLOT_W}" height="{PLOT_H}" viewBox="0 0 {PLOT_W} {PLOT_H}" '
            f'data-episode="{episode.written_index}" data-feature="{esc(label)}" data-length="{T}" data-dims="{D}" '
            f'data-series="{" ".join(sides)}" {frame.attrs()}>{axes(frame)}{"".join(lines)}</svg>'
            f'<div class="legend">{legend}</div></div>')


# ---- sections -------------------------------------------------------------------------------------------------
def summary_section(writer: Writer, inv: Inventory, res: ValidationResult, quarantined: list[dict[str, Any]]) -> str:
    where = f"{writer.out_url}/{writer.dataset_rel}" if writer.dataset_rel else writer.out_url
    status = (f'<b class="{"ok" if res.passed else "bad"}">{"PASSED" if res.passed else "FAILED"}</b> '
              f'<span id="check-counts">({esc(res.tally())})</span>')
    rows = [("Source", esc(inv.dataset_root), "Target", esc(where)),
            ("Source format", esc(f"{inv.source_format} {inv.source_version}"), "Target format", esc(writer.title)),
            ("Episodes (source)", str(inv.episodes_count), "Episodes (written)", str(res.episodes_written)),
            ("Steps (source)", f"{inv.total_steps:,}", "Steps (written)", f"{res.steps_written:,}"),
            ("Frame rate", num(inv.fps), "Quarantined", str(len(quarantined))),
            ("Robot", esc(inv.robot_type or ""), "Validation", status)]
    return "<h2>Source and target</h2>" + table(("", "source", "", "target"), rows, "summary")


CHECK_CELLS = {"passed": ("ok", "✔ passed"), "failed": ("bad", "✘ failed"), "skipped": ("skip", "– skipped")}


def checks_section(res: ValidationResult) -> str:
    """Every check with its outcome (passed / failed / skipped) and its detail (for a skipped one: why)."""
    rows = []
    for c in res.checks:
        cls, mark = CHECK_CELLS[c.status]
        rows.append((f'<span class="{cls}" data-status="{c.status}">{mark}</span>', esc(c.name), esc(c.detail)))
    return "<h2>Validation checks</h2>" + table(("outcome", "check", "detail"), rows, "checks")


def quarantine_section(quarantined: list[dict[str, Any]]) -> str:
    if not quarantined:
        return '<h2>Quarantined episodes</h2><p id="quarantine">None: every episode was written.</p>'
    rows = [(esc(q.get("episode_index")), f'<code>{esc(q.get("code"))}</code>', esc(q.get("file") or ""),
             esc(q.get("reason"))) for q in quarantined]
    headers = ("episode", "code", "file", "reason")
    return "<h2>Quarantined episodes</h2>" + table(headers, rows, "quarantine", "quarantine")


def stat_rows(stats: dict[str, Any], prefix: str = "") -> list[tuple[str, dict[str, Any]]]:
    """(name, stats) of every dict holding statistics, at any depth (extra keys and layouts are tolerated)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for key, value in stats.items():
        if isinstance(value, dict):
            if STAT_MARKERS & set(value):
                out.append((f"{prefix}{key}", value))
            else:
                out += stat_rows(value, f"{prefix}{key}/")
    return out


def vector(value: Any) -> str:
    arr = np.asarray(value, dtype=object).reshape(-1) if isinstance(value, (list, tuple)) else None
    if arr is None:
        return esc(num(value))
    shown = ", ".join(num(v) for v in arr[:VECTOR_SHOWN])
    more = f", … ({arr.size})" if arr.size > VECTOR_SHOWN else ""
    return f'<span class="vec">[{esc(shown)}{esc(more)}]</span>'


def statistics_section(stats: dict[str, Any]) -> str:
    rows_in = stat_rows(stats)
    extra = sorted({k for _, s in rows_in for k in s if k not in STAT_COLUMNS})
    cols = (*STAT_COLUMNS, *extra)
    rows = [(esc(name), *(vector(s[c]) if c in s else "" for c in cols)) for name, s in rows_in]
    scalars = [(esc(k), esc(num(v))) for k, v in stats.items() if isinstance(v, (int, float, str))]
    body = table(("feature", *cols), rows, "statistics") if rows else "<p>No statistics.</p>"
    return "<h2>Statistics</h2>" + body + (table(("key", "value"), scalars) if scalars else "")


def frame_figure(camera: str, ep: EpisodeSample, pair: FramePair) -> str:
    value = "" if pair.psnr is None else f"{pair.psnr:.2f}"
    caption = f"{pair.position} (step {pair.step}): source | written" + (f" · PSNR {value} dB" if value else "")
    return (f'<figure class="pair" data-camera="{esc(camera)}" data-episode="{esc(ep.source_index)}" '
            f'data-written-episode="{ep.written_index}" data-position="{pair.position}" data-step="{pair.step}" '
            f'data-psnr="{value}">{img(pair.source, "source")}{img(pair.written, "written")}'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def frames_section(samples: Samples) -> str:
    if not samples.cameras:
        return "<h2>Frames</h2><p>The dataset has no cameras.</p>"
    parts = ["<h2>Frames: written vs source</h2>"]
    for cam in samples.cameras:
        rows = [(f"written {ep.written_index}<br>source {esc(ep.source_index)}",
                 "".join(frame_figure(cam.label, ep, p) for p in ep.frames.get(cam.label, [])))
                for ep in samples.episodes]
        parts.append(f"<h3>{esc(cam.label)}</h3>" + table(("episode", "first / middle / last"), rows, "frames"))
    return "".join(parts)


def plots_section(samples: Samples) -> str:
    parts = ["<h2>State and action</h2>"]
    for ep in samples.episodes:
        parts.append(f"<h3>Episode {ep.written_index} (source {esc(ep.source_index)}, {ep.length} steps)</h3>")
        parts.append('<div class="plots">' + "".join(svg_plot(k, v, ep) for k, v in ep.series.items()) + "</div>")
        parts += [f'<p class="bad">{esc(e)}</p>' for e in ep.errors]
    return "".join(parts)


def render(writer: Writer, inv: Inventory, res: ValidationResult, quarantined: list[dict[str, Any]],
           samples: Samples) -> str:
    name = writer.mapping.dataset_name
    when = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    note = f'<p class="bad">{esc(samples.note)}</p>' if samples.note else ""
    body = "".join([f"<h1>Conversion report: {esc(name)}</h1><p>Generated {when} by robo-ray.</p>",
                    summary_section(writer, inv, res, quarantined), checks_section(res),
                    quarantine_section(quarantined), note, frames_section(samples), plots_section(samples),
                    statistics_section(dataset_statistics(res))])  # as dataset_statistics.json holds them
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{esc(name)}: robo-ray report'
            f"</title><style>{CSS}</style></head><body>{body}<script>{SCRIPT}</script></body></html>\n")


def write_report_html(writer: Writer, inv: Inventory, reader: Reader | None, res: ValidationResult,
                      quarantined: list[dict[str, Any]], samples: Samples | None = None) -> str:
    """Write report.html at the output root; returns its URL."""
    if samples is None:
        samples = collect(writer, inv, reader, quarantined)
    write_text_atomic(writer.fs, join(writer.out_root, REPORT_NAME), render(writer, inv, res, quarantined, samples))
    return f"{writer.out_url.rstrip('/')}/{REPORT_NAME}"


def try_write_report_html(writer: Writer, inv: Inventory, reader: Reader | None, res: ValidationResult,
                          quarantined: list[dict[str, Any]],
                          samples: "Future[Samples] | None" = None) -> tuple[str | None, str | None]:
    """(URL, None) when written, (None, why) when not: the report must never fail a conversion. `samples`: the
    sampled episodes already being read (`start_samples`)."""
    try:
        got = samples.result() if samples is not None else None
        return write_report_html(writer, inv, reader, res, quarantined, got), None
    except Exception as exc:  # noqa: BLE001 - reported in final_report.md and the log, the run goes on
        return None, f"{type(exc).__name__}: {exc}"


def start_samples(writer: Writer, inv: Inventory, open_source: Callable[[], Reader] | None,
                  quarantined: list[dict[str, Any]]) -> "Future[Samples]":
    """Read the report's sampled episodes in a thread, with a source reader of its own (`open_source`), while
    Validate runs: the loader's read-back waits on a child process meanwhile, so the two overlap."""
    def work() -> Samples:
        reader = open_source() if open_source is not None else None
        try:
            return collect(writer, inv, reader, quarantined)
        finally:
            if reader is not None:
                reader.close()

    pool = ThreadPoolExecutor(1, thread_name_prefix="robo-ray-report")
    try:
        return pool.submit(work)
    finally:
        pool.shutdown(wait=False)

"""Spec: mapping.md (the spec's tables, for people) and mapping.yaml (editable, passed back with --mapping)."""
from __future__ import annotations

from typing import Any

import yaml

from robo_ray.errors import ConfigError
from robo_ray.mapping import Defaults, Mapping
from robo_ray.readers.base import Inventory
from robo_ray.storage import join, write_text_atomic


def mapping_yaml(mapping: Mapping) -> str:
    head = ("# robo-ray mapping: edit and pass back with --mapping mapping.yaml\n"
            "# steps[].target: the canonical key inside a step (the target's writer lays it out); remove an entry to drop a feature; images.encoding: jpeg|png\n"
            "# steps[].view (images): primary | secondary | wrist | depth, orders the cameras; defaults.instruction: the language of steps without task text\n")
    data = mapping.model_dump(mode="json", exclude_none=True)
    return head + yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None)


def load_mapping(text: str, origin: str = "mapping.yaml") -> Mapping:
    try:
        data: Any = yaml.safe_load(text)
        return Mapping.model_validate(data)
    except Exception as exc:
        raise ConfigError(f"{origin}: invalid mapping ({str(exc).splitlines()[0]})") from exc


def _row(*cells: Any) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def mapping_markdown(mapping: Mapping, inv: Inventory) -> str:
    feats = inv.features
    lines = [f"# Feature Mapping: {mapping.dataset_name}", "",
             f"## Source: {inv.source_format} {inv.source_version}", ""]
    head = [_row("Source Key", "Shape", "Dtype", "→", "Target Key", "Shape", "Dtype", "Transform"),
            _row(*["---"] * 8)]
    for title, pick in (("Observation Mapping", lambda t: t.startswith("observation/")),
                        ("Action Mapping", lambda t: t == "action" or t.startswith("action/")),
                        ("Other Step Features", lambda t: not t.startswith(("observation/", "action")))):
        rows = [fm for fm in mapping.steps if pick(fm.target)]
        if not rows and title == "Other Step Features":
            continue
        lines += [f"## {title}", ""] + head
        for fm in rows:
            f = feats.get(fm.source)
            src_shape = list(f.declared_shape or f.shape) if f else "?"
            src_dtype = (f.kind if f and f.kind in ("video", "image") else f.dtype) if f else "?"
            lines.append(_row(fm.source, src_shape, src_dtype, "→", fm.target, fm.shape, fm.dtype, fm.transform))
        lines.append("")
    d = mapping.defaults

    def narrowing(src: str | None) -> str:
        f = feats.get(src or "")
        return f" ({f.dtype}->float32)" if f is not None and f.dtype == "float64" else ""

    lines += ["## Default Values", "", _row("Target Key", "Value", "Reason"), _row("---", "---", "---"),
              _row("reward", f"from `{d.reward_source}`{narrowing(d.reward_source)}" if d.reward_source else d.reward,
                   "source feature" if d.reward_source else "Not present in source"),
              _row("discount", f"from `{d.discount_source}`" if d.discount_source else d.discount,
                   "source feature" if d.discount_source else "Standard default"),
              _row("is_terminal", f"from `{d.is_terminal_source}`" if d.is_terminal_source else d.is_terminal,
                   "source feature" if d.is_terminal_source else "Assume truncation, not termination"),
              _row("is_first", f"from `{d.is_first_source}`" if d.is_first_source else "first step",
                   "source feature" if d.is_first_source else "episode boundary"),
              _row("is_last", f"from `{d.is_last_source}`" if d.is_last_source else "last step",
                   "source feature" if d.is_last_source else "episode boundary"),
              _row("language_instruction", *_language(d)), ""]
    cams = mapping.image_maps()
    if cams:
        lines += ["## Cameras", "", "In this order (by view: primary, secondary, wrist, depth); edit `view` in "
                  "mapping.yaml to change a camera's role and the order.", "",
                  _row("Target Key", "Source Key", "View"), _row("---", "---", "---")]
        lines += [_row(fm.target, fm.source, fm.view or "(none)") for fm in cams] + [""]
    lines += ["## Images", "", f"- encoding: {mapping.images.encoding.upper()}"
              + (f" (quality {mapping.images.jpeg_quality})" if mapping.images.encoding == "jpeg" else " (lossless)"),
              f"- resize: {mapping.images.resize or 'none'}", ""]
    lines += ["## Episode Metadata", "", _row("Target Key", "Source"), _row("---", "---")]
    srcs = {"episode_id": "episode_index", "file_path": "data file of the episode, relative to the source root"}
    lines += [_row(f"episode_metadata/{k}", srcs.get(k, k)) for k in mapping.episode_metadata]
    lines += [_row("(dataset) source format and version", f'"{inv.source_format} {inv.source_version}" '
                   "(inventory.json, final_report.md)"), ""]
    removed = {k: "not in mapping.yaml (removed by the user)" for k in mapping.unmapped(feats)}
    if mapping.dropped or removed:
        lines += ["## Not Mapped", "", _row("Source Key", "Reason"), _row("---", "---")]
        lines += [_row(k, v) for k, v in {**mapping.dropped, **removed}.items()]
        lines.append("")
    narrowed = [fm for fm in mapping.steps if "->float32" in fm.transform or "->int64" in fm.transform]
    if narrowed:
        lines += ["## Type Narrowing", "", "TFRecord float_list is float32 and int64_list is int64; these features "
                  "are narrowed: " + ", ".join(f"`{fm.source}` ({fm.transform})" for fm in narrowed), ""]
    return "\n".join(lines)


def _language(d: Defaults) -> tuple[str, str]:
    """The language_instruction row of mapping.md: (value, reason)."""
    said = f'"{d.instruction}"'
    if d.language_source == "task":
        return ("task text of the step (task_index)" + (f"; {said} where it is empty" if d.instruction else ""),
                "source task text" + ("; --instruction for steps without" if d.instruction else ""))
    if d.instruction:
        return said, "--instruction (no task text in the source)"
    return "empty", "no task text in the source (set one with --instruction)"


def write_spec_outputs(fs, out_root: str, mapping: Mapping, inv: Inventory) -> None:
    write_text_atomic(fs, join(out_root, "mapping.md"), mapping_markdown(mapping, inv))
    write_text_atomic(fs, join(out_root, "mapping.yaml"), mapping_yaml(mapping))

"""--instruction and camera names / views (issue #16, acceptance 2).

* Minari (a generated dataset with pixel observations, no task text) -> RLDS with `--instruction "swing up"`:
  read back with tfds, every step's language_instruction is the instruction and the pixels are
  `observation/image`; validation compares the written language with the instruction (an edited mapping.yaml
  instruction makes `robo-ray validate` fail).
* Without it: one warning line on stderr and a Warnings section in final_report.md counting the episodes.
* Camera views from names (wrist / hand / gripper / eef -> wrist, 16-bit -> depth, first other -> primary, later
  ones secondary), the order they give, an edited view in mapping.yaml changing the order, the names targets with
  camera names (LeRobot) derive from them.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import yaml

from robo_ray.episode import FeatureSpec
from robo_ray.errors import ConfigError
from robo_ray.mapping import Defaults, default_mapping
from robo_ray.readers.base import Inventory
from robo_ray.stages.spec import load_mapping, mapping_markdown, mapping_yaml
from tests.conftest import load_rlds, run_cli
from tests.fixtures import minari_gen

EPISODES = len(minari_gen.LENGTHS)
STEPS = sum(n + 1 for n in minari_gen.LENGTHS)  # Minari's T+1 layout: the final observation is a step


@pytest.fixture(scope="module")
def minari_pixels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Minari dataset with a Dict observation {pixels (JPEG), state}, collected by minari's DataCollector."""
    root = tmp_path_factory.mktemp("minari_pixels")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset_id = minari_gen.make_dataset(root, "image", "hdf5", jpeg=True)
    return root / dataset_id


def _version_dir(out: Path) -> Path:
    (version_dir,) = list((out / "rlds").glob("*/1.0.0"))
    return version_dir


def test_minari_to_rlds_with_instruction(minari_pixels: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("run", str(minari_pixels), str(out), "--instruction", "swing up")
    assert proc.returncode == 0, proc.stderr[-2000:]
    episodes = load_rlds(_version_dir(out))  # tfds, as the loaders read it
    assert len(episodes) == EPISODES
    assert sum(len(e["steps"]["language_instruction"]) for e in episodes) == STEPS
    for e in episodes:
        assert set(e["steps"]["language_instruction"].tolist()) == {b"swing up"}
        assert "observation/pixels" not in e["steps"]
        frames = e["steps"]["observation/image"]
        assert frames.shape == (len(e["steps"]["is_first"]), *minari_gen.IMAGE_HW, 3) and frames.dtype == np.uint8
        assert frames.std() > 10  # real pixels, not a blank image
    md = (out / "mapping.md").read_text()
    assert '| language_instruction | "swing up" | --instruction (no task text in the source) |' in md
    assert "| observation/image | observations/pixels | primary |" in md
    assert "empty language instruction" not in proc.stderr
    assert "## Warnings" not in (out / "final_report.md").read_text()

    # validation compares the written language with the instruction: a different one in mapping.yaml fails
    mapping = yaml.safe_load((out / "mapping.yaml").read_text())
    assert mapping["defaults"]["instruction"] == "swing up"
    mapping["defaults"]["instruction"] = "swing down"
    (out / "mapping.yaml").write_text(yaml.safe_dump(mapping, sort_keys=False))
    proc = run_cli("validate", str(out), "--no-tfds")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "language_instruction differs from the instruction ('swing down')" in proc.stderr


def test_empty_instructions_are_warned_about(minari_pixels: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_cli("run", str(minari_pixels), str(out), "--set", "validate.tfds_readback=false")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if "empty language instruction" in ln]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"warning: {EPISODES} of {EPISODES} written episodes") and "--instruction" in lines[0]
    report = (out / "final_report.md").read_text()
    assert "## Warnings" in report and f"{EPISODES} of {EPISODES} written episodes have an empty" in report
    assert "| language_instruction | empty | no task text in the source (set one with --instruction) |" in \
        (out / "mapping.md").read_text()


def test_instruction_fills_only_empty_tasks() -> None:
    with_tasks = Defaults(language_source="task", instruction="pick")
    assert with_tasks.step_language(["push", "", "push"], 3) == ["push", "pick", "push"]
    assert Defaults(language_source="task").step_language(["push", ""], 2) == ["push", ""]
    assert Defaults(language_source="", instruction="pick").step_language([], 2) == ["pick", "pick"]
    assert Defaults(language_source="").step_language(["ignored"], 1) == [""]


# ---- camera names and views -------------------------------------------------------------------------------------
def _inventory(cams: dict[str, tuple[str | None, str]]) -> Inventory:
    """An inventory with a state, an action and cameras {key: (canonical name or None, dtype)} in that order."""
    feats = {"state": FeatureSpec("state", "tensor", "float32", (3,), role="state", name="observation/state")}
    for key, (name, dtype) in cams.items():
        feats[key] = FeatureSpec(key, "image", dtype, (8, 8, 3 if dtype == "uint8" else 1), codec="png",
                                 role="depth" if dtype == "uint16" else "camera", name=name)
    feats["action"] = FeatureSpec("action", "tensor", "float32", (2,), role="action", name="action")
    return Inventory("cams", "/x", "test", "1", 1, 1, feats, [], 10.0)


def _images(mapping) -> list[tuple[str, str, str | None]]:
    return [(fm.source, fm.target, fm.view) for fm in mapping.image_maps()]


def test_views_from_names_and_their_order() -> None:
    inv = _inventory({"cam.left_wrist": ("observation/left_wrist_rgb", "uint8"),
                      "d435.depth": ("observation/depth_d435", "uint16"),
                      "front": ("observation/front_image", "uint8"),
                      "hand_cam": (None, "uint8"),
                      "side": ("observation/images/side", "uint8"),
                      "gripper.view": ("observation/gripper_view", "uint8"),
                      "ee_cam": ("observation/ee_cam", "uint8"),
                      "eef": ("observation/image_eef", "uint8")})
    m = default_mapping(inv)
    assert _images(m) == [
        ("front", "observation/image_front", "primary"),
        ("side", "observation/image_side", "secondary"),
        ("cam.left_wrist", "observation/image_left_wrist", "wrist"),
        ("hand_cam", "observation/image_hand", "wrist"),
        ("gripper.view", "observation/image_gripper_view", "wrist"),
        ("ee_cam", "observation/image_ee", "wrist"),
        ("eef", "observation/image_eef", "wrist"),  # already of the form: kept
        ("d435.depth", "observation/depth_d435", "depth")]
    # the non-image features keep their places; the images fill theirs in view order
    assert [fm.target for fm in m.steps][0] == "observation/state" and m.steps[-1].target == "action"


@pytest.mark.parametrize("cams,want", [
    ({"observations/pixels": ("observation/pixels", "uint8")}, [("observation/image", "primary")]),
    ({"wrist_image": ("observation/wrist_image", "uint8")}, [("observation/image", "wrist")]),
    ({"image": ("observation/image", "uint8"), "wrist_image": ("observation/wrist_image", "uint8")},
     [("observation/image", "primary"), ("observation/image_wrist", "wrist")]),
    ({"pixels": ("observation/pixels", "uint8"), "rgb": ("observation/rgb", "uint8")},
     [("observation/image", "primary"), ("observation/image_secondary", "secondary")]),
    ({"depth": ("observation/depth_image", "uint16"), "rgb": ("observation/rgb", "uint8")},
     [("observation/image", "primary"), ("observation/depth", "depth")]),
    ({"a": ("observation/top_cam", "uint8"), "b": ("observation/top_camera", "uint8")},
     [("observation/image_top", "primary"), ("observation/image_top_2", "secondary")]),
])
def test_camera_names(cams: dict[str, tuple[str, str]], want: list[tuple[str, str]]) -> None:
    assert [(t, v) for _, t, v in _images(default_mapping(_inventory(cams)))] == want


def test_edited_view_changes_the_order_and_shows_in_mapping_md() -> None:
    inv = _inventory({"wrist_image": ("observation/wrist_image", "uint8"), "image": ("observation/image", "uint8")})
    m = default_mapping(inv)
    assert [t for _, t, _ in _images(m)] == ["observation/image", "observation/image_wrist"]
    data = yaml.safe_load(mapping_yaml(m))
    for step in data["steps"]:
        if step.get("kind") == "image":
            step["view"] = {"primary": "wrist", "wrist": "primary"}[step["view"]]
    edited = load_mapping(yaml.safe_dump(data, sort_keys=False))
    assert _images(edited) == [("wrist_image", "observation/image_wrist", "primary"),
                               ("image", "observation/image", "wrist")]
    md = mapping_markdown(edited, inv)
    cams = md.split("## Cameras", 1)[1]
    assert cams.index("| observation/image_wrist | wrist_image | primary |") < \
        cams.index("| observation/image | image | wrist |")
    data["steps"][1]["view"] = "front"
    with pytest.raises(ConfigError) as exc:
        load_mapping(yaml.safe_dump(data, sort_keys=False))
    assert "steps.1.view" in str(exc.value.__cause__)


def test_lerobot_camera_keys_stay_unique_and_follow_the_views() -> None:
    from robo_ray.formats.lerobot.layout import plan_layout

    inv = _inventory({"wrist_image": ("observation/wrist_image", "uint8"), "image": ("observation/image", "uint8"),
                      "top.image": ("observation/top_image", "uint8")})
    layout = plan_layout(default_mapping(inv))
    assert [c.key for c in layout.cameras] == ["observation.images.image", "observation.images.top",
                                               "observation.images.wrist"]

"""inventory.json's `source` of a feature: "video" for videos, else what the reader says holds the steps (#30:
Discover names no file format of its own)."""
from __future__ import annotations

from robo_ray.episode import FeatureSpec
from robo_ray.readers.base import Inventory
from robo_ray.stages.discover import inventory_dict


def _inventory(**kw) -> Inventory:
    features = {"state": FeatureSpec("state", "tensor", "float32", (3,)),
                "cam": FeatureSpec("cam", "video", "uint8", (4, 4, 3), codec="h264")}
    return Inventory(dataset_name="d", dataset_root="/d", source_format="x", source_version="1", episodes_count=0,
                     total_steps=0, features=features, refs=[], fps=10.0, **kw)


def test_the_source_label_comes_from_the_reader() -> None:
    feats = inventory_dict(_inventory(step_storage="hdf5"))["features"]
    assert (feats["state"]["source"], feats["cam"]["source"]) == ("hdf5", "video")


def test_a_reader_that_says_nothing_gets_a_neutral_label() -> None:
    assert inventory_dict(_inventory())["features"]["state"]["source"] == "data"

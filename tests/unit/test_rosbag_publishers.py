"""Several publishers on one JointState topic, told apart by their joint names (formats/rosbag/publishers.py)."""
from __future__ import annotations

import numpy as np
import pytest

from robo_ray.errors import DataCorrupt
from robo_ray.formats.rosbag.publishers import Publishers, find_publishers, stream_name
from robo_ray.formats.rosbag.steps import TopicData

ARM = tuple(f"j{k}" for k in range(3))


def test_one_set_of_names_is_one_publisher() -> None:
    assert find_publishers("/js", [(ARM, (3, 3, 0))] * 4) is None
    assert find_publishers("/js", [((), (3, 0, 0)), ((), (4, 0, 0))]) is None  # no names: not told apart


def test_disjoint_sets_are_publishers_in_first_message_order_with_their_parts() -> None:
    layouts = [(("grip",), (1, 0, 0)), (ARM, (3, 3, 0)), (ARM[::-1], (3, 3, 0)), (("grip",), (1, 0, 0))]
    pubs = find_publishers("/js", layouts)
    assert isinstance(pubs, Publishers)
    assert pubs.groups == (("grip",), ARM)
    assert pubs.parts == {"position": (0, 1), "velocity": (1,)}
    assert pubs.names("position") == ("grip", *ARM) and pubs.names("velocity") == ARM
    assert pubs.streams == ["/js[grip]", "/js[j0..j2]"] == [stream_name("/js", g) for g in pubs.groups]


@pytest.mark.parametrize("other", [("j2", "grip"), ("grip", "grip")])
def test_sets_that_share_a_joint_are_not_merged(other: tuple[str, ...]) -> None:
    why = find_publishers("/js", [(ARM, (3, 0, 0)), (other, (2, 0, 0))])
    assert isinstance(why, str) and "share joints" in why


def _topic(log: list[int], time: list[int], values: list[object]) -> TopicData:
    return TopicData(log=log, time=time, values=values, stamped=True)


def test_split_routes_each_message_to_its_publisher_in_its_joint_order() -> None:
    pubs = find_publishers("/js", [(ARM, (3, 0, 0)), (("grip",), (1, 0, 0))])
    assert isinstance(pubs, Publishers)
    values = [(ARM, {"position": np.array([0.0, 1.0, 2.0])}), (("grip",), {"position": np.array([9.0])}),
              (ARM[::-1], {"position": np.array([12.0, 11.0, 10.0])})]
    got = pubs.split(_topic([1, 2, 3], [10, 20, 30], values), "bag x")
    arm, grip = got["/js[j0..j2]"], got["/js[grip]"]
    assert (arm.log, arm.time, grip.log, grip.time) == ([1, 3], [10, 30], [2], [20])
    assert arm.stamped and grip.stamped and not arm.unset
    np.testing.assert_array_equal(arm.values[1]["position"], [10.0, 11.0, 12.0])
    np.testing.assert_array_equal(grip.values[0]["position"], [9.0])
    with pytest.raises(DataCorrupt, match=r"joints \['base'\] is none of the first bag's publishers"):
        pubs.split(_topic([1], [1], [(("base",), None)]), "bag x")
    with pytest.raises(DataCorrupt, match="none of the first bag's publishers"):
        pubs.split(_topic([1], [1], [(("j0", "j1"), None)]), "bag x")  # a subset of a publisher's joints


def test_a_publisher_that_never_sets_its_stamps_takes_its_receive_times() -> None:
    pubs = find_publishers("/js", [(ARM, (3, 0, 0)), (("grip",), (1, 0, 0))])
    assert isinstance(pubs, Publishers)
    values = [(ARM, None), (("grip",), None), (ARM, None), (("grip",), None)]
    got = pubs.split(_topic([100, 105, 200, 205], [95, 0, 195, 0], values), "bag x")
    arm, grip = got["/js[j0..j2]"], got["/js[grip]"]
    assert (arm.time, arm.stamped, arm.unset) == ([95, 195], True, False)
    assert (grip.time, grip.stamped, grip.unset) == ([105, 205], False, True)


def test_a_publisher_whose_messages_vary_in_size_is_not_merged() -> None:
    why = find_publishers("/js", [(ARM, (3, 3, 0)), (("grip",), (1, 0, 0)), (ARM, (3, 0, 0))])
    assert isinstance(why, str) and "/js[j0..j2] vary in size ([3, 0, 0] / [3, 3, 0]" in why, why

"""Issue #14: a local destination on a multi-node cluster is refused (RR205, exit 2) before anything is written,
unless declared shared (`target.shared`, `--shared-destination`). The 2-node Ray run is
tests/integration/test_multi_node.py; here the policy, with an executor that says how many nodes it runs on."""
from __future__ import annotations

from pathlib import Path

import pytest

from robo_ray.cli import _config, build_parser
from robo_ray.config import load_config
from robo_ray.errors import LocalDestinationOnCluster
from robo_ray.executors.in_process import InProcessExecutor
from robo_ray.stages.destination import check_shared_destination
from robo_ray.stages.pipeline import run_pipeline
from robo_ray.stages.resume import config_differences
from robo_ray.storage import url_to_fs
from tests.fixtures.lerobot_gen import DatasetSpec, write_lerobot_dataset


class OnNodes(InProcessExecutor):
    """The in-process executor, claiming to run on `nodes` nodes; counts how often it was asked."""

    def __init__(self, nodes: int) -> None:
        super().__init__()
        self.nodes, self.asked = nodes, 0

    def node_count(self) -> int:
        self.asked += 1
        return self.nodes


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return write_lerobot_dataset(tmp_path_factory.mktemp("src") / "v21_2ep",
                                 DatasetSpec(version="v2.1", episode_lengths=[5, 6], fps=10))


def _cfg(src: Path, dst: str, *sets: str):
    return load_config(None, ["validate.tfds_readback=false", *sets], **{"source.url": str(src), "target.url": dst})


@pytest.mark.parametrize("dst", ["out", "file://{tmp}/out"])
def test_local_destination_on_two_nodes_is_refused_before_writing(src, tmp_path, dst):
    url = dst.format(tmp=tmp_path) if "{tmp}" in dst else str(tmp_path / dst)
    with pytest.raises(LocalDestinationOnCluster) as err:
        run_pipeline(_cfg(src, url), executor=OnNodes(2))
    line = err.value.line()
    assert line.startswith("error[RR205]: ") and "\n" not in line
    assert url in line and "2 nodes" in line and "--shared-destination" in line and "target.shared" in line
    assert err.value.exit_code == 2
    assert not (tmp_path / "out").exists()  # nothing written, not even the lock


def test_shared_destination_or_one_node_runs(src, tmp_path):
    shared = OnNodes(2)
    outcome = run_pipeline(_cfg(src, str(tmp_path / "shared"), "target.shared=true"), executor=shared)
    assert outcome.exit_code == 0, outcome.message
    assert shared.asked == 0  # declared shared: the cluster is not even asked
    one = OnNodes(1)
    assert run_pipeline(_cfg(src, str(tmp_path / "one")), executor=one).exit_code == 0
    assert one.asked == 1


def test_object_store_destination_is_not_checked(src):
    cfg = _cfg(src, "memory://multi/out")
    fs, _ = url_to_fs(cfg.target.url)
    ex = OnNodes(4)
    check_shared_destination(cfg, fs, ex)
    assert ex.asked == 0


def test_cli_flag_sets_target_shared_and_resume_ignores_it(src, tmp_path):
    parser = build_parser()
    args = parser.parse_args(["run", str(src), str(tmp_path / "o"), "--shared-destination"])
    assert _config(args).target.shared is True
    plain = _config(parser.parse_args(["run", str(src), str(tmp_path / "o")]))
    assert plain.target.shared is False
    # declaring the destination shared changes where a run may go, not its output: --resume accepts either
    assert config_differences(plain.safe_dump(), _config(args).safe_dump()) == []


def test_ray_executor_counts_one_node_without_starting_ray(monkeypatch):
    import ray

    from robo_ray.ray_exec.executor import RayExecutor

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert not ray.is_initialized()
    assert RayExecutor(actors=2).node_count() == 1
    assert RayExecutor(address="local").node_count() == 1
    assert not ray.is_initialized()  # an in-process instance has one node: nothing was started to find out

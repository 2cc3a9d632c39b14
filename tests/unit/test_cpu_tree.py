"""bench/cpu_tree.py counts the CPU of processes the command does not wait for (Ray's daemons are such)."""
from __future__ import annotations

import subprocess
import sys

from bench.cpu_tree import CpuTree

# the command starts a detached grandchild that burns ~0.6 s of CPU after the command itself has exited
_BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
_PARENT = (f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {_BURN!r}], start_new_session=True)\n")


def test_counts_a_grandchild_that_outlives_the_command() -> None:
    tree = CpuTree("test")
    has_cgroup = tree.ok
    proc = subprocess.Popen(tree.wrap([sys.executable, "-c", _PARENT]))
    assert proc.wait(timeout=60) == 0
    total = tree.seconds(settle_s=60)
    if not has_cgroup:  # no writable cgroup on this machine: the bench must say n/a, never a number
        assert total is None
    else:
        assert total is not None and total >= 0.6

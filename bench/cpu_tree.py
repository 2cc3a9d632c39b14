"""CPU seconds of a command and of every process it starts (Ray's GCS, raylet, agents and workers included), from
a cpuacct cgroup of its own. Ray's daemons are not children the command waits for, so `/usr/bin/time` and
`resource.getrusage(RUSAGE_CHILDREN)` miss them; a cgroup counts every process started inside it.

Needs a writable cgroup v1 `cpuacct` or cgroup v2 hierarchy (root on this machine). Where there is none,
`CpuTree.ok` is False and `seconds()` returns None: the bench prints "n/a", it never guesses."""
from __future__ import annotations

import os
import time
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/cpuacct")
_V2 = Path("/sys/fs/cgroup/unified")


class CpuTree:
    """One throw-away cgroup: run `wrap(cmd)` instead of `cmd`, then call `seconds()` after the command exits.

    The command enters the cgroup itself (a shell writes its pid, then execs the command), not through Popen's
    preexec_fn: a fork of a multi-threaded process that runs Python before exec can deadlock on a lock another
    thread held at the fork (seen: a test process with server threads hung in Popen)."""

    def __init__(self, name: str = "bench") -> None:
        self.path: Path | None = None
        for root, usage in ((_V1, "cpuacct.usage"), (_V2, "cpu.stat")):
            cg = root / f"robo-ray-{name}-{os.getpid()}-{time.monotonic_ns()}"
            try:
                cg.mkdir()
            except OSError:
                continue
            if (cg / usage).exists():
                self.path, self._usage = cg, usage
                break
            cg.rmdir()

    @property
    def ok(self) -> bool:
        return self.path is not None

    def wrap(self, cmd: list[str]) -> list[str]:
        """`cmd` started inside the cgroup (and so everything it starts); `cmd` itself without a cgroup."""
        if self.path is None:
            return list(cmd)
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"), *cmd]

    def seconds(self, settle_s: float = 30.0) -> float | None:
        """Total CPU seconds once every process of the cgroup has exited (Ray's daemons outlive the driver by a
        few seconds; waited for up to `settle_s`), then the cgroup is removed. None without a cgroup, or when
        processes were still running after `settle_s` (their CPU would be missing)."""
        if self.path is None:
            return None
        deadline = time.monotonic() + settle_s
        while (self.path / "cgroup.procs").read_text().split():
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)
        text = (self.path / self._usage).read_text()
        if self._usage == "cpuacct.usage":
            total = int(text) / 1e9
        else:
            total = int(dict(ln.split() for ln in text.splitlines())["usage_usec"]) / 1e6
        self.path.rmdir()
        self.path = None
        return total

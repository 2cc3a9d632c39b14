"""robo-ray's own local Ray instance (no cluster to join), started again when it missed Ray's startup deadline.

Ray gives a new raylet a fixed 30 s to register with the GCS (ray/_private/node.py; not configurable) and then
raises "The current node timed out during startup". On a loaded laptop or CI machine that deadline is missed by a
node that is only late. Such a start, and only such a start, is ended (the Ray processes it spawned are killed:
Ray leaves them running when its Node fails in its constructor) and made again, at most START_ATTEMPTS times in
all.
"""
from __future__ import annotations

import logging
from typing import Any

import psutil
import ray

STARTUP_DEADLINE_MISSED = "timed out during startup"  # in Ray's exception when the raylet did not register in time
START_ATTEMPTS = 3

log = logging.getLogger(__name__)


def missed_startup_deadline(exc: BaseException) -> bool:
    return STARTUP_DEADLINE_MISSED in str(exc)


def init_local(**init_kwargs: Any) -> None:
    """`ray.init(address="local", **init_kwargs)`, again after a missed startup deadline; other errors propagate."""
    for attempt in range(1, START_ATTEMPTS + 1):
        before = _descendants()
        try:
            ray.init(address="local", **init_kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for the missed deadline
            if not missed_startup_deadline(exc) or attempt == START_ATTEMPTS:
                raise
            _kill({p for p in _descendants() - before if _is_ray(p)})
            ray.shutdown()
            log.warning("Ray's local instance missed Ray's 30 s startup deadline (a loaded machine?): starting it "
                        "again (attempt %d of %d)", attempt + 1, START_ATTEMPTS)


def _descendants() -> set[psutil.Process]:
    return set(psutil.Process().children(recursive=True))


def _is_ray(p: psutil.Process) -> bool:
    """Whether a process is Ray's (gcs_server, raylet, its Python daemons and workers): the driver's other children
    (started by Discover while Ray starts in the background) are left alone."""
    try:
        return "ray" in p.name() or any("ray" in part for part in p.cmdline())
    except psutil.Error:
        return False


def _kill(procs: set[psutil.Process]) -> None:
    """SIGKILL `procs` (works on a stopped process too) and reap them."""
    for p in procs:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(list(procs), timeout=5)

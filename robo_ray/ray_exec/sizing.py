"""How big the Convert stage's actor pool may grow, and asking an autoscaling cluster for the room.

The pool's *maximum* comes from the cluster's ceiling, not from what is up when the job starts: on an autoscaling
cluster the ceiling is what the autoscaler may grow to (its node groups' CPUs x their `max_count`, when Ray
exposes the cluster config: autoscaler v2, KubeRay in-tree autoscaling), else `--max-actors N`, else the CPUs
present. `ResourceAsk` turns the pool's maximum into `ray.autoscaler.sdk.request_resources` bundles (one per
actor), so the autoscaler adds nodes before Ray Data's pool can use them; the ask shrinks with the units left, so
nodes idle at the tail can scale down, and is withdrawn at the end.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import ray

MODES = ("safe", "parallel-half", "parallel-max")
log = logging.getLogger("robo_ray.ray_exec")


def actors_for_mode(mode: str, cluster_cpus: float, actors: int | None = None) -> int:
    """Actor count for a mode on a cluster with `cluster_cpus` CPUs (explicit `actors` wins)."""
    if actors:
        return max(1, int(actors))
    cpus = max(1, int(cluster_cpus))
    if mode == "safe":
        return 1
    if mode == "parallel-half":
        return max(1, cpus // 2)
    if mode == "parallel-max":
        return max(1, cpus - 1)
    raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


def autoscaler_ceiling_cpus() -> float | None:
    """The CPUs the cluster may grow to, from the autoscaler's node groups (CPU x max_count, plus the head's), or
    None when Ray does not expose the cluster config (autoscaler v1, a fixed cluster, the in-process instance)."""
    try:
        config = ray._private.state.state.get_cluster_config()  # the source Ray Data's own autoscaler reads
    except Exception as exc:  # noqa: BLE001 - private API: absent or changed means "not exposed"
        log.debug("no cluster config: %s", exc)
        return None
    groups = getattr(config, "node_group_configs", None) if config else None
    if not groups:
        return None
    total = 0.0
    for group in groups:
        cpus = float((getattr(group, "resources", None) or {}).get("CPU", 0))
        total += cpus * max(0, int(getattr(group, "max_count", 0) or 0))
    return total or None


@dataclass(frozen=True)
class PoolSize:
    """Ray Data's `ActorPoolStrategy(min_size, max_size, initial_size)` for one job, and the CPUs per actor."""

    min_size: int
    initial_size: int
    max_size: int
    cpus_per_actor: float

    @classmethod
    def plan(cls, mode: str, actors: int | None, max_actors: int | None, present_cpus: float,
             units: int) -> "PoolSize":
        """`actors` (explicit) or `max_actors` or the mode on the ceiling gives the maximum; the pool starts with
        what the CPUs present can hold and grows as nodes join. Never more actors than units."""
        ceiling = max(present_cpus, autoscaler_ceiling_cpus() or 0.0)
        if actors:
            top = int(actors)
        elif max_actors:
            top = int(max_actors)
        else:
            top = actors_for_mode(mode, ceiling)
        top = max(1, min(top, max(1, units)))
        # more actors than CPUs (`--actors 4` on 2 CPUs) share them; an elastic maximum asks for whole CPUs
        elastic = bool(max_actors) and not actors
        cpus = 1.0 if elastic or top <= max(ceiling, 1.0) else max(0.01, round(max(ceiling, 1.0) / top, 2))
        fits_now = int(present_cpus // cpus) if cpus else top
        initial = max(1, min(top, fits_now))
        return cls(min_size=1, initial_size=initial, max_size=top, cpus_per_actor=cpus)


class ResourceAsk:
    """The job's standing ask to the autoscaler (`ray.autoscaler.sdk.request_resources`): one bundle per actor it
    could still use. Only on a cluster this executor joined (an in-process instance has no autoscaler to ask).

    `request_resources` is one value per cluster, not per caller, and Ray Data's autoscaling coordinator (an actor
    merging its executions' requests) overwrites it on every change and every 20 s: an ask sent once was gone
    within seconds, and the autoscaler removed the node it had just added as idle. A thread re-sends the ask every
    REFRESH_S, so the autoscaler (which looks every few seconds, and removes a node only after its idle timeout)
    sees it. Registering as a requester of that coordinator instead would reserve the CPUs to the ask itself, and
    Ray Data's own execution (whose budget is what the coordinator reserves for it) would then see none."""

    REFRESH_S = 2.0

    def __init__(self, active: bool, cpus_per_actor: float) -> None:
        self.active, self.cpus = active, cpus_per_actor
        self.asked: int | None = None
        self._want = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def want(self, actors: int) -> None:
        """Ask for room for `actors` actors (a smaller ask releases nodes the job no longer needs)."""
        if not self.active:
            return
        actors = max(0, int(actors))
        changed = actors != self._want
        self._want = actors
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="robo-ray-resource-ask", daemon=True)
            self._thread.start()
        if changed:
            self._wake.set()

    def withdraw(self) -> None:
        """The job is done with the cluster: the ask goes to nothing."""
        if self._thread is None:
            return
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        self._thread = None

    def _loop(self) -> None:
        from ray.autoscaler.sdk import request_resources

        while True:
            n = 0 if self._stop.is_set() else self._want
            try:
                request_resources(bundles=[{"CPU": self.cpus}] * n)
                self.asked = n
            except Exception as exc:  # noqa: BLE001 - no autoscaler API: the pool still uses what is up
                log.debug("resource ask failed: %s", exc)
                return
            if self._stop.is_set():
                return
            self._wake.wait(self.REFRESH_S)
            self._wake.clear()

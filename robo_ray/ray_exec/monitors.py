"""The driver's threads beside the Ray Dataset: the watchdog that kills the actors of overdue attempts, and the
sampler of the actors in flight (what the pool used at peak, for the final report)."""
from __future__ import annotations

import logging
import threading
from typing import Any

import ray

from robo_ray.watchdog import Limits

USAGE_POLL_S = 1.0  # how often the driver samples the actors in flight (the peak in the report)
log = logging.getLogger("robo_ray.ray_exec")


class PoolUsage:
    """What the pool really used: the peak of actors converting at once (sampled), and every actor and node that
    converted a unit."""

    def __init__(self) -> None:
        self.peak_actors = 0
        self.peak_hosts = 0
        self.workers: set[str] = set()
        self.nodes: set[str] = set()

    def sample(self, in_flight: dict[int, str]) -> None:
        workers = set(in_flight.values())
        self.peak_actors = max(self.peak_actors, len(workers))
        self.peak_hosts = max(self.peak_hosts, len({w.rsplit(":", 1)[0] for w in workers}))

    def converted_on(self, worker: str, node: str) -> None:
        self.workers.add(worker)
        self.nodes.add(node)

    def describe(self) -> str:
        return (f"at peak {max(self.peak_actors, 1 if self.workers else 0)} actor(s) converting at once; "
                f"{len(self.workers)} actor(s) on {len(self.nodes)} node(s) converted units")


class UsageSampler:
    """Driver thread: samples the coordinator's units in flight every USAGE_POLL_S (the pool's peak)."""

    def __init__(self, coordinator: Any, usage: PoolUsage) -> None:
        self.coordinator, self.usage = coordinator, usage
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="robo-ray-usage", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(USAGE_POLL_S):
            try:
                self.usage.sample(ray.get(self.coordinator.in_flight.remote(), timeout=30))
            except Exception as exc:  # noqa: BLE001 - the coordinator is busy or gone: sample again later
                log.debug("usage: no answer from the coordinator: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


class Watchdog:
    """Driver thread: kills the actors of attempts the coordinator finds overdue (robo_ray/ray_exec/executor.py's docstring)."""

    def __init__(self, coordinator: Any, limits: Limits) -> None:
        self.coordinator, self.limits = coordinator, limits
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.limits.active:
            self._thread = threading.Thread(target=self._loop, name="robo-ray-watchdog", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.limits.poll_interval()):
            try:
                overdue = ray.get(self.coordinator.overdue.remote(), timeout=60)
            except Exception as exc:  # noqa: BLE001 - the coordinator is busy or gone: look again later
                log.debug("watchdog: no answer from the coordinator: %s", exc)
                continue
            for unit, actor, reason in overdue:
                log.info("unit %s: %s; killing its actor", unit, reason)
                try:
                    ray.kill(actor, no_restart=False)
                except Exception as exc:  # noqa: BLE001 - already dead
                    log.debug("watchdog: kill failed: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

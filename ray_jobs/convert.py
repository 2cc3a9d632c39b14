"""Entrypoint for `ray job submit`: the same options as `robo-ray run`, executed on the job's Ray cluster.

    ray job submit --address http://HEAD:8265 --working-dir . -- \\
        python -m ray_jobs.convert SRC DST [--mode parallel-max | --actors N] [--resume] [--overwrite] ...

Differences from `robo-ray run`: the default mode is `parallel-max` (the CLI's default is in-process, no Ray), and
the executor connects to the cluster named by `RAY_ADDRESS` (set by the job supervisor) unless `--address` is
given. Job logs get a one-line status every ROBO_RAY_STATUS_INTERVAL_S seconds (default 10). The exit code is
the CLI's (0 ok, 2 usage, 3 validation/quarantine, 4 conflict, 1 other), so a quarantine marks the job FAILED.
"""
from __future__ import annotations

import sys
from typing import Sequence


def build_argv(argv: Sequence[str]) -> list[str]:
    """`robo-ray run` argv for these job arguments (`--debug` moved before the subcommand, Ray mode default)."""
    args = list(argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    if not any(a == "--mode" or a.startswith("--mode=") or a == "--actors" or a.startswith("--actors=")
               for a in args):
        args += ["--mode", "parallel-max"]
    return (["--debug"] if debug else []) + ["run", *args]


def main(argv: Sequence[str] | None = None) -> int:
    from robo_ray.cli import main as cli_main

    return cli_main(build_argv(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    from robo_ray.cli import exit_now

    exit_now(main())  # as `robo-ray`: no interpreter teardown after the job's output is committed

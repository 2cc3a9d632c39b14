"""Executors: what runs the Convert stage's units. `base` holds the `Executor` protocol and `JobSpec` (what a
worker needs); `in_process` the sequential executor. The Ray actor-pool executor is robo_ray.ray_exec (the only
place besides ray_jobs/ that imports Ray)."""

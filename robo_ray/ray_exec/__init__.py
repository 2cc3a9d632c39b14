"""Ray execution of the Convert stage (a Ray Dataset on Ray Data's autoscaling actor pool) and the Publisher actor. The only package of
robo_ray that imports Ray; see executor.py for the design."""
from robo_ray.ray_exec.executor import RayExecutor, actors_for_mode

__all__ = ["RayExecutor", "actors_for_mode"]

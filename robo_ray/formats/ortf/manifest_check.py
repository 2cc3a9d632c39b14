"""meta/manifest.json of an ORTF dataset checked against the v0.2 spec before anything else is read
(`validate_manifest`), and the camera sensors' resolution and frame rate it declares."""
from __future__ import annotations

from typing import Any

from robo_ray.errors import SourceFormatError, UnknownFormat
from robo_ray.safety import MAX_DIM

SUPPORTED = ("0.2",)
REQUIRED = {"ortf_version": str, "dataset_id": str, "robot": dict, "action_space": dict,
            "observation_space": dict, "sensors": list, "frames": dict}


def validate_manifest(obj: Any) -> dict[str, Any]:
    """Check meta/manifest.json against the v0.2 spec; returns it, or raises one clear line."""
    where = "meta/manifest.json"
    if not isinstance(obj, dict):
        raise SourceFormatError(f"{where}: expected a JSON object")
    version = obj.get("ortf_version")
    if not isinstance(version, str):
        raise SourceFormatError(f"{where}: required field `ortf_version` is missing or not a string")
    if version not in SUPPORTED and not any(version.startswith(v + ".") for v in SUPPORTED):
        raise UnknownFormat(f"{where}: ortf_version {version!r} is not supported (supported: "
                            f"{', '.join(SUPPORTED)})")
    for key, typ in REQUIRED.items():
        if key not in obj:
            raise SourceFormatError(f"{where}: required field `{key}` is missing")
        if not isinstance(obj[key], typ):
            raise SourceFormatError(f"{where}: `{key}` must be a JSON {typ.__name__.replace('dict', 'object')}"
                                    .replace("list", "array").replace("str", "string"))
    names = set()
    for i, s in enumerate(obj["sensors"]):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not isinstance(s.get("type"), str):
            raise SourceFormatError(f"{where}: sensors[{i}] needs a string `name` and `type`")
        if s["name"] in names:
            raise SourceFormatError(f"{where}: sensor name {s['name']!r} appears twice")
        names.add(s["name"])
        if s["type"] in ("camera", "depth_camera"):
            sensor_resolution(s, where)
            sensor_fps(s, where)
    obs = obj["observation_space"]
    images, state = obs.get("images", {}), obs.get("state", {})
    if not isinstance(images, dict) or not all(isinstance(v, str) for v in images.values()):
        raise SourceFormatError(f"{where}: observation_space.images must map observation keys to sensor names")
    for cam, sensor in images.items():
        if sensor not in names:
            raise SourceFormatError(f"{where}: observation_space.images.{cam} names unknown sensor {sensor!r}")
    if not isinstance(state, dict):
        raise SourceFormatError(f"{where}: observation_space.state must be an object")
    for comp, spec in state.items():
        dim = spec.get("dim") if isinstance(spec, dict) else None
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 < dim <= MAX_DIM:
            raise SourceFormatError(f"{where}: observation_space.state.{comp}.dim must be a positive integer")
    dims = obj["action_space"].get("dimensions", [])
    if not isinstance(dims, list):
        raise SourceFormatError(f"{where}: action_space.dimensions must be an array")
    return obj


def sensor_resolution(sensor: dict[str, Any], where: str) -> tuple[int, int]:
    """(height, width) of a camera sensor, each in 1..MAX_DIM (SourceFormatError otherwise)."""
    res = sensor.get("resolution")
    w, h = (res.get("width"), res.get("height")) if isinstance(res, dict) else (None, None)
    for v in (w, h):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_DIM:
            raise SourceFormatError(f"{where}: sensor {sensor.get('name')!r} needs resolution.width/height "
                                    f"in 1..{MAX_DIM}")
    return h, w  # type: ignore[return-value]


def sensor_fps(sensor: dict[str, Any], where: str) -> float:
    """A camera sensor's positive frame rate (SourceFormatError otherwise)."""
    fps = sensor.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= 10_000:
        raise SourceFormatError(f"{where}: sensor {sensor.get('name')!r} needs a positive fps")
    return float(fps)

"""k8s/ manifests against the KubeRay RayJob CRD (openAPIV3Schema, strict: unknown keys fail) plus the operator's
extra rules; the Dockerfile against the pinned Ray version and the files it and the manifests reference."""
from __future__ import annotations

import copy
import re
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO, require_shared

SUBMISSION_MODES = {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"}
SECRET_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|ACCESS_KEY|PRIVATE_KEY|API_KEY)", re.I)


def _strict(schema: Any) -> Any:
    """Close every object schema that lists properties (what `kubectl --validate=strict` enforces)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@pytest.fixture(scope="module")
def rayjob_schema() -> dict[str, Any]:
    crd_path = require_shared("k8s/ray.io_rayjobs.yaml")
    crd = yaml.safe_load(crd_path.read_text())
    v1 = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return _strict(v1["schema"]["openAPIV3Schema"])


def _manifests() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted((REPO / "k8s").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                docs.append((path.name, doc))
    return docs


def _validate(doc: dict[str, Any], schema: dict[str, Any]) -> None:
    if doc["kind"] == "RayJob":
        jsonschema.validate(doc, schema)
        _operator_rules(doc)
    elif doc["kind"] == "RayCluster":  # same schema as a RayJob's embedded rayClusterSpec
        jsonschema.validate(doc["spec"], schema["properties"]["spec"]["properties"]["rayClusterSpec"])
    else:
        raise AssertionError(f"unexpected kind {doc['kind']}")
    assert doc["apiVersion"] == "ray.io/v1"
    _no_inline_secrets(doc)


def _operator_rules(doc: dict[str, Any]) -> None:
    spec = doc["spec"]
    assert spec.get("rayClusterSpec") or spec.get("clusterSelector"), "rayClusterSpec or clusterSelector required"
    assert spec.get("submissionMode", "K8sJobMode") in SUBMISSION_MODES
    assert spec.get("shutdownAfterJobFinishes") is True and spec.get("ttlSecondsAfterFinished", 0) > 0
    assert spec.get("jobId"), "a stable jobId so a resubmitted job resumes"
    assert "--resume" in spec["entrypoint"]
    for group in spec["rayClusterSpec"]["workerGroupSpecs"]:
        for c in group["template"]["spec"]["containers"]:
            assert c["resources"]["requests"] == c["resources"]["limits"], "worker requests must equal limits"


def _no_inline_secrets(node: Any) -> None:
    if isinstance(node, dict):
        if "name" in node and "value" in node and SECRET_NAME.search(str(node["name"])):
            raise AssertionError(f"inline secret in env {node['name']}")
        assert node.get("kind") != "Secret", "secrets must not live in k8s/"
        for v in node.values():
            _no_inline_secrets(v)
    elif isinstance(node, list):
        for v in node:
            _no_inline_secrets(v)


def test_there_are_rayjob_manifests() -> None:
    kinds = [d["kind"] for _, d in _manifests()]
    assert kinds.count("RayJob") >= 2


@pytest.mark.parametrize("name,doc", _manifests(), ids=[n for n, _ in _manifests()])
def test_manifest_is_valid(name: str, doc: dict[str, Any], rayjob_schema: dict[str, Any]) -> None:
    _validate(doc, rayjob_schema)


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"].__setitem__("shutdownAfterJobFinished", True),  # misspelled key
    lambda d: d["spec"]["rayClusterSpec"]["headGroupSpec"].__setitem__("rayStartParam", {}),
    lambda d: d["spec"].__setitem__("submissionMode", "BatchMode"),
    lambda d: d["spec"].pop("rayClusterSpec"),
    lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].__setitem__(
        "env", [{"name": "AWS_SECRET_ACCESS_KEY", "value": "hunter2"}]),
    lambda d: d["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    ["resources"]["limits"].__setitem__("cpu", "16"),
])
def test_broken_manifest_fails(mutate, rayjob_schema: dict[str, Any]) -> None:
    doc = copy.deepcopy(next(d for _, d in _manifests() if d["kind"] == "RayJob"))
    mutate(doc)
    with pytest.raises((jsonschema.ValidationError, AssertionError)):
        _validate(doc, rayjob_schema)


def _pinned_ray() -> str:
    text = (REPO / "pyproject.toml").read_text()
    return re.search(r'"ray\[[^\]]*\]==([0-9.]+)"', text).group(1)


def test_dockerfile_matches_pins_and_references_exist() -> None:
    ray_version = _pinned_ray()
    dockerfile = (REPO / "docker/Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", dockerfile, re.M)
    assert bases and all(b == f"rayproject/ray:{ray_version}-py311-cpu" for b in bases), bases
    assert re.search(r"^USER\s+(?!root)\w+", dockerfile, re.M), "image must run as non-root"
    for src in re.findall(r"^COPY\s+(?:--chown\S+\s+)?(?!--from)(\S+)\s", dockerfile, re.M):
        assert (REPO / src).exists(), f"Dockerfile copies missing {src}"
    ignored = (REPO / ".dockerignore").read_text().split()
    assert "tests" in ignored and ".venv" in ignored


def test_manifests_reference_existing_things() -> None:
    ray_version = _pinned_ray()
    for name, doc in _manifests():
        spec = doc["spec"]
        cluster = spec.get("rayClusterSpec", spec)
        assert cluster["rayVersion"] == ray_version, name
        entry = spec.get("entrypoint")
        if entry:
            module = re.search(r"python -m (\S+)", entry).group(1)
            assert (REPO / (module.replace(".", "/") + ".py")).exists(), module
            for cfg in re.findall(r"/home/ray/(configs/\S+)", entry):
                assert (REPO / cfg).exists(), cfg
    runtime_env = yaml.safe_load((REPO / "configs/runtime_env.yaml").read_text())
    assert ".venv" in runtime_env["excludes"]


@pytest.mark.parametrize("name,doc", _manifests(), ids=lambda v: v if isinstance(v, str) else "")
def test_clusters_autoscale_and_jobs_resume(name: str, doc: dict[str, Any]) -> None:
    """Issue #26: every cluster grows with the job (in-tree autoscaler v2, from a small minimum to a larger
    maximum), and a RayJob's retried driver resumes (backoffLimit + --resume)."""
    spec = doc["spec"]["rayClusterSpec"] if doc["kind"] == "RayJob" else doc["spec"]
    assert spec.get("enableInTreeAutoscaling") is True, name
    assert spec["autoscalerOptions"]["version"] == "v2", name
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] < group["maxReplicas"], (name, group["groupName"])
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], (name, group["groupName"])
    if doc["kind"] == "RayJob":
        assert doc["spec"]["backoffLimit"] >= 1 and "--resume" in doc["spec"]["entrypoint"], name

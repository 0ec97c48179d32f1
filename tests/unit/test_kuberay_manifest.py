"""deploy/kuberay/ is a manifest Kubernetes would take and that runs what configs/serve.yaml runs.

The RayService is validated against KubeRay's own schema for it (``deploy/kuberay/schema/``, the
CRD's ``openAPIV3Schema`` as KubeRay ships it), read as JSON Schema by :func:`json_schema`; the
other documents are checked for what every Kubernetes object needs and for the names that tie them
together. No cluster is involved: what only a cluster can prove (the image builds, the pods start,
KubeRay's CEL rules) is not proven here (deploy/kuberay/README.md).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import pytest
import yaml

from strata.config import StrataSettings, load_settings
from tests.layout import ROOT, installed_folders, pyproject

KUBERAY = ROOT / "deploy" / "kuberay"
MANIFEST = KUBERAY / "strata.yaml"
SECRET_EXAMPLE = KUBERAY / "secret.example.yaml"
SCHEMA = KUBERAY / "schema" / "rayservice-v1.7.0.json"
SECRET_NAME = "strata-secrets"

#: Kubernetes' rule for most object names (RFC 1123 labels).
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

#: The keywords a CRD's structural schema may use that :func:`json_schema` understands. A KubeRay
#: update that brings another (x-kubernetes-embedded-resource, say) fails
#: ``test_the_schema_uses_only_keywords_the_translation_knows`` instead of passing unread.
_KNOWN_KEYWORDS = frozenset({
    "$comment", "type", "properties", "required", "items", "additionalProperties", "anyOf", "format",
    "default", "enum", "pattern", "minimum", "maxLength", "minLength", "nullable",
    "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields", "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-validations",
})
#: Keywords whose value is a schema, or a list or map of schemas; every other keyword's is data.
_SUBSCHEMA = ("items", "additionalProperties")
_SUBSCHEMAS = ("anyOf", "allOf", "oneOf")


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A Kubernetes structural schema (OpenAPI v3 with ``x-kubernetes-*`` extensions) as JSON Schema.

    - ``x-kubernetes-int-or-string: true`` becomes ``anyOf: [integer, string]`` (what the API
      server accepts; controller-gen writes that ``anyOf`` too, this does not depend on it);
    - ``nullable: true`` adds ``null`` to the ``type``;
    - an object with ``properties`` and no ``additionalProperties`` gets ``additionalProperties:
      false`` unless ``x-kubernetes-preserve-unknown-fields``: the API server would drop an unknown
      field, and ``kubectl apply`` (strict field validation) refuses it, so a misspelt key fails;
    - the other ``x-kubernetes-*`` keys are dropped: list and map types only matter to merges,
      and ``x-kubernetes-validations`` (CEL rules) are not evaluated.

    ``format`` is checked by :data:`FORMATS` (int32 and int64 ranges).
    """
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA and isinstance(value, dict):
            out[key] = json_schema(value)
        elif key in _SUBSCHEMAS:
            out[key] = [json_schema(sub) for sub in value]
        elif not key.startswith("x-kubernetes-") and key != "nullable":
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    open_ended = "additionalProperties" in out or node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in out and not open_ended:
        out["additionalProperties"] = False
    return out


FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("int32")
def _int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


def kuberay_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA.read_text())
    return schema


@cache
def rayservice_validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(json_schema(kuberay_schema()), format_checker=FORMATS)


def rayservice_errors(document: dict[str, Any]) -> list[str]:
    """What KubeRay v1.7.0's RayService schema finds wrong in ``document``, as "path: message"."""
    return [
        "/".join(str(p) for p in error.absolute_path) + f": {error.message}"
        for error in rayservice_validator().iter_errors(document)
    ]


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d is not None]


def the(kind: str, docs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    [document] = [d for d in (docs if docs is not None else documents()) if d["kind"] == kind]
    return document


def ray_containers(rayservice: dict[str, Any]) -> list[dict[str, Any]]:
    cluster = rayservice["spec"]["rayClusterConfig"]
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    return [c for t in templates for c in t["spec"]["containers"]]


def secret_key_refs(node: Any) -> Iterator[dict[str, str]]:
    if isinstance(node, dict):
        if "secretKeyRef" in node:
            yield node["secretKeyRef"]
        for value in node.values():
            yield from secret_key_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from secret_key_refs(value)


def schema_keywords(node: dict[str, Any]) -> Iterator[str]:
    for key, value in node.items():
        yield key
        if key == "properties":
            for sub in value.values():
                yield from schema_keywords(sub)
        elif key in _SUBSCHEMA and isinstance(value, dict):
            yield from schema_keywords(value)
        elif key in _SUBSCHEMAS:
            for sub in value:
                yield from schema_keywords(sub)


@pytest.mark.parametrize(
    "document",
    [*documents(), yaml.safe_load(SECRET_EXAMPLE.read_text())],
    ids=lambda d: f"{d.get('kind')}/{d.get('metadata', {}).get('name')}",
)
def test_every_document_has_an_api_version_a_kind_and_a_name(document: dict[str, Any]) -> None:
    assert isinstance(document.get("apiVersion"), str) and re.match(r"^([a-z0-9.-]+/)?v\d+\w*$", document["apiVersion"])
    assert isinstance(document.get("kind"), str) and document["kind"][:1].isupper()
    assert _NAME.match(document["metadata"]["name"]), document["metadata"]


def test_the_manifest_holds_milvus_beside_the_rayservice() -> None:
    kinds = sorted(d["kind"] for d in documents())
    assert kinds == ["ConfigMap", "Deployment", "NetworkPolicy", "PersistentVolumeClaim", "RayService", "Service"]


def test_the_rayservice_is_valid_for_kuberays_schema() -> None:
    assert rayservice_errors(the("RayService")) == []


def _head(spec: dict[str, Any]) -> dict[str, Any]:
    head: dict[str, Any] = spec["rayClusterConfig"]["headGroupSpec"]
    return head


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    worker: dict[str, Any] = spec["rayClusterConfig"]["workerGroupSpecs"][0]
    return worker


@pytest.mark.parametrize(
    ("change", "where"),
    [
        pytest.param(lambda s: _worker(s).update(maxReplicas="8"), "maxReplicas", id="count-as-string"),
        pytest.param(lambda s: _head(s)["rayStartParams"].update({"num-cpus": 0}), "num-cpus", id="start-param"),
        # Caught by the translation's additionalProperties: false.
        pytest.param(lambda s: s["rayClusterConfig"].update(enableInTreeAutoscalling=True), "rayClusterConfig",
                     id="misspelt-field"),
        pytest.param(lambda s: s["rayClusterConfig"]["authOptions"].update(mode="password"), "mode", id="enum"),
        pytest.param(lambda s: _head(s)["template"]["spec"]["containers"][0].pop("name"), "containers/0",
                     id="missing-required"),
        # Caught by the format checker.
        pytest.param(lambda s: _worker(s).update(replicas=2**31), "replicas", id="int32-range"),
        pytest.param(lambda s: _worker(s)["template"]["spec"]["containers"][0]["resources"]["limits"].update(cpu=4.5j),
                     "cpu", id="int-or-string"),
    ],
)
def test_validation_fails_on_a_broken_rayservice(change: Any, where: str) -> None:
    broken = copy.deepcopy(the("RayService"))
    change(broken["spec"])
    errors = rayservice_errors(broken)
    assert errors and any(where in e for e in errors), errors


def test_the_schema_uses_only_keywords_the_translation_knows() -> None:
    schema = kuberay_schema()
    assert set(schema_keywords(schema)) <= _KNOWN_KEYWORDS, set(schema_keywords(schema)) - _KNOWN_KEYWORDS
    assert "v1.7.0" in schema["$comment"] and "ray-project/kuberay" in schema["$comment"]


def test_the_serve_config_is_configs_serve_yaml() -> None:
    from ray.serve.schema import ServeDeploySchema

    embedded = yaml.safe_load(the("RayService")["spec"]["serveConfigV2"])
    assert embedded == yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text())
    ServeDeploySchema.model_validate(embedded)  # what `serve deploy` (and KubeRay, through the dashboard) checks
    [app] = embedded["applications"]
    assert {d["name"] for d in app["deployments"]} == {"api", "embedding"}
    assert all("autoscaling_config" in d for d in app["deployments"])


def test_the_ray_version_and_the_image_are_pyprojects_ray() -> None:
    [ray] = [d for d in pyproject()["project"]["dependencies"] if d.startswith("ray[serve]==")]
    version = ray.partition("==")[2]
    assert the("RayService")["spec"]["rayClusterConfig"]["rayVersion"] == version
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    assert f"FROM rayproject/ray:{version}-py311\n" in dockerfile
    copied = set(re.findall(r"^COPY --chown=\S+ (\S+) \1$", dockerfile, re.MULTILINE))
    assert {folder.name for folder in installed_folders().values()} | {"configs"} <= copied


def test_every_ray_pod_gets_strata_settings_that_load() -> None:
    rayservice = the("RayService")
    envs = [c["env"] for c in ray_containers(rayservice)]
    assert len(envs) == 2 and envs[0] == envs[1]  # the head's and the workers' (a YAML anchor)
    env = envs[0]
    names = [e["name"] for e in env]
    # Kubernetes expands $(NAME) only from variables listed before.
    assert names.index("MILVUS_ROOT_PASSWORD") < names.index("STRATA_MILVUS__TOKEN")
    secrets = {"milvus-root-password": "pw-123456", "admin-key": "admin-abc", "pii-hash-key": "hash-xyz"}
    values: dict[str, str] = {}
    for e in env:
        value = secrets[e["valueFrom"]["secretKeyRef"]["key"]] if "valueFrom" in e else e["value"]
        values[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: values[m.group(1)], value)

    for name in values:
        if name.startswith("STRATA_"):  # every override names a real setting (a typo would be ignored)
            model: Any = StrataSettings
            for part in name.removeprefix("STRATA_").lower().split("__"):
                assert part in model.model_fields, f"{name}: no setting {part!r}"
                model = model.model_fields[part].annotation
    with pytest.MonkeyPatch.context() as env_vars:
        for name, value in values.items():
            env_vars.setenv(name, value)
        settings = load_settings(ROOT / "configs" / "default.yaml")
    assert settings.milvus.uri == "http://strata-milvus:19530"
    assert settings.milvus.token == "root:pw-123456"
    assert settings.auth.admin_key == "admin-abc"
    assert settings.pii.hash_key == "hash-xyz"


def test_every_secret_the_manifest_reads_is_in_the_example_secret() -> None:
    docs = documents()
    refs = list(secret_key_refs(docs))
    assert refs and {r["name"] for r in refs} == {SECRET_NAME}
    auth = the("RayService", docs)["spec"]["rayClusterConfig"]["authOptions"]
    assert auth == {"mode": "token", "secretName": SECRET_NAME}
    example = yaml.safe_load(SECRET_EXAMPLE.read_text())
    assert example["metadata"]["name"] == SECRET_NAME
    # KubeRay reads the Ray token from the key `auth_token`.
    assert set(example["stringData"]) == {r["key"] for r in refs} | {"auth_token"}
    assert "kind: Secret" not in MANIFEST.read_text()  # made with random values, never applied from here


def test_milvus_is_reachable_where_strata_looks_and_keeps_its_data() -> None:
    docs = documents()
    deployment, service, policy = the("Deployment", docs), the("Service", docs), the("NetworkPolicy", docs)
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [port] = service["spec"]["ports"]
    assert f"http://{service['metadata']['name']}:{port['port']}" == next(
        e["value"] for e in ray_containers(the("RayService", docs))[0]["env"] if e["name"] == "STRATA_MILVUS__URI"
    )
    # The Ray pods are the ones the policy lets in.
    [rule] = policy["spec"]["ingress"]
    allowed = rule["from"][0]["podSelector"]["matchLabels"]
    cluster = the("RayService", docs)["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert allowed.items() <= group["template"]["metadata"]["labels"].items()
    # Its data is on the claim, and etcd's config on the ConfigMap.
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    claim = the("PersistentVolumeClaim", docs)["metadata"]["name"]
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == claim
    assert volumes["etcd-config"]["configMap"]["name"] == the("ConfigMap", docs)["metadata"]["name"]
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    assert env["COMMON_SECURITY_AUTHORIZATIONENABLED"]["value"] == "true"
    assert deployment["spec"]["strategy"]["type"] == "Recreate"

"""The shipped configuration files parse and mean what they say."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from strata.config import StrataSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_default_yaml_is_the_defaults() -> None:
    assert load_settings(ROOT / "configs" / "default.yaml").to_dict() == StrataSettings().to_dict()


def test_milvus_server_profile_points_at_a_server_and_requires_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STRATA_MILVUS__TOKEN", raising=False)
    with pytest.raises(ValueError, match=r"milvus\.token is empty: set STRATA_MILVUS__TOKEN"):
        load_settings(ROOT / "configs" / "milvus-server.yaml")
    monkeypatch.setenv("STRATA_MILVUS__TOKEN", "root:Milvus")
    settings = load_settings(ROOT / "configs" / "milvus-server.yaml")
    assert settings.milvus.uri and settings.milvus.address == settings.milvus.uri
    assert settings.milvus.token == "root:Milvus"
    monkeypatch.delenv("STRATA_MILVUS__TOKEN")
    monkeypatch.setenv("STRATA_MILVUS__ALLOW_NO_TOKEN", "true")
    assert load_settings(ROOT / "configs" / "milvus-server.yaml").milvus.token == ""


def test_serve_config_validates_against_serve_schema() -> None:
    from ray.serve.schema import ServeDeploySchema

    config = ServeDeploySchema.model_validate(yaml.safe_load((ROOT / "configs" / "serve.yaml").read_text()))
    [app] = config.applications
    module, _, attr = app.import_path.partition(":")
    assert callable(getattr(importlib.import_module(module), attr))
    names = {d.name for d in app.deployments}
    assert names == {"api", "embedding"}
    for deployment in app.deployments:
        scaling = deployment.autoscaling_config
        assert isinstance(scaling, dict)  # as YAML gives it
        assert scaling["min_replicas"] >= 1 and scaling["max_replicas"] >= scaling["min_replicas"]
        assert scaling["target_ongoing_requests"] > 0
    # The proxy's timeout is the stack's: Strata's own deadline plus the margin, so Strata answers first.
    from strata_cli.stack import PROXY_TIMEOUT_MARGIN_S

    strata = load_settings(ROOT / app.args["config"])
    assert config.http_options.request_timeout_s == strata.serve.request_timeout_s + PROXY_TIMEOUT_MARGIN_S


def test_cluster_yaml_has_head_and_autoscaling_workers() -> None:
    cluster = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    types = cluster["available_node_types"]
    assert cluster["head_node_type"] in types
    workers = [t for name, t in types.items() if name != cluster["head_node_type"]]
    assert workers and all(0 <= t["min_workers"] <= t["max_workers"] <= cluster["max_workers"] for t in workers)


def test_cluster_yaml_starts_every_node_with_token_auth_and_no_secret_on_a_command_line() -> None:
    cluster = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    starts = [c for c in cluster["head_start_ray_commands"] + cluster["worker_start_ray_commands"] if " start " in c]
    assert len(starts) == 2 and all(c.startswith("RAY_AUTH_MODE=token ") for c in starts), starts
    assert "--dashboard-host=127.0.0.1" in starts[0]
    mounts = {Path(target).name for target in cluster["file_mounts"]}
    assert {"auth_token", "milvus-token"} <= mounts
    commands = " ".join(
        cluster["setup_commands"] + cluster["head_start_ray_commands"] + cluster["worker_start_ray_commands"]
    )
    assert "RAY_AUTH_TOKEN=" not in commands and "--token" not in commands


def test_context_policies_take_lists_or_per_layer_settings() -> None:
    from strata.config import LayerPolicy

    settings = StrataSettings.model_validate({"context": {"policies": {
        "triage": ["episodic", "procedural"],
        "research": {"semantic": {"top_k": 12, "weight": 3}, "episodic": {}},
    }}})
    assert settings.context.policies["triage"] == {"episodic": LayerPolicy(), "procedural": LayerPolicy()}
    assert settings.context.policies["research"]["semantic"] == LayerPolicy(top_k=12, weight=3.0)
    assert StrataSettings.from_dict(settings.to_dict()) == settings


@pytest.mark.parametrize(
    ("context", "phrase"),
    [
        ({"policies": {"x": ["episodic", "astral"]}}, "unknown layer"),
        ({"policies": {"x": {"semantic": {"weight": -1}}}}, "greater than or equal"),
        ({"layer_timeouts": {"semantic": 0}}, "(0, 60]"),
        ({"layer_timeouts": {"astral": 1}}, "unknown layer"),
    ],
)
def test_bad_context_settings_say_what_to_fix(context: dict[str, Any], phrase: str) -> None:
    with pytest.raises(ValueError, match=re.escape(phrase)):
        StrataSettings.model_validate({"context": context})


def test_layer_deadlines_default_and_override() -> None:
    ctx = StrataSettings.model_validate({"context": {"layer_timeouts": {"semantic": 5}}}).context
    assert ctx.timeout_for("semantic") == 5.0 and ctx.timeout_for("episodic") == ctx.layer_timeout_s


def test_the_command_says_which_setting_is_wrong_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from strata_cli.main import main

    monkeypatch.setenv("STRATA_MILVUS__URI", "http://milvus.internal:19530")
    monkeypatch.delenv("STRATA_MILVUS__TOKEN", raising=False)
    assert main(["status", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("strata status: invalid settings: milvus:") and "STRATA_MILVUS__TOKEN" in err
    assert "Traceback" not in err

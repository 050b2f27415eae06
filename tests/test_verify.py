"""`drl verify`: the audit, its table / JSON output and its exit codes."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from typer.testing import CliRunner

from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.cli import app

runner = CliRunner()


def statuses(path):
    return {check.name: (check.status, check.detail) for check in audit_checkpoint(path).checks}


def test_a_good_checkpoint_passes_every_check(checkpoint_file):
    report = audit_checkpoint(checkpoint_file())
    assert not report.failed
    assert all(check.status == "PASS" for check in report.checks), report.checks
    assert report.verdict.startswith("PASS: all 17 checks passed")


@pytest.mark.parametrize(
    ("warnings", "verdict"),
    [
        (0, "PASS: all 3 checks passed"),
        (1, "PASS: all 3 checks passed (1 warning)"),
        (2, "PASS: all 3 checks passed (2 warnings)"),
    ],
)
def test_the_verdict_counts_warnings_in_words(warnings, verdict):
    from drlcli.checkpoints.audit import AuditReport
    from drlcli.checkpoints.verified import Check

    checks = [Check(f"c{i}", "WARN" if i < warnings else "PASS", "") for i in range(3)]
    assert AuditReport("x.pt", checks).verdict == verdict


def _set_semantics(**changes):
    def modify(payload):
        payload["actor_semantics"].update(changes)

    return modify


def _nan_weight(payload):
    payload["actor"]["log_std"][0] = float("nan")


def _nan_in_optimizer_state(payload):
    state = payload["learner_states"][0]["value"]
    next(iter(state.values())).view(-1)[0] = float("inf")


def _env_kwargs_not_a_mapping(payload):
    payload["env"]["kwargs"] = "reset_noise_scale=0.1"


def _no_optimizer(payload):
    del payload["learner_states"][0]["optimizer"]


def _bad_reward_moments(payload):
    moments = {"mean": torch.zeros(3), "var": torch.ones(3), "count": 5.0}
    rollout_actor = {"envs": {}, "torch_rng": torch.zeros(8), "reward_scaler": moments}
    payload["learner_states"][0]["rollout_actors"] = [rollout_actor]


def _understated_memory(payload):
    payload["inference_memory"] = {"parameters": 16}


def _malformed_memory(payload):
    payload["inference_memory"] = {"parameters": "a lot"}


def _negative_var(payload):
    payload["obs_rms_state"]["var"][1] = -1.0


def _zero_count(payload):
    payload["obs_rms_state"]["count"] = 0.0


def _inverted_bounds(payload):
    payload["env"]["action_low"], payload["env"]["action_high"] = [3.0], [-3.0]


def _infinite_bound(payload):
    payload["env"]["action_high"] = [float("inf")]


def _wrong_weight_shape(payload):
    payload["actor"]["mean_network.0.weight"] = torch.zeros(8, 5)


def _negative_round(payload):
    payload["progress"]["round"] = -1


def _no_semantics(payload):
    del payload["actor_semantics"]


@pytest.mark.parametrize(
    ("modify", "check", "reason"),
    [
        (_no_semantics, "actor_semantics schema", "missing or null"),
        (_set_semantics(schema_version=7), "actor_semantics schema", "schema_version 7"),
        (_set_semantics(builder="not a builder"), "builder", "not of the form"),
        (_set_semantics(kind="custom"), "builder", "kind is 'custom' but builder"),
        (_set_semantics(obs_dim=5), "dimensions", "obs_dim: checkpoint 5 != env 4"),
        (_wrong_weight_shape, "dimensions", "mean_network.0.weight (8, 5) != (8, 4)"),
        (_set_semantics(action_dim=2), "action bounds", "bounds have lengths 1/1, action_dim 2"),
        (_inverted_bounds, "action bounds", "action_low >= action_high at dimensions [0]"),
        (_infinite_bound, "action bounds", "not finite"),
        (_negative_var, "observation statistics", "negative entries"),
        (_zero_count, "observation statistics", "count must be positive"),
        (_nan_weight, "finite tensors", "non-finite values in actor.log_std"),
        (_nan_in_optimizer_state, "finite tensors", "learner_states[0].value"),
        (_negative_round, "progress counters", "progress.round must be a non-negative"),
        (_no_optimizer, "resume state", "learner_states[0] lacks optimizer"),
        (_env_kwargs_not_a_mapping, "format and fields", "env.kwargs: expected a mapping"),
        (_bad_reward_moments, "resume state", "rollout_actors[0].reward_scaler has the wrong"),
        (_understated_memory, "inference memory", "more than the 16 B its inference_startup"),
        (_malformed_memory, "format and fields", "'inference_memory' must map categories"),
    ],
)
def test_each_defect_fails_its_check_with_the_reason(checkpoint_file, modify, check, reason):
    results = statuses(checkpoint_file(modify))
    status, detail = results[check]
    assert status == "FAIL", results
    assert reason in detail


def test_custom_builder_is_a_warning_and_is_never_imported(checkpoint_file, tmp_path, monkeypatch):
    package = tmp_path / "evil_actor_pkg"
    package.mkdir()
    marker = tmp_path / "imported"
    (package / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\ndef build(**k): 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    path = checkpoint_file(_set_semantics(kind="custom", builder="evil_actor_pkg:build"))
    results = statuses(path)
    assert results["builder"][0] == "WARN"
    assert results["dimensions"][0] == "WARN"
    assert not marker.exists()
    assert "evil_actor_pkg" not in sys.modules
    # Disguising custom code as built-in does not get it imported either: kind comes from the
    # builder string, and the mismatch fails.
    path = checkpoint_file(_set_semantics(builder="evil_actor_pkg:build"), name="disguised.pt")
    results = statuses(path)
    assert results["builder"][0] == "FAIL"
    assert not marker.exists()


def test_cli_table_verdict_and_exit_codes(checkpoint_file, tmp_path):
    result = runner.invoke(app, ["verify", str(checkpoint_file())], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "PASS: all 17 checks passed" in result.output and "finite tensors" in result.output

    bad = checkpoint_file(_nan_weight, name="bad.pt")
    result = runner.invoke(app, ["verify", str(bad)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    assert "FAIL: 1 of 17 checks failed" in result.output

    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"\x00\x01 not a checkpoint")
    result = runner.invoke(app, ["verify", str(garbage)])
    assert result.exit_code == 2
    assert "not a readable torch checkpoint" in result.output
    assert runner.invoke(app, ["verify", str(tmp_path / "missing.pt")]).exit_code == 2


def test_cli_json_output(checkpoint_file):
    result = runner.invoke(app, ["verify", "--json", str(checkpoint_file(_zero_count))])
    assert result.exit_code == 1
    report = json.loads(result.output)
    assert report["ok"] is False
    failed = [c for c in report["checks"] if c["status"] == "FAIL"]
    assert [c["name"] for c in failed] == ["observation statistics"]
    # The semantics as fields, for a program to read, not only as the check's prose.
    semantics = report["actor_semantics"]
    assert semantics["schema_version"] == 1 and semantics["kind"] == "builtin"
    assert semantics["builder"] == "drlcli.actors.gaussian:build_gaussian_actor"
    assert (semantics["obs_dim"], semantics["action_dim"]) == (4, 1)
    assert semantics["action_transform"] == "clip"
    assert semantics["kwargs"]["hidden_sizes"] == [8, 8]


def test_json_output_of_a_file_without_semantics_says_null(checkpoint_file):
    def drop(payload):
        payload["actor_semantics"] = None

    result = runner.invoke(app, ["verify", "--json", str(checkpoint_file(drop))])
    assert result.exit_code == 1
    assert json.loads(result.output)["actor_semantics"] is None


def test_an_env_id_that_imports_a_module_is_a_warning_and_is_never_imported(checkpoint_file):
    def foreign_task(payload):
        payload["env"]["id"] = "never_imported_robot:Task-v0"

    status, detail = statuses(checkpoint_file(foreign_task))["env module"]
    assert status == "WARN"
    assert "imports module never_imported_robot" in detail
    assert "--allow-env-module never_imported_robot" in detail
    assert "never_imported_robot" not in sys.modules
    assert statuses(checkpoint_file())["env module"][0] == "PASS"


PEAK_MEMORY = """
import resource, sys, time
from drlcli.checkpoints.audit import audit_checkpoint
started = time.process_time()  # CPU time: another process's load does not inflate it
report = audit_checkpoint(sys.argv[1])
print(time.process_time() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
print(dict((c.name, c.status) for c in report.checks)["dimensions"])
"""


@pytest.mark.subprocess
def test_verify_of_a_file_asking_for_a_huge_actor_allocates_nothing_for_it(checkpoint_file):
    """A file's kwargs ask for 20000-wide layers (1.6 GB and an orthogonal initialisation of
    each at full size); the shape check builds on the meta device: about as fast and as small
    as the audit of a normal file, and the shapes still fail."""
    import subprocess

    def huge(payload):
        payload["actor_semantics"]["kwargs"]["hidden_sizes"] = [20000, 20000]

    def audit(path):
        done = subprocess.run(
            [sys.executable, "-c", PEAK_MEMORY, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        timing, status = done.stdout.strip().splitlines()
        seconds, peak_kib = timing.split()
        return float(seconds), int(peak_kib), status

    normal_s, normal_kib, normal_status = audit(checkpoint_file())
    huge_s, huge_kib, huge_status = audit(checkpoint_file(huge, name="huge.pt"))
    assert (normal_status, huge_status) == ("PASS", "FAIL")
    assert huge_kib < normal_kib + 100 * 1024, (normal_kib, huge_kib)  # not 1.6 GB more
    assert huge_s < normal_s + 5.0, (normal_s, huge_s)  # CPU seconds: no full-size init


def test_inference_memory_is_reported_per_category_and_absent_is_a_failure(checkpoint_file):
    status, detail = statuses(checkpoint_file())["inference memory"]
    assert status == "PASS"
    assert detail.startswith("parameters ") and "buffers " in detail and "(declared)" in detail

    def without(payload):
        del payload["inference_memory"]

    status, detail = statuses(checkpoint_file(without, name="without.pt"))["inference memory"]
    assert status == "FAIL" and detail.endswith("checkpoint lacks 'inference_memory'")


def test_verify_records_how_a_ppo_checkpoint_was_trained(checkpoint_file):
    """PPO's stabilisers as its config stored them, in the JSON and under the table; a file
    older than a setting shows the default it was trained with."""

    def stabilised(payload):
        params = payload["config"]["algo_params"]
        params |= {"learning_rate_schedule": "adaptive_kl", "desired_kl": 0.02, "rpo_alpha": 0.5}
        del params["policy_last_layer_scale"]  # as a file from before the setting

    path = checkpoint_file(stabilised)
    report = json.loads(runner.invoke(app, ["verify", "--json", str(path)]).output)
    assert report["training"] == {
        "normalize_value": False,
        "learning_rate_schedule": "adaptive_kl",
        "desired_kl": 0.02,
        "policy_last_layer_scale": 1.0,
        "rpo_alpha": 0.5,
        "recompute_advantages_per_epoch": False,
    }
    shown = runner.invoke(app, ["verify", str(path)], env={"COLUMNS": "200"}).output
    assert (
        "trained with: normalize_value False, learning_rate_schedule adaptive_kl, "
        "desired_kl 0.02, "
        "policy_last_layer_scale 1.0, rpo_alpha 0.5, recompute_advantages_per_epoch False"
    ) in shown
    assert audit_checkpoint(checkpoint_file()).training["rpo_alpha"] is None


def test_verify_names_the_run_its_task_and_seed(checkpoint_file):
    """Seeds of one config differ by name and env.seed alone: verify says which run wrote the
    file, in the JSON and under the table."""

    def seeded(payload):
        payload["config"]["name"] = "hopper_seed7"
        payload["config"]["env"]["seed"] = 7

    path = checkpoint_file(seeded)
    report = json.loads(runner.invoke(app, ["verify", "--json", str(path)]).output)
    task = report["run"]["task"]
    assert report["run"] == {"name": "hopper_seed7", "task": task, "seed": 7} and task
    shown = runner.invoke(app, ["verify", str(path)], env={"COLUMNS": "200"}).output
    assert f"run: hopper_seed7 on {task}, env.seed 7" in shown

    def without_config(payload):
        payload["config"] = "damaged"

    assert audit_checkpoint(checkpoint_file(without_config, name="damaged.pt")).run is None

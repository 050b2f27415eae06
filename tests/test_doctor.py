"""drl doctor: versions, rendering backends and the Ray cluster, each problem with its fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from drlcli import doctor
from drlcli.cli import app

runner = CliRunner(env={"COLUMNS": "200"})


def failing(backend: str) -> doctor.Probe:
    return doctor.Probe(False, f"{backend}: forced off")


@pytest.mark.subprocess
def test_a_real_backend_renders_and_an_unknown_one_fails_in_its_subprocess():
    assert doctor.probe_rendering_backend("egl").ok  # the machines drl is tested on have EGL
    probe = doctor.probe_rendering_backend("no-such-backend")
    assert not probe.ok and "\n" not in probe.detail and probe.detail


def test_with_every_backend_forced_off_video_is_reported_broken_with_the_fix(monkeypatch):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(doctor, "probe_rendering_backend", failing)
    result = runner.invoke(app, ["doctor"])
    assert result.exit_code == 1
    assert "MUJOCO_GL=egl" in result.stdout and "forced off" in result.stdout
    assert result.stderr.strip().splitlines() == [
        "problem: no offscreen MuJoCo renderer works, so drl play --video fails here: install "
        "EGL (apt-get install libegl1) or OSMesa (apt-get install libosmesa6), then set "
        "MUJOCO_GL=egl or MUJOCO_GL=osmesa"
    ]


@pytest.mark.parametrize("chosen", ["osmesa", None])
def test_a_chosen_backend_that_fails_while_another_works_names_the_one_to_set(monkeypatch, chosen):
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if chosen:
        monkeypatch.setenv("MUJOCO_GL", chosen)
    else:
        monkeypatch.delenv("MUJOCO_GL", raising=False)
    only = "egl" if chosen else "osmesa"  # without MUJOCO_GL and a display, play uses egl
    diagnosis = doctor.diagnose(
        render_probe=lambda b: doctor.Probe(b == only, "works" if b == only else "fails")
    )
    broken = chosen or "egl"
    assert diagnosis.blocking
    assert diagnosis.problems == [
        f"MUJOCO_GL={broken} does not render here, so drl play --video fails: set MUJOCO_GL={only}"
    ]


def test_a_ray_address_that_does_not_answer_is_a_problem_and_versions_are_listed(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    diagnosis = doctor.diagnose(
        render_probe=lambda b: doctor.Probe(True, "works"),
        ray_probe=lambda address: doctor.Probe(False, "no answer within 20 s"),
    )
    assert diagnosis.blocking
    assert diagnosis.problems[0].startswith(
        "no Ray cluster answers at RAY_ADDRESS=127.0.0.1:1 (no answer within 20 s)"
    )
    found = dict(diagnosis.facts)
    assert found["torch"].startswith("2.") and found["drlcli"] and found["mujoco"]
    assert "CUDA" in found


@pytest.mark.subprocess
def test_a_task_probe_makes_the_task_as_drl_does_and_reports_a_package_failure_in_one_line():
    made = doctor.probe_task("tests.dict_envs:drltest/DictReach-v0", {})
    assert made == doctor.Probe(
        True, "makes tests.dict_envs:drltest/DictReach-v0 (7 observations, 2 actions)"
    )
    broken = doctor.probe_task("tests.range_envs:drltest/BrokenPackage-v0", {"env_name": "x"})
    assert not broken.ok and "\n" not in broken.detail
    assert "failed inside tests" in broken.detail and "could not broadcast" in broken.detail


def test_each_installed_robotics_package_is_tried_and_a_failure_is_a_problem_not_a_block(
    monkeypatch,
):
    monkeypatch.setenv("MUJOCO_GL", "egl")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(
        doctor,
        "ROBOTICS_PACKAGES",
        (
            ("works", ("gymnasium",), "good:Task-v0", {}),
            ("breaks", ("gymnasium", "numpy"), "bad:Task-v0", {"env_name": "x"}),
            ("absent", ("no-such-distribution",), "absent:Task-v0", {}),
            ("half", ("gymnasium", "no-such-distribution"), "half:Task-v0", {}),
        ),
    )
    tried = []

    def task_probe(env_id, kwargs):
        tried.append((env_id, kwargs))
        if env_id == "good:Task-v0":
            return doctor.Probe(True, "makes good:Task-v0 (3 observations, 1 actions)")
        return doctor.Probe(False, "env.id: making bad:Task-v0 failed inside bad 1.0 (...)")

    diagnosis = doctor.diagnose(
        render_probe=lambda b: doctor.Probe(True, "works"), task_probe=task_probe
    )
    assert tried == [("good:Task-v0", {}), ("bad:Task-v0", {"env_name": "x"})]
    found = dict(diagnosis.facts)
    gymnasium = doctor.package_version("gymnasium")
    assert (
        found["works"] == f"gymnasium {gymnasium}: makes good:Task-v0 (3 observations, 1 actions)"
    )
    assert found["absent"] == "not installed: its tasks are not tried"
    assert found["half"] == f"partly installed (gymnasium {gymnasium}): its tasks are not tried"
    assert not diagnosis.blocking
    assert diagnosis.problems == [
        f"breaks (gymnasium {gymnasium}, numpy {doctor.package_version('numpy')}) cannot make "
        f"bad:Task-v0 under MuJoCo {doctor.package_version('mujoco')}: env.id: making "
        "bad:Task-v0 failed inside bad 1.0 (...); install a MuJoCo version the package supports"
    ]

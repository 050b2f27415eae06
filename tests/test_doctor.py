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

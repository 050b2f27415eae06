"""A plain install: the wheel, installed into a fresh virtual environment, run from an empty
folder as a user would, with nothing of the repository's code on its path.

The environment takes its dependencies from the test environment's site-packages (the tested
versions of constraints.txt, which `make setup` has just resolved and installed from the
registry) instead of installing them a second time: `pip check` confirms the wheel's
requirements accept them. What this test adds is the wheel itself: its files, its entry point,
its package data, and Ray workers that import it from there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

# One xdist worker runs both tests (make test's --dist loadgroup): the install is made once.
pytestmark = [pytest.mark.subprocess, pytest.mark.xdist_group("install")]
PAGE = REPO_ROOT / "drlcli" / "dashboard" / "static" / "index.html"
# What the wheel's build copies none of: git, build outputs, environments, caches, run output.
NOT_SOURCE = (
    ".git",
    "build",
    "dist",
    "*.egg-info",
    ".venv*",
    "node_modules",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "mutants",
    "output",
    "runs",
    "mlruns",
)


def run(command: list, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(the venv's bin folder, the environment to run it with)."""
    root = tmp_path_factory.mktemp("install")
    # Nothing of the repository on the path: with PYTHONPATH on it (the Ray fixture sets it),
    # pip would find the repository's drlcli.egg-info and skip installing the wheel.
    clean = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "RAY_ADDRESS")
    }
    build_env = {**clean, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # setuptools builds in the source tree's build/ folder: a leftover of an interrupted build
    # there, or a second build at the same time, fails it ("File exists: ...dist-info"). A copy
    # of the tree without build outputs, caches or environments is what a fresh checkout holds.
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            root / "dist",
            source,
        ],
        cwd=root,
        env=build_env,
    )
    (wheel,) = (root / "dist").glob("drlcli-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "drlcli/presets/hopper_ppo.yaml" in names
    assert ("drlcli/dashboard/static/index.html" in names) == PAGE.exists()
    venv = root / "venv"
    # No pip or setuptools of its own (they would shadow the tested ones): this pip installs.
    run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root, env=build_env)
    bin_folder = venv / "bin"
    # The dependencies: a path entry, not a site directory, so the test environment's own .pth
    # files (its editable install of drlcli among them) are not run.
    (site_packages,) = (venv / "lib").glob("python*/site-packages")
    tested = [Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site_packages / "tested_dependencies.pth").write_text("\n".join(map(str, tested)) + "\n")
    pip = [sys.executable, "-m", "pip", "--python", bin_folder / "python"]
    run([*pip, "install", "--quiet", "--no-deps", wheel], cwd=root, env=build_env)
    checked = run([*pip, "check"], cwd=root, env=build_env)
    assert "No broken requirements" in checked
    env = dict(clean)
    env.update(
        PATH=f"{bin_folder}{os.pathsep}{env.get('PATH', '')}",
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        MUJOCO_GL="egl",
        COLUMNS="200",
    )
    return bin_folder, env


def test_the_installed_drl_lists_trains_and_verifies_a_preset(installed, tmp_path):
    bin_folder, env = installed
    drl = bin_folder / "drl"
    found = run(
        [bin_folder / "python", "-c", "import drlcli; print(drlcli.__file__)"], tmp_path, env
    )
    assert str(REPO_ROOT) not in found  # the installed package, not the repository
    assert "quickstart" in run([drl, "presets"], tmp_path, env)
    preset = run([drl, "presets", "show", "quickstart"], tmp_path, env)
    short = preset.replace("total_env_steps: 40960", "total_env_steps: 1024")
    assert short != preset
    (tmp_path / "short.yaml").write_text(short)
    run([drl, "train", "short.yaml", "--quiet"], tmp_path, env)
    # play and export run the same code on the same dependencies in test_play and test_export.
    assert "PASS" in run([drl, "verify", tmp_path / "output" / "model_short.pt"], tmp_path, env)
    dry = run([drl, "train", "hopper_ppo", "--dry-run"], tmp_path, env)
    assert "Hopper-v5" in dry


@pytest.mark.skipif(not PAGE.exists(), reason="the dashboard page is not built (npm)")
def test_the_installed_dashboard_serves_its_page_from_the_package(installed, tmp_path):
    bin_folder, env = installed
    (tmp_path / "output").mkdir()
    port = 6100 + os.getpid() % 500
    server = subprocess.Popen(
        [bin_folder / "drl", "dashboard", "output", "--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as answer:
                    page = answer.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard did not answer"
                time.sleep(0.2)
        assert page == PAGE.read_text()
    finally:
        server.terminate()
        server.wait(timeout=10)

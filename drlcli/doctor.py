"""``drl doctor``: what this machine has for drl, and what would stop ``drl train`` or ``drl
play --video`` here, each problem with its fix.

Rendering backends and the Ray cluster are tried in subprocesses (a backend that crashes or
hangs cannot take the doctor with it).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

RENDERING_BACKENDS = ("egl", "osmesa", "glfw")
PACKAGES = ("drlcli", "torch", "ray", "mujoco", "gymnasium", "onnxruntime", "numpy")
# Optional extras: (name, its distributions, the extra, what needs it).
OPTIONAL_PACKAGES = (
    ("optuna", ("optuna",), "tune", "drl tune's default searcher"),
    (
        "tensorboard",
        ("tensorboard",),
        "tensorboard",
        "logging.tensorboard, drl train --tensorboard",
    ),
    ("wandb", ("wandb",), "wandb", "logging.wandb, drl train --wandb"),
    ("mlflow", ("mlflow", "mlflow-skinny"), "mlflow", "logging.mlflow, drl train --mlflow"),
)

# The robotics packages users bring beside drl: (name, its distributions, a task of it as drl
# names it, that task's env.kwargs). Each installed one is tried: can drl make its task here?
ROBOTICS_PACKAGES: tuple[tuple[str, tuple[str, ...], str, dict[str, str]], ...] = (
    ("dm_control (via Shimmy)", ("shimmy", "dm-control"), "shimmy:dm_control/walker-walk-v0", {}),
    ("gymnasium-robotics", ("gymnasium-robotics",), "gymnasium_robotics:FetchReach-v4", {}),
    ("metaworld", ("metaworld",), "metaworld:Meta-World/MT1", {"env_name": "reach-v3"}),
)

# Makes a task as drl train does (drl's own one-line errors) and closes it.
_TASK_PROBE = """
import json, sys
from drlcli.envs import env_facts, make_env
env = make_env(sys.argv[1], **json.loads(sys.argv[2]))
facts = env_facts(env)
env.close()
print(f"makes {sys.argv[1]} ({facts.obs_dim} observations, {facts.action_dim} actions)")
"""

# Renders one frame of a one-sphere model offscreen with the backend MUJOCO_GL names.
_RENDER_PROBE = """
import mujoco
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><light pos='0 0 1'/><geom type='sphere' size='.1'/></worldbody></mujoco>"
)
data = mujoco.MjData(model)
mujoco.mj_forward(model, data)
renderer = mujoco.Renderer(model, 32, 32)
renderer.update_scene(data)
assert renderer.render().shape == (32, 32, 3)
"""

_RAY_PROBE = """
import logging, sys, ray
ray.init(address=sys.argv[1], logging_level=logging.ERROR, log_to_driver=False)
resources = ray.cluster_resources()
cpus, gpus = resources.get("CPU", 0), resources.get("GPU", 0)
print(f"answers: {len(ray.nodes())} nodes, {cpus:g} CPUs, {gpus:g} GPUs")
"""


@dataclass(frozen=True)
class Probe:
    """The outcome of trying something in a subprocess: ok, and one line saying why not."""

    ok: bool
    detail: str


@dataclass
class Diagnosis:
    facts: list[tuple[str, str]] = field(default_factory=list)  # (what, finding)
    problems: list[str] = field(default_factory=list)  # one line each, with the fix
    blocking: bool = False  # drl train or drl play --video would fail here


def run_probe(code: str, args: list[str], env: dict[str, str], timeout_s: float) -> Probe:
    """Run ``code`` in a fresh Python; its last stdout line on success, else its last error
    line."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, **env},
        )
    except subprocess.TimeoutExpired:
        return Probe(False, f"no answer within {timeout_s:g} s")
    lines = [
        line.strip() for line in (done.stdout if done.returncode == 0 else done.stderr).splitlines()
    ]
    lines = [line for line in lines if line]
    if done.returncode == 0:
        return Probe(True, lines[-1] if lines else "works")
    return Probe(False, lines[-1] if lines else f"exit status {done.returncode}")


def probe_rendering_backend(backend: str) -> Probe:
    """Whether MuJoCo renders offscreen with ``MUJOCO_GL=backend`` here."""
    return run_probe(_RENDER_PROBE, [], {"MUJOCO_GL": backend, "PYOPENGL_PLATFORM": ""}, 60.0)


def probe_ray_cluster(address: str) -> Probe:
    """Whether a Ray cluster answers at ``address``: its nodes and resources."""
    env = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}
    return run_probe(_RAY_PROBE, [address], env, 20.0)


def probe_task(env_id: str, kwargs: dict[str, str]) -> Probe:
    """Whether drl makes the task ``env_id`` here (its package imported in a fresh Python)."""
    import json

    return run_probe(_TASK_PROBE, [env_id, json.dumps(kwargs)], {"MUJOCO_GL": "egl"}, 120.0)


def package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def diagnose(
    render_probe: Callable[[str], Probe] | None = None,
    ray_probe: Callable[[str], Probe] | None = None,
    task_probe: Callable[[str, dict[str, str]], Probe] | None = None,
) -> Diagnosis:
    """Everything ``drl doctor`` reports (the probes can be replaced, for tests)."""
    render_probe = render_probe or probe_rendering_backend
    ray_probe = ray_probe or probe_ray_cluster
    task_probe = task_probe or probe_task
    diagnosis = Diagnosis()
    facts, problems = diagnosis.facts, diagnosis.problems
    facts.append(("python", f"{platform.python_version()} ({sys.executable})"))
    for name in PACKAGES:
        version = package_version(name)
        facts.append((name, version or "not installed"))
        if version is None:
            problems.append(f"{name} is not installed: pip install drlcli (it brings {name})")
            diagnosis.blocking = True

    for name, distributions, extra, use in OPTIONAL_PACKAGES:  # only runs that ask need them
        version = next(filter(None, map(package_version, distributions)), None)
        facts.append(
            (
                name,
                f"{version} ({use})"
                if version
                else f"not installed ({use}: pip install 'drlcli[{extra}]')",
            )
        )

    _diagnose_robotics_packages(diagnosis, task_probe)

    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            facts.append(("CUDA", f"{torch.version.cuda}: {', '.join(names)}"))
        else:
            built = torch.version.cuda or "none (a CPU build of torch)"
            facts.append(("CUDA", f"no device; torch built with CUDA {built}"))
    except Exception as error:  # a broken torch install: say so, do not crash
        problems.append(f"torch does not import ({type(error).__name__}: {error}); reinstall it")
        diagnosis.blocking = True

    display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    facts.append(("display", display or "none (drl play --render needs one; --video does not)"))
    working = []
    for backend in RENDERING_BACKENDS:
        if backend == "glfw" and not display:
            facts.append(("MUJOCO_GL=glfw", "not tried: no display"))
            continue
        probe = render_probe(backend)
        facts.append((f"MUJOCO_GL={backend}", "renders" if probe.ok else f"fails: {probe.detail}"))
        if probe.ok:
            working.append(backend)
    # What drl play --video uses: MUJOCO_GL, else egl without a display (drlcli/play.py).
    chosen = os.environ.get("MUJOCO_GL")
    effective = chosen or ("glfw" if display else "egl")
    offscreen = [backend for backend in working if backend != "glfw"]
    if not chosen:
        facts.append(("MUJOCO_GL", f"unset: drl play uses {effective} here"))
    if not offscreen:
        problems.append(
            "no offscreen MuJoCo renderer works, so drl play --video fails here: install EGL "
            "(apt-get install libegl1) or OSMesa (apt-get install libosmesa6), then set "
            "MUJOCO_GL=egl or MUJOCO_GL=osmesa"
        )
        diagnosis.blocking = True
    elif effective not in working:
        problems.append(
            f"MUJOCO_GL={effective} does not render here, so drl play --video fails: "
            f"set MUJOCO_GL={offscreen[0]}"
        )
        diagnosis.blocking = True

    address = os.environ.get("RAY_ADDRESS")
    if address:
        probe = ray_probe(address)
        facts.append((f"Ray at RAY_ADDRESS={address}", probe.detail))
        if not probe.ok:
            problems.append(
                f"no Ray cluster answers at RAY_ADDRESS={address} ({probe.detail}), and drl "
                "train joins it: start it (ray start --head) or unset RAY_ADDRESS to train on a "
                "local Ray"
            )
            diagnosis.blocking = True
    else:
        facts.append(("Ray", "RAY_ADDRESS unset: drl train starts a local Ray"))
    return diagnosis


def _diagnose_robotics_packages(
    diagnosis: Diagnosis, task_probe: Callable[[str, dict[str, str]], Probe]
) -> None:
    """Each robotics package installed: whether drl makes a task of it under this MuJoCo (its
    failure is a problem for runs of that package only: not blocking)."""
    mujoco = package_version("mujoco") or "not installed"
    for name, distributions, env_id, kwargs in ROBOTICS_PACKAGES:
        versions = [(d, package_version(d)) for d in distributions]
        installed = ", ".join(f"{d} {v}" for d, v in versions if v)
        if not all(v for _, v in versions):
            what = f"partly installed ({installed})" if installed else "not installed"
            diagnosis.facts.append((name, f"{what}: its tasks are not tried"))
            continue
        probe = task_probe(env_id, kwargs)
        diagnosis.facts.append(
            (name, f"{installed}: {probe.detail}" if probe.ok else f"{installed}: cannot make it")
        )
        if not probe.ok:
            diagnosis.problems.append(
                f"{name} ({installed}) cannot make {env_id} under MuJoCo {mujoco}: "
                f"{probe.detail}; install a MuJoCo version the package supports"
            )

"""Where a ``drl train`` process's life goes: its phases seen from outside, and the CPU seconds
of every process it starts, by kind (the driver, Ray's own services, each Ray actor class).

    python scripts/run_profile.py configs/quickstart.yaml --repeats 3
    python scripts/run_profile.py tests/some_config.yaml --set total_env_steps=128

Runs ``drl train --quiet CONFIG`` (into a temporary folder) ``--repeats`` times, one at a time,
and samples its process tree every 20 ms: each process's kind (from its command line, or the
title Ray gives a worker: ``ray::MuJoCoActor``) and CPU time (user + system, the last sample
before it exits; a process that lives less than one sample is not seen). Prints the median
over the repeats of:

- the phases: Ray's head process seen, the first Ray actor at work (a worker titled with a
  class), the first checkpoint written, the driver's exit;
- the CPU seconds of each kind of process, and their total against the wall-clock time.

What the suite pays per ``drl train`` it starts (``make test``'s subprocess tests) is this, on
a machine that is doing other work too. Measure on a quiet machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml
from rich.console import Console
from rich.table import Table

SAMPLE_S = 0.02
# Command-line fragments of Ray's own processes, in the order they are matched.
RAY_SERVICES = [
    ("drlcli.runtime.ray_head", "Ray head (drl's process)"),
    ("gcs_server", "Ray GCS server"),
    ("raylet/raylet", "Ray raylet"),
    ("dashboard/agent.py", "Ray dashboard agent"),
    ("dashboard/dashboard.py", "Ray dashboard (minimal)"),
    ("runtime_env/agent/main.py", "Ray runtime-env agent"),
    ("autoscaler/_private/monitor.py", "Ray autoscaler monitor"),
    ("log_monitor.py", "Ray log monitor"),
    ("default_worker.py", "Ray worker (starting)"),
]


def process_kind(process: psutil.Process, driver_pid: int) -> str | None:
    """What a process of the run is, or None where it is gone."""
    if process.pid == driver_pid:
        return "drl train (driver)"
    try:
        command = " ".join(process.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None
    if command.startswith("ray::"):  # a Ray worker, titled by what it runs
        name = command[len("ray::") :].split()[0].split(".")[0]
        return "Ray worker (idle)" if name == "IDLE" else f"ray::{name}"
    for fragment, kind in RAY_SERVICES:
        if fragment in command:
            return kind
    return f"other: {Path(command.split()[0]).name}" if command else None


def profile_once(config: Path, overrides: dict[str, object]) -> tuple[dict, dict]:
    """One ``drl train``: ``(phase -> seconds after the start, kind -> CPU seconds)``."""
    with tempfile.TemporaryDirectory(prefix="drl-profile-") as folder:
        values = yaml.safe_load(config.read_text())
        values.update(overrides)
        values["output_dir"] = folder
        run_config = Path(folder) / "run.yaml"
        run_config.write_text(yaml.safe_dump(values))
        env = {**os.environ, "RAY_ADDRESS": ""}
        start = time.monotonic()
        driver = subprocess.Popen(
            [sys.executable, "-m", "drlcli", "train", "--quiet", str(run_config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        phases: dict[str, float] = {}
        cpu: dict[int, tuple[str, float]] = {}
        root = psutil.Process(driver.pid)
        while driver.poll() is None:
            now = time.monotonic() - start
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for process in tree:
                kind = process_kind(process, driver.pid)
                if kind is None:
                    continue
                try:
                    times = process.cpu_times()
                except (psutil.NoSuchProcess, psutil.ZombieProcess):
                    continue
                cpu[process.pid] = (kind, times.user + times.system)
                if kind == "Ray head (drl's process)":
                    phases.setdefault("Ray head process seen", now)
                if kind.startswith("ray::"):
                    phases.setdefault("first Ray actor at work", now)
            if any(Path(folder).glob("model_*.pt")):
                phases.setdefault("first checkpoint written", now)
            time.sleep(SAMPLE_S)
        _, stderr = driver.communicate()
        phases["driver exited"] = time.monotonic() - start
        if driver.returncode != 0:
            raise SystemExit(f"drl train exited with {driver.returncode}: {stderr.strip()[-500:]}")
    by_kind: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.Counter()
    for kind, seconds in cpu.values():
        by_kind[kind] += seconds
        counts[kind] += 1
    return phases, {kind: (by_kind[kind], counts[kind]) for kind in by_kind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a top-level override"
    )
    args = parser.parse_args()
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    runs = [profile_once(args.config, overrides) for _ in range(args.repeats)]
    console = Console()
    phases = Table(title=f"drl train {args.config}: phases (s after start, median of {len(runs)})")
    phases.add_column("phase")
    phases.add_column("s", justify="right")
    for name in [
        "Ray head process seen",
        "first Ray actor at work",
        "first checkpoint written",
        "driver exited",
    ]:
        seen = [run[0][name] for run in runs if name in run[0]]
        phases.add_row(name, f"{statistics.median(seen):.1f}" if seen else "-")
    console.print(phases)
    kinds = sorted({kind for run in runs for kind in run[1]})
    table = Table(title="CPU seconds by process kind (median; processes seen per run)")
    table.add_column("process")
    table.add_column("processes", justify="right")
    table.add_column("CPU s", justify="right")
    rows = []
    for kind in kinds:
        seconds = statistics.median(run[1].get(kind, (0.0, 0))[0] for run in runs)
        count = statistics.median(run[1].get(kind, (0.0, 0))[1] for run in runs)
        rows.append((seconds, kind, count))
    for seconds, kind, count in sorted(rows, reverse=True):
        table.add_row(kind, f"{count:g}", f"{seconds:.1f}")
    total = statistics.median(sum(value[0] for value in run[1].values()) for run in runs)
    wall = statistics.median(run[0]["driver exited"] for run in runs)
    table.add_row("all", "", f"{total:.1f}")
    console.print(table)
    console.print(f"CPU seconds per wall-clock second: {total / wall:.2f} ({os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()

"""Dashboard speed with many runs: the JSON API and the page, against bare reads of the files.

    python scripts/bench/dashboard.py                  # 50 runs x 5,000 rows
    python scripts/bench/dashboard.py --runs 50 --rows 5000 --repeats 5

Generates the runs (PPO's columns) in a temporary folder, serves them, and prints medians over
--repeats: the run list (GET /api/runs) against a bare folder walk, one whole run (GET rows)
against a bare read of its file, an incremental poll (nothing new; one new row) against a bare
stat of the file, and, in headless Chromium (web/tests/drive.mjs), the time from opening the
page until the return chart has drawn all runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from drlcli.algos.ppo.algorithm import PPO
from drlcli.dashboard.server import start_dashboard
from drlcli.metrics.csv_file import MetricsWriter
from drlcli.metrics.schema import metric_columns

WEB = Path(__file__).resolve().parents[2] / "web"


def generate(root: Path, runs: int, rows: int) -> list[Path]:
    columns = metric_columns(PPO)
    paths = []
    for index in range(runs):
        path = root / f"task{index // 5:02d}" / f"metrics_task{index // 5:02d}_seed{index % 5}.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = MetricsWriter(path, columns)
        for r in range(1, rows + 1):
            writer.write(
                {
                    "round": r,
                    "env_steps": 2048 * r,
                    "wall_time_s": 0.4 * r,
                    "sps": 5000.0 + index,
                    "episodes": 3,
                    "episode_return_mean": 1000.0 * (1 - 1 / (1 + r / 500)) + index,
                    "episode_return_min": 900.0 * (1 - 1 / (1 + r / 500)),
                    "episode_return_max": 1100.0 * (1 - 1 / (1 + r / 500)) + 2 * index,
                    "Loss/value": 1.0 / r,
                    "approx_kl": 0.01,
                }
            )
        writer.close()
        paths.append(path)
    return paths


def timed(action, repeats: int) -> float:
    """Median milliseconds of ``action()``."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return response.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import json

    with tempfile.TemporaryDirectory(prefix="drl-dash-bench-") as folder:
        root = Path(folder)
        started = time.perf_counter()
        paths = generate(root, args.runs, args.rows)
        seconds = time.perf_counter() - started
        print(f"generated {args.runs} runs x {args.rows} rows in {seconds:.1f} s")
        server = start_dashboard([root], port=0)
        base = server.url.rstrip("/")
        try:
            listing = json.loads(fetch(f"{base}/api/runs"))
            run = listing["runs"][0]
            rows_url = f"{base}/api/runs/{run['id']}/rows"
            whole = json.loads(fetch(rows_url))
            poll_url = f"{rows_url}?offset={whole['offset']}&generation={whole['generation']}"
            path = next(p for p in paths if p.resolve().as_posix().endswith(run["csv"]))

            def with_one_new_row():
                with path.open("a") as handle:
                    handle.write(",".join(["1"] * len(whole["columns"])) + "\n")
                fetch(poll_url)

            figures = [
                (
                    "run list",
                    timed(lambda: fetch(f"{base}/api/runs"), args.repeats),
                    timed(lambda: list(os.walk(root)), args.repeats),
                    "folder walk",
                ),
                (
                    "one whole run",
                    timed(lambda: fetch(rows_url), args.repeats),
                    timed(path.read_bytes, args.repeats),
                    "file read",
                ),
                (
                    "poll, nothing new",
                    timed(lambda: fetch(poll_url), 20),
                    timed(lambda: path.stat(), 20),
                    "file stat",
                ),
                (
                    "poll, one new row",
                    timed(with_one_new_row, 20),
                    timed(lambda: path.stat(), 20),
                    "file stat",
                ),
            ]
            for name, api_ms, bare_ms, bare in figures:
                ratio = api_ms / bare_ms
                print(f"{name}: {api_ms:.2f} ms (bare {bare}: {bare_ms:.3f} ms, ratio {ratio:.0f})")
            page = subprocess.run(
                ["node", "tests/drive.mjs", f"{base}/", "--lines", str(args.runs // 5)],
                cwd=WEB,
                input="quit\n",
                capture_output=True,
                text=True,
                timeout=300,
            )
            ready = next(
                (line for line in page.stdout.splitlines() if line.startswith("READY")), None
            )
            if ready is None:
                print(f"page: no READY ({page.stdout[-300:]} {page.stderr[-300:]})")
            else:
                print(
                    f"page: return chart of all {args.runs} runs ({args.runs // 5} seed groups) "
                    f"drawn {ready.split()[1]} ms after opening it"
                )
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main()

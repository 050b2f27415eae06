"""The dashboard page in headless Chromium (Debian's chromium, driven by playwright-core from
web/node_modules) over real short training runs: the return chart draws every row, a row
appended to the CSV appears without a reload, a run's page shows its audit, a search's trials
are one group, and runs are compared: evaluations on the return chart, the runs table with
the config values that differ, every metric in a grid, a chart's CSV and PNG downloads."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from drlcli.config import load_config
from drlcli.dashboard.server import page_is_built, start_dashboard
from drlcli.metrics.csv_file import MetricsWriter, read_metrics
from drlcli.runtime.training import train
from drlcli.topology import AvailableDevices

WEB = Path(__file__).resolve().parent.parent / "web"
CHROMIUM = "/usr/bin/chromium"
pytestmark = [
    pytest.mark.usefixtures("ray_cluster"),
    pytest.mark.skipif(
        not (Path(CHROMIUM).exists() and (WEB / "node_modules" / "playwright-core").is_dir()),
        reason="needs Debian's chromium and web/node_modules (.ci/run and make setup install them)",
    ),
    pytest.mark.skipif(not page_is_built(), reason="the page is not built (make setup)"),
]


class Page:
    """web/tests/drive.mjs in a subprocess, one command per line."""

    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [shutil.which("node") or "node", "tests/drive.mjs", url],
            cwd=WEB,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def line(self, prefix: str) -> str:
        for line in self.process.stdout:
            if line.startswith("ERRORS"):
                raise AssertionError(f"the page raised: {line}")
            if line.startswith("TIMEOUT"):
                raise AssertionError(f"the page did not show it within the wait: {line}")
            if line.startswith(prefix):
                return line[len(prefix) :].strip()
        raise AssertionError(f"the browser script ended before {prefix!r}")

    def send(self, command: str, reply: str) -> str:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.line(reply)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.write("quit\n")
            self.process.stdin.flush()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def test_the_page_draws_a_real_run_follows_it_live_and_shows_its_audit(tiny_config, tmp_path):
    config = load_config(tiny_config("live", total=256))
    train(config, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
    rows = read_metrics(config.metrics_path)
    with_return = sum(1 for row in rows if row["episode_return_mean"] != "")
    assert with_return >= 1
    server = start_dashboard([Path(config.output_dir)], port=0)
    page = Page(server.url)
    try:
        ready = page.line("READY ")
        milliseconds, points = ready.split(" ", 1)
        assert json.loads(points) == {"live": with_return}

        writer = MetricsWriter(config.metrics_path, list(rows[0]), append=True)
        last = {key: (float(value) if value else None) for key, value in rows[-1].items()}
        writer.write(
            {
                **last,
                "round": last["round"] + 1,
                "env_steps": last["env_steps"] + 256,
                "episode_return_mean": 42.0,
            }
        )
        writer.close()
        # The page polls every second; on a loaded machine a poll can take longer: the wait
        # ends when the new point is drawn (at most a minute), without a reload.
        page.send(f"wait live {with_return + 1}", "SEEN ")

        page.send("click live", "CLICKED")
        summary = json.loads(page.send("text #run-summary", "TEXT "))
        assert "best return" in summary and "metrics metrics_live.csv" in summary
        audit = json.loads(page.send("text #run-audit", "TEXT "))
        assert "actor_semantics schema" in audit and "PASS" in audit

        # A drl tune search appears (its layout, the live run's rows as its trials): one
        # group of trials, each trial its own line (trials are not seeds to average).
        search = Path(config.output_dir) / "search_x"
        for trial in ("trial_001", "trial_002"):
            (search / "trials" / trial).mkdir(parents=True)
            shutil.copyfile(config.metrics_path, search / "trials" / trial / "metrics_trial.csv")
        (search / "results.csv").write_text(
            "trial,algo_params.learning_rate,objective,state\n"
            "trial_001,0.001,12.5,finished\ntrial_002,0.0001,3.0,stopped early\n"
        )
        (search / "search.yaml").write_text("config: {}\n")
        page.send(f"wait trial_002 {with_return + 1}", "SEEN ")
        listed = json.loads(page.send("text #runs", "TEXT "))
        assert "search search_x (2 trials)" in listed and "objective 12.5, finished" in listed

        # A second real run, evaluated every round, at another learning rate: compared.
        compared = load_config(
            tiny_config(
                "compared",
                total=256,
                extra="evaluation: {interval_env_steps: 128, episodes: 2}\n"
                "algo_params: {num_epochs: 2, num_minibatches: 4, hidden_sizes: [16, 16],"
                " learning_rate: 0.001}\n",
            )
        )
        train(compared, quiet=True, devices=AvailableDevices(cuda_devices=0, mps=False))
        evaluated = [row for row in read_metrics(compared.metrics_path) if row["eval_return_mean"]]
        assert evaluated
        # The evaluations are drawn with the returns, at the evaluated weights' env steps.
        page.send(f"wait compared (evaluation) {len(evaluated)}", "SEEN ")
        page.send("sort best evaluation", "SORTED")  # descending: the evaluated run first
        deadline = time.monotonic() + 60  # the runs' checkpoint summaries come after their rows
        while True:
            table = json.loads(page.send("call table", "CALLED "))
            if "algo_params.learning_rate" in table["columns"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        columns = table["columns"]
        assert columns[:3] == ["run", "algo", "env"] and "algo_params.learning_rate" in columns
        assert "evaluation.interval_env_steps" in columns and "name" not in columns
        first = dict(zip(columns, table["rows"][0], strict=True))
        best = max(float(row["eval_return_mean"]) for row in evaluated)
        assert (first["run"], first["algo_params.learning_rate"]) == ("compared", 0.001)
        assert first["best evaluation"] == pytest.approx(best)
        assert first["env steps"] == 256 and first["env"] == "InvertedPendulum-v5"
        live_row = next(row for row in table["rows"] if row[0] == "live")
        assert dict(zip(columns, live_row, strict=True))["algo_params.learning_rate"] == 0.0003

        page.send("set metric all", "SET")  # every numeric column, a grid of small charts
        charts = json.loads(page.send("call charts", "CALLED "))
        assert charts[0] == "episode return" and {"Loss/value", "sps"} <= set(charts)
        csv_file, png_file = tmp_path / "returns.csv", tmp_path / "returns.png"
        assert page.send(f"download 0 CSV {csv_file}", "DOWNLOADED ") == "episode_return.csv"
        header = csv_file.read_text().splitlines()[0]
        assert header.startswith("env steps,") and "compared (evaluation)" in header
        assert page.send(f"download 0 PNG {png_file}", "DOWNLOADED ") == "episode_return.png"
        assert png_file.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        page.close()
        server.shutdown()
        server.server_close()


def test_a_run_whose_task_reports_success_gets_a_success_chart(tmp_path):
    """A run's CSV with success columns (as a task reporting success writes it): the training
    rate and the evaluations' are drawn in the success chart, apart from the metric grid."""
    from drlcli.algos.ppo.algorithm import PPO
    from drlcli.metrics.schema import metric_columns

    folder = tmp_path / "out"
    folder.mkdir()
    writer = MetricsWriter(
        folder / "metrics_reach.csv", metric_columns(PPO, evaluation=True, success=True)
    )
    for round_number in range(1, 5):
        row = {"round": round_number, "env_steps": 100 * round_number, "wall_time_s": 1.0}
        row |= {"sps": 100.0, "episodes": 4, "episode_return_mean": float(round_number)}
        row["success_rate"] = round_number / 4
        if round_number % 2 == 0:  # an evaluation finished in rounds 2 and 4
            row |= {"eval_return_mean": 2.0, "eval_env_steps": 100 * (round_number - 1)}
            row["eval_success_rate"] = 0.5
        writer.write(row)
    writer.close()
    server = start_dashboard([folder], port=0)
    page = Page(server.url)
    try:
        page.line("READY ")
        assert json.loads(page.send("call successPoints", "CALLED ")) == {
            "reach": 4,
            "reach (evaluation)": 2,
        }
        assert "success rate" in json.loads(page.send("call charts", "CALLED "))
        page.send("set metric all", "SET")
        charts = json.loads(page.send("call charts", "CALLED "))
        assert charts.count("success rate") == 1 and "success_rate" not in charts
    finally:
        page.close()
        server.shutdown()
        server.server_close()


def test_a_seed_groups_band_can_be_the_bootstrap_interval_of_its_mean(tmp_path):
    """Three seeds of one config (CSVs as drl train writes them): the band is the seeds'
    min/max, or, chosen beside it, the 95% bootstrap interval of their mean as scipy computes
    it (the server's /api/intervals); the runs table gives the group's IQM and interval."""
    import csv
    import io

    from drlcli.algos.ppo.algorithm import PPO
    from drlcli.metrics.schema import metric_columns
    from drlcli.seed_statistics import bootstrap_interval, mean_intervals

    folder = tmp_path / "out"
    folder.mkdir()
    returns = {0: [1.0, 4.0, 9.0], 1: [2.0, 6.0, 7.0], 2: [0.0, 5.0, 14.0]}
    for seed, values in returns.items():
        writer = MetricsWriter(
            folder / f"metrics_hop_seed{seed}.csv", metric_columns(PPO, evaluation=True)
        )
        for index, value in enumerate(values, start=1):
            row = {"round": index, "env_steps": 100 * index, "wall_time_s": 1.0 * index}
            row |= {"sps": 100.0, "episodes": 2, "episode_return_mean": value}
            if index == 3:
                row |= {"eval_return_mean": 10.0 * value, "eval_env_steps": 200}
            writer.write(row)
        writer.close()
    server = start_dashboard([folder], port=0)
    page = Page(server.url)

    def drawn() -> list[dict[str, str]]:
        text = json.loads(page.send('call chartCsv ["episode return"]', "CALLED "))
        return list(csv.DictReader(io.StringIO(text)))

    try:
        page.line("READY ")
        rows = drawn()
        assert [float(row["hop (3 seeds) min"]) for row in rows if row["hop (3 seeds) min"]] == [
            0.0,
            4.0,
            7.0,
        ]
        page.send("set band interval", "SET")
        deadline = time.monotonic() + 60
        while "hop (3 seeds) 95% low" not in rows[0] and time.monotonic() < deadline:
            time.sleep(0.2)
            rows = drawn()
        by_step = [list(values) for values in zip(*returns.values(), strict=True)]
        low, high = mean_intervals(by_step)
        drawn_low = [float(row["hop (3 seeds) 95% low"]) for row in rows if row["hop (3 seeds)"]]
        drawn_high = [float(row["hop (3 seeds) 95% high"]) for row in rows if row["hop (3 seeds)"]]
        assert drawn_low == pytest.approx(low) and drawn_high == pytest.approx(high)
        assert all(lo < high_ for lo, high_ in zip(drawn_low, drawn_high, strict=True))
        deadline = time.monotonic() + 60
        while True:
            table = json.loads(page.send("call table", "CALLED "))
            if "group IQM [95% interval]" in table["columns"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        column = table["columns"].index("group IQM [95% interval]")
        finals = [10.0 * values[-1] for values in returns.values()]  # 90, 70, 140
        interval = bootstrap_interval([finals], "iqm")
        expected = f"100 [{interval.low:.4g}, {interval.high:.4g}]"
        assert {row[column] for row in table["rows"]} == {expected}
    finally:
        page.close()
        server.shutdown()
        server.server_close()

"""`drl dashboard`: run discovery, the JSON API over real metrics CSVs, and its safety."""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from drlcli.algos.ppo.algorithm import PPO
from drlcli.checkpoints.audit import audit_checkpoint
from drlcli.dashboard.server import start_dashboard
from drlcli.errors import UsageError
from drlcli.metrics.csv_file import MetricsWriter
from drlcli.metrics.runs import find_runs, read_rows
from drlcli.metrics.schema import metric_columns
from drlcli.run_names import seed_group

COLUMNS = metric_columns(PPO)


def row(round_index: int, **values) -> dict:
    return {
        "round": round_index,
        "env_steps": 256 * round_index,
        "wall_time_s": 1.5 * round_index,
        "episode_return_mean": 10.0 * round_index,
        "episode_return_min": 5.0 * round_index,
        "episode_return_max": 20.0 * round_index,
        "Loss/value": 1.0 / round_index,
        **values,
    }


def write_run(folder: Path, name: str, rounds: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    writer = MetricsWriter(folder / f"metrics_{name}.csv", COLUMNS)
    for index in range(1, rounds + 1):
        writer.write(row(index))
    writer.close()
    return folder / f"metrics_{name}.csv"


@pytest.fixture
def served(tmp_path):
    """A dashboard over tmp_path/runs on a free port; yields (root, get)."""
    root = tmp_path / "runs"
    root.mkdir()
    server = start_dashboard([root], port=0)

    def get(path: str, headers: dict | None = None):
        request = urllib.request.Request(server.url.rstrip("/") + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read(), dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, error.read(), dict(error.headers)

    get.url = server.url
    yield root, get
    server.shutdown()
    server.server_close()


def get_json(get, path):
    status, body, _ = get(path)
    return status, json.loads(body)


def runs_by_name(get):
    _, listing = get_json(get, "/api/runs")
    return {run["name"]: run for run in listing["runs"]}


def test_runs_are_found_recursively_with_checkpoints_and_seed_groups(served, checkpoint_file):
    root, get = served
    write_run(root / "a", "hopper_ppo_seed0", 3)
    write_run(root / "a", "hopper_ppo_seed1", 2)
    write_run(root / "b" / "deeper", "cheetah", 1)
    checkpoint = checkpoint_file(name="model_cheetah.pt")
    os.replace(checkpoint, root / "b" / "deeper" / "model_cheetah.pt")
    (root / "b" / "deeper" / "cheetah_episode0.mp4").write_bytes(b"\x00" * 100)
    (root / "notes.csv").write_text("a,b\n1,2\n")  # not a metrics CSV
    runs = runs_by_name(get)
    assert set(runs) == {"hopper_ppo_seed0", "hopper_ppo_seed1", "cheetah"}
    assert runs["hopper_ppo_seed0"]["group"] == runs["hopper_ppo_seed1"]["group"] == "hopper_ppo"
    assert runs["cheetah"]["checkpoint"] == "b/deeper/model_cheetah.pt"
    assert runs["cheetah"]["best_checkpoint"] is None
    assert runs["cheetah"]["videos"] == ["cheetah_episode0.mp4"]
    assert seed_group("walker-seed-12") == "walker"


def test_a_searchs_trials_are_one_group_with_their_results(served):
    """drl tune's layout: <search>/search.yaml, trials/<trial>/metrics_trial.csv, and each
    re-trained candidate's seeds under retrain/; results.csv once the search ended."""
    root, get = served
    search = root / "search_hopper"
    search.mkdir()
    (search / "search.yaml").write_text("config: {}\n")
    for trial in ("trial_001", "trial_002"):
        write_run(search / "trials" / trial, "trial", 2)
    for seed in (1000, 1001):
        write_run(search / "retrain" / f"trial_002_seed{seed}", "trial", 2)
    write_run(root / "trials" / "lone", "trial", 1)  # a folder named trials, but no search
    runs = {(run["group"], run["name"]): run for run in get_json(get, "/api/runs")[1]["runs"]}
    assert set(runs) == {
        ("search search_hopper", "trial_001"),
        ("search search_hopper", "trial_002"),
        ("search search_hopper: trial_002 re-trained", "trial_002_seed1000"),
        ("search search_hopper: trial_002 re-trained", "trial_002_seed1001"),
        ("trial", "trial"),
    }
    trial = runs[("search search_hopper", "trial_001")]
    assert (trial["group_kind"], trial["note"], trial["values"]) == ("trials", "", {})
    assert (
        runs[("search search_hopper: trial_002 re-trained", "trial_002_seed1000")]["group_kind"]
        == "seeds"
    )
    (search / "results.csv").write_text(
        "trial,algo_params.learning_rate,objective,last_evaluation_return,env_steps,state\n"
        "trial_002,0.001,812.25,800,1000,finished\n"
        "trial_001,0.0001,,,300,error\n"
    )
    runs = {run.name: run.describe() for run in find_runs([root])}  # the server rescans later
    assert runs["trial_002"]["note"] == "objective 812.2, finished"
    assert runs["trial_002"]["values"] == {"algo_params.learning_rate": "0.001"}
    assert runs["trial_001"]["note"] == "no objective, error"


def test_a_trial_of_several_seeds_is_a_seed_group_of_its_own(tmp_path):
    """search.seeds_per_trial: trials/<trial>/seed_<n>/metrics_trial.csv, one run per seed."""
    search = tmp_path / "search_walker"
    search.mkdir()
    (search / "search.yaml").write_text("config: {}\n")
    for seed in (3, 4):
        write_run(search / "trials" / "trial_001" / f"seed_{seed}", "trial", 2)
        # Ray Tune's checkpoint of the trial: copies of the seeds' CSVs, not runs.
        write_run(search / "trials" / "trial_001" / "checkpoint_000002" / f"seed_{seed}", "m", 1)
    write_run(tmp_path / "trials" / "lone" / "seed_1", "trial", 1)  # no search above it
    runs = {(run.group, run.name): run for run in find_runs([tmp_path])}
    assert set(runs) == {
        ("search search_walker: trial_001", "trial_001 seed_3"),
        ("search search_walker: trial_001", "trial_001 seed_4"),
        ("trial", "trial"),
    }
    assert runs[("search search_walker: trial_001", "trial_001 seed_3")].group_kind == "seeds"
    (search / "results.csv").write_text(
        "trial,gamma,objective,last_evaluation_return,env_steps,state\n"
        "trial_001,0.99,40.5,41,1000,finished\n"
    )
    seed = next(run for run in find_runs([tmp_path]) if run.name == "trial_001 seed_4")
    assert (seed.note, seed.values) == ("objective 40.5, finished", {"gamma": "0.99"})


def test_rows_come_whole_then_only_the_new_ones(served):
    root, get = served
    path = write_run(root, "run", 3)
    run = runs_by_name(get)["run"]
    _, first = get_json(get, f"/api/runs/{run['id']}/rows")
    assert first["reset"] and first["columns"] == COLUMNS and len(first["rows"]) == 3
    env_steps = first["columns"].index("env_steps")
    assert [r[env_steps] for r in first["rows"]] == [256.0, 512.0, 768.0]
    sps = first["columns"].index("sps")
    assert first["rows"][0][sps] is None  # empty cell: null
    query = f"offset={first['offset']}&generation={first['generation']}"
    _, nothing = get_json(get, f"/api/runs/{run['id']}/rows?{query}")
    assert nothing["rows"] == [] and not nothing["reset"]
    writer = MetricsWriter(path, COLUMNS, append=True)
    writer.write(row(4))
    writer.close()
    _, more = get_json(get, f"/api/runs/{run['id']}/rows?{query}")
    assert not more["reset"] and [r[0] for r in more["rows"]] == [4.0]


def test_a_torn_last_line_waits_for_its_newline(tmp_path):
    path = write_run(tmp_path, "torn", 2)
    whole = read_rows(path)
    with path.open("a") as handle:
        handle.write("3,768,4.5,")  # a row being written
    torn = read_rows(path, whole.offset, whole.generation)
    assert torn.rows == [] and torn.offset == whole.offset
    with path.open("a") as handle:
        handle.write(",".join([""] * (len(COLUMNS) - 3)) + "\n")
    completed = read_rows(path, torn.offset, torn.generation)
    assert [r[0] for r in completed.rows] == [3.0]


def test_a_restarted_run_is_a_reset_even_when_the_file_grew_back(tmp_path):
    path = write_run(tmp_path, "restart", 2)
    before = read_rows(path)
    writer = MetricsWriter(path, COLUMNS)  # a fresh run truncates
    for index in range(1, 6):
        writer.write(row(index, wall_time_s=100.0 + index))
    writer.close()
    after = read_rows(path, before.offset, before.generation)
    assert after.reset and [r[0] for r in after.rows] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_file_appended_to_while_it_is_polled_loses_and_repeats_nothing(served):
    root, get = served
    path = write_run(root, "live", 1)
    run = runs_by_name(get)["live"]
    done = threading.Event()

    def append():
        writer = MetricsWriter(path, COLUMNS, append=True)
        for index in range(2, 201):
            writer.write(row(index))
            if index % 20 == 0:
                time.sleep(0.01)
        writer.close()
        done.set()

    appender = threading.Thread(target=append)
    appender.start()
    rounds, offset, generation = [], 0, ""
    while True:
        finished = done.is_set()
        _, chunk = get_json(
            get, f"/api/runs/{run['id']}/rows?offset={offset}&generation={generation}"
        )
        if chunk["reset"]:
            rounds = []
        rounds += [r[0] for r in chunk["rows"]]
        offset, generation = chunk["offset"], chunk["generation"]
        if finished:
            break
    appender.join()
    assert rounds == [float(i) for i in range(1, 201)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("round,env_steps,sps\n1,256,3\n2,512\n", "a row has 2 cells, the header 3"),
        ("round,env_steps,sps\n1,256,fast\n", "column 'sps' holds 'fast', not a number"),
        ("round,env_steps", "no complete header line yet"),
        ("", "empty file"),
        ("a,b\n1,2\n", "header does not start with round,env_steps"),
    ],
)
def test_a_malformed_csv_is_an_error_for_its_run_and_the_server_goes_on(served, text, message):
    root, get = served
    write_run(root, "good", 2)
    (root / "metrics_bad.csv").write_text(text)
    runs = runs_by_name(get)
    status, body = get_json(get, f"/api/runs/{runs['bad']['id']}/rows")
    assert status == 422 and message in body["error"] and body["error"].startswith("bad: ")
    status, good = get_json(get, f"/api/runs/{runs['good']['id']}/rows")
    assert status == 200 and len(good["rows"]) == 2


def test_run_details_hold_config_semantics_and_the_verify_audit(served, checkpoint_file):
    root, get = served
    write_run(root, "fixture", 2)
    os.replace(checkpoint_file(), root / "model_fixture.pt")
    run = runs_by_name(get)["fixture"]
    status, details = get_json(get, f"/api/runs/{run['id']}/details")
    assert status == 200
    assert details["actor_semantics"]["action_transform"] == "clip"
    assert details["config"]["env"]["id"] == "InvertedPendulum-v5"
    assert details["best_return"] == 12.5
    assert details["audit"] == json.loads(audit_checkpoint(root / "model_fixture.pt").to_json())


def test_a_runs_summary_is_its_checkpoints_config_and_progress_read_once(served, checkpoint_file):
    root, get = served
    write_run(root, "fixture", 2)
    os.replace(checkpoint_file(), root / "model_fixture.pt")
    write_run(root / "fresh", "fresh", 1)  # no checkpoint yet
    runs = runs_by_name(get)
    status, summary = get_json(get, f"/api/runs/{runs['fixture']['id']}/summary")
    assert status == 200 and summary["checkpoint_error"] is None
    assert summary["config"]["env"]["id"] == "InvertedPendulum-v5"
    assert summary["best_return"] == 12.5 and summary["progress"]["env_steps"] >= 0
    again = get_json(get, f"/api/runs/{runs['fixture']['id']}/summary")[1]
    assert again == summary
    (root / "model_fixture.pt").write_bytes(b"damaged")  # changed: read again
    damaged = get_json(get, f"/api/runs/{runs['fixture']['id']}/summary")[1]
    assert damaged["config"] is None and damaged["checkpoint_error"]
    fresh = get_json(get, f"/api/runs/{runs['fresh']['id']}/summary")[1]
    assert fresh["checkpoint_error"] == "no checkpoint beside the metrics CSV"


def test_videos_are_served_with_byte_ranges(served):
    root, get = served
    write_run(root, "vid", 1)
    (root / "vid.mp4").write_bytes(bytes(range(256)) * 4)
    run = runs_by_name(get)["vid"]
    status, body, headers = get(f"/api/runs/{run['id']}/video/vid.mp4", {"Range": "bytes=10-19"})
    assert status == 206 and body == bytes(range(10, 20))
    assert headers["Content-Range"] == "bytes 10-19/1024"
    status, body, _ = get(f"/api/runs/{run['id']}/video/vid.mp4")
    assert status == 200 and len(body) == 1024


def test_nothing_outside_the_folders_is_served(served, tmp_path):
    root, get = served
    secret = tmp_path / "secret"
    secret.mkdir()
    write_run(secret, "outside", 2)
    (secret / "outside.mp4").write_bytes(b"private")
    write_run(root, "inside", 1)
    (root / "metrics_linked.csv").symlink_to(secret / "metrics_outside.csv")
    (root / "inside.mp4").symlink_to(secret / "outside.mp4")
    runs = runs_by_name(get)
    assert set(runs) == {"inside"}  # the symlinked CSV leaves the folder: not a run
    assert runs["inside"]["videos"] == []  # nor is the symlinked video
    run_id = runs["inside"]["id"]
    for path in [
        "/static/../server.py",
        "/static/%2e%2e/server.py",
        "/static/..%2fserver.py",
        "/static/%2fetc%2fpasswd",
        f"/api/runs/{run_id}/video/..%2f..%2fsecret%2foutside.mp4",
        f"/api/runs/{run_id}/video/inside.mp4",
        f"/api/runs/{run_id}/video/%2Fetc%2Fpasswd",
        "//etc/passwd",
        "/api/runs/../../etc/passwd",
    ]:
        status, body, _ = get(path)
        assert status in (403, 404), path
        assert b"private" not in body and b"root:" not in body


def test_a_taken_port_and_a_missing_folder_are_clear_errors(served, tmp_path):
    root, _ = served
    first = start_dashboard([root], port=0)
    try:
        with pytest.raises(UsageError, match=r"port \d+ on 127.0.0.1 is in use"):
            start_dashboard([root], port=first.server_address[1])
    finally:
        first.shutdown()
        first.server_close()
    with pytest.raises(UsageError, match="not a folder"):
        start_dashboard([tmp_path / "nope"], port=0)


def test_the_page_and_its_assets_are_served(served):
    _, get = served
    status, body, headers = get("/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert b"drl dashboard" in body


def test_find_runs_skips_virtual_environments(tmp_path):
    write_run(tmp_path / ".venv" / "lib", "hidden", 1)
    write_run(tmp_path / "out", "shown", 1)
    assert [run.name for run in find_runs([tmp_path])] == ["shown"]


def post_json(get, path: str, body: bytes):
    """POST ``body`` to the server of ``get``; (status, JSON)."""
    request = urllib.request.Request(get.url.rstrip("/") + path, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_seed_bands_and_group_intervals_come_from_scipys_bootstrap(served):
    """POST /api/intervals: per point, the bootstrap interval of the seeds' mean (None below 2
    values); GET /api/groups: per seed group of the runs asked for, the IQM of their final
    evaluations and its interval, as drl compare computes them."""
    from drlcli.seed_statistics import bootstrap_interval, mean_intervals

    root, get = served
    points = [[0.0, 0.0, 0.0, 10.0], [5.0], [1.0, 2.0, 3.0]]
    status, body = post_json(get, "/api/intervals", json.dumps({"points": points}).encode())
    assert status == 200
    assert body == {"low": [0.0, None, 1.0], "high": [7.5, None, 3.0]}
    assert (body["low"], body["high"]) == tuple(mean_intervals(points))
    for bad in (b"", b"not json", b'{"points": [["a"]]}', b'{"points": [[NaN, 1]]}', b"{}"):
        status, body = post_json(get, "/api/intervals", bad)
        assert status == 400 and "error" in body
    assert post_json(get, "/api/elsewhere", b"{}")[0] == 404

    finals = {0: 100.0, 1: 140.0, 2: 90.0}
    evaluated = metric_columns(PPO, evaluation=True)
    for name, value in [*((f"hop_seed{seed}", v) for seed, v in finals.items()), ("one", 5.0)]:
        writer = MetricsWriter(root / f"metrics_{name}.csv", evaluated)
        writer.write(row(1))
        writer.write(row(2, eval_return_mean=value, eval_env_steps=256))
        writer.close()
    runs = runs_by_name(get)
    asked = ",".join(runs[name]["id"] for name in ("hop_seed0", "hop_seed1", "hop_seed2", "one"))
    status, body = get_json(get, f"/api/groups?runs={asked}")
    interval = bootstrap_interval([list(finals.values())], "iqm")
    assert status == 200 and body["groups"] == {  # "one" is a group of one: no interval
        "hop": {
            "runs": 3,
            "iqm": pytest.approx(110.0),  # 3 seeds: nothing cut, the mean
            "low": interval.low,
            "high": interval.high,
            "final": False,  # no checkpoint yet: the latest periodic evaluations
        }
    }
    assert get_json(get, "/api/groups")[1] == {"groups": {}}

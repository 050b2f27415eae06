from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from drlcli import __version__
from drlcli.cli import app

from .conftest import REPO_ROOT

runner = CliRunner()


@pytest.mark.subprocess
def test_help_imports_neither_torch_nor_ray():
    code = (
        "import sys, json\n"
        "from drlcli.cli import app\n"
        "try:\n    app(['--help'], prog_name='drl')\n"
        "except SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, check=True
    )
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


@pytest.mark.parametrize("command", ["train", "play", "export", "verify", "dashboard"])
def test_every_command_has_help(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0
    assert "Usage" in result.output


def test_the_command_list_gives_each_command_one_line():
    """Typer's command list keeps a summary's line breaks: a docstring whose first paragraph
    runs over several lines breaks `drl --help`'s table mid-sentence."""
    group = typer.main.get_command(app)
    assert len(group.commands) >= 9
    for name, command in group.commands.items():
        commands = [command, *getattr(command, "commands", {}).values()]
        for each in commands:
            summary = inspect.cleandoc(each.help or "").split("\n\n")[0]
            assert summary and "\n" not in summary, f"drl {name}: {summary!r}"
    result = runner.invoke(app, ["--help"], terminal_width=200)
    assert "Compare groups of seeds: median, IQM and intervals" in result.output


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


@pytest.mark.subprocess
def test_unknown_key_prints_one_line_and_exits_2(write_config):
    path = write_config("num_actors: 1\nlearning_rate: 0.1\n")
    result = subprocess.run(
        [sys.executable, "-m", "drlcli", "train", str(path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "learning_rate: unknown key" in lines[0]
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(write_config):
    path = write_config("bogus: 1\n")
    result = runner.invoke(app, ["--debug", "train", "--dry-run", str(path)])
    assert result.exit_code == 2
    assert "Traceback" in result.output


def test_missing_config_is_a_config_error(tmp_path):
    result = runner.invoke(app, ["train", "--dry-run", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "config file not found" in result.output


@pytest.mark.parametrize(
    "path", sorted((REPO_ROOT / "drlcli" / "presets").glob("*.yaml")), ids=lambda p: p.name
)
def test_dry_run_on_every_shipped_config(path):
    result = runner.invoke(app, ["train", "--dry-run", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "dry run: config valid" in result.output
    assert "rollout actors" in result.output


def test_dry_run_reports_a_bad_env_id(write_config):
    result = runner.invoke(
        app, ["train", "--dry-run", str(write_config("env: {id: NoSuchEnv-v0}\n"))]
    )
    assert result.exit_code == 2
    assert "env.id: cannot make 'NoSuchEnv-v0'" in result.output


def test_dry_run_applies_env_kwargs_and_reports_bad_ones(write_config):
    text = "env: {id: Ant-v5, kwargs: {include_cfrc_ext_in_observation: false}}\n"
    result = runner.invoke(app, ["train", "--dry-run", str(write_config(text))])
    assert result.exit_code == 0, result.output
    assert re.search(r"observation dim\s*│\s*27\s", result.output)  # 105 with contact forces
    result = runner.invoke(
        app, ["train", "--dry-run", str(write_config("env: {id: Ant-v5, kwargs: {foo: 1}}\n"))]
    )
    assert result.exit_code == 2
    assert "env.kwargs: Ant-v5 does not accept {'foo': 1}" in result.output


def test_dry_run_reports_a_topology_error(write_config):
    result = runner.invoke(
        app,
        [
            "train",
            "--dry-run",
            str(write_config("num_actors: 3\nnum_gpus: 2\nactors_per_gpu: 2\n")),
        ],
    )
    assert result.exit_code == 2
    assert "num_actors: must equal num_gpus * actors_per_gpu" in result.output


def test_error_text_is_printed_verbatim_not_as_markup(write_config):
    # A key that looks like rich markup must survive in the one-line error.
    result = runner.invoke(app, ["train", "--dry-run", str(write_config('"[b]": 1\n'))])
    assert result.exit_code == 2
    assert "[b]: unknown key" in result.output


def test_dry_run_checks_the_learner_device_rules(write_config, monkeypatch):
    import drlcli.topology

    no_gpu = drlcli.topology.AvailableDevices(cuda_devices=0, mps=False)
    monkeypatch.setattr(drlcli.topology, "detect_available_devices", lambda: no_gpu)
    text = "algo: flash_sac\nalgo_params: {use_whole_cycle_cuda_graph: true}\n"
    result = runner.invoke(app, ["train", "--dry-run", str(write_config(text))])
    assert result.exit_code == 2
    assert "use_whole_cycle_cuda_graph: true needs a CUDA learner device" in result.output


def test_a_malformed_actor_config_is_one_line_and_exit_2(write_config):
    text = "algo: flash_sac\nalgo_params: {actor_config: {kwargs: {width: 3}}}\n"
    result = runner.invoke(app, ["train", str(write_config(text))])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert "algo_params.actor_config.builder: required; set it" in result.output


def test_dashboard_refuses_a_missing_folder(tmp_path):
    result = runner.invoke(app, ["dashboard", str(tmp_path / "nowhere"), "--port", "0"])
    assert result.exit_code == 2
    assert "not a folder" in result.output


# The page of docs/ that shows each command's examples in full (the README shows the first).
COMMAND_GUIDES = {
    "train": "training.md",
    "play": "play_verify_export.md",
    "export": "play_verify_export.md",
    "verify": "play_verify_export.md",
    "dashboard": "dashboard.md",
    "compare": "compare.md",
    "tune": "tune.md",
}


@pytest.mark.parametrize("command", sorted(COMMAND_GUIDES))
def test_help_shows_examples_that_the_readme_and_its_guide_show_too(command):
    from drlcli.cli import EXAMPLES

    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "Examples:" in result.stdout
    readme = (REPO_ROOT / "README.md").read_text()
    row = re.search(rf"^\| `{command}` \| `([^`]+)` \|", readme, re.MULTILINE)
    assert row is not None, f"the README's table of commands lacks {command}"
    assert row.group(1) == EXAMPLES[command][0][0], "the README shows the first --help example"
    guide = (REPO_ROOT / "docs" / COMMAND_GUIDES[command]).read_text()
    for line, _ in EXAMPLES[command]:
        assert line in result.stdout
        assert f"    {line}" in guide, f"docs/{COMMAND_GUIDES[command]} lacks the example {line!r}"


def test_seed_trains_a_config_on_that_seed_under_a_seeded_name(write_config):
    """``--seed N``: env.seed N and the run ``<name>_seed<N>`` (its checkpoints and CSV beside
    the other seeds'); a name that ends with a seed has it replaced; a seed out of range is one
    line, exit 2."""
    result = runner.invoke(
        app, ["train", "quickstart", "--seed", "3", "--dry-run"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert "output/model_quickstart_seed3.pt" in result.output
    assert "output/metrics_quickstart_seed3.csv" in result.output
    path = write_config("name: walker_seed0\nenv: {seed: 0}\n")
    result = runner.invoke(app, ["train", str(path), "--seed", "12", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "model_walker_seed12.pt" in " ".join(result.output.split())
    for bad in ("-1", str(2**32)):
        result = runner.invoke(app, ["train", "quickstart", "--seed", bad, "--dry-run"])
        assert result.exit_code == 2
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines[-1] == f"error: --seed: {bad} is outside [0, 4294967295]", result.output


def test_seed_with_resume_refuses_another_seeds_checkpoint(tmp_path, checkpoint_file):
    """``--seed 3 --resume`` of a run trained on another seed is one line that names the
    checkpoint's seed; nothing is written."""
    checkpoint = checkpoint_file()
    from drlcli.checkpoints.files import load_payload

    trained_on = load_payload(checkpoint)["config"]["env"]["seed"]
    other = trained_on + 3
    output = tmp_path / "out"
    config = tmp_path / "run.yaml"
    config.write_text(f"output_dir: {output}\n")
    result = runner.invoke(
        app, ["train", str(config), "--seed", str(other), "--resume", str(checkpoint)]
    )
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert (
        f"error: --seed {other}: {checkpoint} trained on seed {trained_on}; continue it with "
        f"--seed {trained_on}, or resume seed {other}'s own run ({output}/model_run_seed{other}.pt)"
    ) in line
    assert not output.exists()


def test_set_changes_keys_for_one_run_and_a_bad_one_is_one_line(write_config):
    """``--set KEY=VALUE``: values typed as YAML over the preset's; an unknown key is refused
    with its path, the ``--set`` that gave it and the key meant; a malformed one in one line."""
    result = runner.invoke(
        app,
        [
            "train",
            "quickstart",
            "--set",
            "algo_params.learning_rate=1e-3",
            "--set",
            "algo_params.hidden_sizes=[32, 32]",
            "--set",
            "name=small",
            "--dry-run",
        ],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    rows = {
        cells[1].strip(): cells[2].strip()
        for cells in (line.split("│") for line in result.output.splitlines())
        if len(cells) == 4
    }
    assert rows["algo_params.learning_rate"] == "0.001"
    assert rows["algo_params.hidden_sizes"] == "[32, 32]"
    assert rows["metrics_path"] == "output/metrics_small.csv"
    path = write_config("env: {id: InvertedPendulum-v5}\n")
    cases = {
        "algo_params.learnin_rate=1": (
            f"error: {path} with --set algo_params.learnin_rate: algo_params.learnin_rate: "
            "unknown key; did you mean 'learning_rate'?"
        ),
        "total_env_steps=many": (
            f"error: {path} with --set total_env_steps: total_env_steps: expected int, got 'many'"
        ),
        "learning_rate": "error: --set 'learning_rate': expected KEY=VALUE",
        "a=[1,": "error: --set a: '[1,' is not a YAML value",
    }
    for item, expected in cases.items():
        result = runner.invoke(app, ["train", str(path), "--set", item, "--dry-run"])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith(expected), result.output


def test_the_resume_line_of_a_stopped_run_gives_its_set_and_seed_again(write_config):
    """The line a stopped run prints is a shell command that trains the same config."""
    import shlex

    from drlcli.cli import resume_command

    path = write_config("name: walker\n", name="my run.yaml")
    overrides = ["algo_params.hidden_sizes=[32, 32]", "total_env_steps=4096"]
    line = resume_command(path, overrides, 3, path.parent / "model_walker_seed3.pt")
    words = shlex.split(line)
    assert words[:3] == ["drl", "train", str(path)]
    assert words[-2:] == ["--resume", str(path.parent / "model_walker_seed3.pt")]
    again = runner.invoke(app, [*words[1:-2], "--dry-run"], env={"COLUMNS": "200"})
    assert again.exit_code == 0, again.output
    assert "model_walker_seed3.pt" in again.output and "[32, 32]" in again.output
    plain = resume_command(path, [], None, path.parent / "m.pt")
    assert plain == f"drl train {shlex.quote(str(path))} --resume {path.parent / 'm.pt'}"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["play"], "error: drl play: missing argument 'CKPT' (drl play -h for help)"),
        (["train", "--nosuch", "x"], "error: drl train: no such option: --nosuch"),
        (
            ["play", "m.pt", "--episodes", "0"],
            "error: drl play: invalid value for '--episodes': Input should be greater than or "
            "equal to 1 (drl play -h for help)",
        ),
        (["trian"], "error: drl: no such command 'trian'. Did you mean 'train'?"),
    ],
)
def test_a_command_line_click_refuses_is_one_line_like_drls_own(
    monkeypatch, capsys, argv, expected
):
    """The console script (``main``) prints click's usage errors as drl prints its own: one
    line on stderr, exit 2, not click's boxed usage."""
    from drlcli.cli import main

    monkeypatch.setattr(sys, "argv", ["drl", *argv])
    monkeypatch.setenv("COLUMNS", "300")
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(expected), captured.err
    assert "╭" not in captured.err and "Traceback" not in captured.err


def test_main_exits_0_on_help_and_2_with_the_help_on_no_arguments(monkeypatch, capsys):
    from drlcli.cli import main

    for argv, code in ((["--help"], 0), ([], 2), (["--version"], 0)):
        monkeypatch.setattr(sys, "argv", ["drl", *argv])
        with pytest.raises(SystemExit) as exit_info:
            main()
        assert exit_info.value.code == code, argv
        captured = capsys.readouterr()
        assert ("Usage: drl" in captured.out + captured.err) == (argv != ["--version"])


def test_resume_refuses_to_write_another_runs_checkpoint_over_this_configs_run(
    tmp_path, checkpoint_file
):
    """``--resume`` of run A's checkpoint with a config naming run B, whose files exist, would
    replace B's checkpoint and append A's rows to B's metrics: refused in one line, B's files
    untouched. Into a name with no files yet (a branch of A) it goes on."""

    def named(payload):
        payload["config"]["name"] = "walker_seed4"

    checkpoint = checkpoint_file(named)
    output = tmp_path / "out"
    output.mkdir()
    metrics = output / "metrics_walker.csv"
    metrics.write_text("round,env_steps\n1,100\n")
    config = tmp_path / "walker.yaml"
    config.write_text(f"name: walker\noutput_dir: {output}\n")
    result = runner.invoke(app, ["train", str(config), "--resume", str(checkpoint), "--dry-run"])
    assert result.exit_code == 2
    line = " ".join(result.output.split())
    assert (
        f"error: --resume {checkpoint}: it is run walker_seed4's checkpoint, and this config "
        f"names run walker, whose files it would write over ({metrics}); resume with the name "
        "it trained under (set name: walker_seed4, or --seed if it was one)"
    ) in line
    assert metrics.read_text() == "round,env_steps\n1,100\n"
    config.write_text(f"name: walker_branch\noutput_dir: {output}\n")
    result = runner.invoke(app, ["train", str(config), "--resume", str(checkpoint), "--dry-run"])
    assert result.exit_code == 0, result.output
    # A's files copied under B's names: B's checkpoint is the one resumed, nothing else's.
    copied = output / "model_walker.pt"
    copied.write_bytes(checkpoint.read_bytes())
    config.write_text(f"name: walker\noutput_dir: {output}\n")
    result = runner.invoke(app, ["train", str(config), "--resume", str(copied), "--dry-run"])
    assert result.exit_code == 0, result.output

"""The shipped presets: one copy in the package, listed, printed, trained by name."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from drlcli.cli import app
from drlcli.preset_catalog import PRESET_FOLDER, available_presets, find_preset
from tests.conftest import REPO_ROOT

runner = CliRunner(env={"COLUMNS": "250"})


def test_the_repository_configs_folder_is_the_package_presets_not_a_copy():
    configs = REPO_ROOT / "configs"
    assert configs.is_symlink() and configs.resolve() == PRESET_FOLDER.resolve()
    assert {p.name for p in available_presets()} >= {"quickstart", "hopper_ppo", "ant_ppo"}


def test_presets_lists_every_preset_with_its_task_budget_and_measured_result():
    result = runner.invoke(app, ["presets"])
    assert result.exit_code == 0, result.output
    for preset in available_presets():
        config = preset.config()
        row = next(line for line in result.stdout.splitlines() if f" {preset.name} " in line)
        assert config.env.id in row and config.algo in row
        assert f"{config.total_env_steps:,}" in row
    hopper = find_preset("hopper_ppo")
    assert hopper is not None and hopper.measured.startswith("return 3504")
    assert "return 3504" in result.stdout


def test_the_results_preset_table_matches_the_presets():
    results = (REPO_ROOT / "docs" / "results.md").read_text()
    for preset in available_presets():
        config = preset.config()
        row = re.search(rf"^\| `{preset.name}` \|.*$", results, re.MULTILINE)
        assert row is not None, f"{preset.name} is missing from docs/results.md's preset table"
        assert f"| {config.algo} | {config.total_env_steps:,} |" in row.group(0)
        assert (preset.measured or "-") in row.group(0), preset.name


def test_presets_show_prints_the_file_and_refuses_an_unknown_name():
    result = runner.invoke(app, ["presets", "show", "hopper_ppo"])
    assert result.exit_code == 0 and result.stdout == find_preset("hopper_ppo").text
    result = runner.invoke(app, ["presets", "show", "hopper"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: no preset 'hopper'; the presets are: ant_flash_sac")


def test_train_takes_a_preset_name_when_no_such_file_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "quickstart", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert f"using preset quickstart ({find_preset('quickstart').path})" in result.stderr
    assert "config quickstart" in result.stdout
    (tmp_path / "quickstart").write_text("algo: [")  # a file of that name wins over the preset
    result = runner.invoke(app, ["train", "quickstart", "--dry-run"])
    assert result.exit_code == 2 and "using preset" not in result.stderr
    result = runner.invoke(app, ["train", "hoper_ppo", "--dry-run"])
    assert result.exit_code == 2
    assert "hoper_ppo: config file not found, nor a preset of that name (ant_flash_sac" in (
        " ".join(result.stderr.split())
    )


def test_every_preset_evaluates_periodically():
    """Evaluation issue: on by default in the presets, so their best checkpoints are chosen by
    deterministic evaluation."""
    for preset in available_presets():
        evaluation = preset.config().evaluation
        assert evaluation.interval_env_steps is not None, preset.name
        assert evaluation.interval_env_steps <= preset.config().total_env_steps, preset.name

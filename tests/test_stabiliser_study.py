"""scripts/bench/stabiliser_study.py on a tiny budget: a run is trained, recorded (its CSV and
its line), skipped when the study goes on, and reported; the combination is decided from the
record; every variant's config is a valid one."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts" / "bench"))
import stabiliser_study  # noqa: E402
from study_runs import Deadline, StudyRecord  # noqa: E402

from drlcli.config import config_from_dict  # noqa: E402


def _study(monkeypatch, capsys, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", ["stabiliser_study.py", *args])
    stabiliser_study.main()
    return capsys.readouterr().out


def test_a_tiny_study_trains_records_resumes_and_reports(
    tmp_path, monkeypatch, capsys, ray_cluster
):
    """One round of hopper_ppo with recompute_advantages_per_epoch through Ray, recorded; the
    second sitting skips it; the report gives its seed."""
    common = ("hopper", "--steps", "2048", "--seeds", "7", "--variants", "recompute")
    paths = ("--results", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"))
    out = _study(monkeypatch, capsys, *common, *paths)
    folder = tmp_path / "data" / "hopper"
    (entry,) = StudyRecord(folder).entries()
    assert (entry["variant"], entry["seed"], entry["env_steps"]) == ("recompute", 7, 2048)
    assert (folder / "metrics_hopper_recompute_seed7.csv").exists()
    record = json.loads((folder / "final_evaluation_hopper_recompute_seed7.json").read_text())
    assert (record["env_id"], record["seed"], record["env_steps"]) == ("Hopper-v5", 7, 2048)
    assert round(record["return_mean"], 2) == entry["final_return"]
    assert json.dumps(entry) in out
    out = _study(monkeypatch, capsys, *common, *paths)
    assert "recompute seed 7: recorded, skipped" in out
    assert len(StudyRecord(folder).entries()) == 1
    row = f"| recompute | 1 | {entry['final_return']:.0f} |"
    assert row in out  # the table of the seeds asked for
    assert row not in _study(monkeypatch, capsys, "hopper", "--report", *paths)  # 5000-5004's


def _record(tmp_path, returns: dict[str, list[float]], first_seed: int = 0) -> StudyRecord:
    record = StudyRecord(tmp_path)
    with record.path.open("a") as file:
        for variant, values in returns.items():
            for seed, value in enumerate(values, start=first_seed):
                line = {"variant": variant, "seed": seed, "final_return": value, "wall_s": 60.0}
                file.write(json.dumps(line) + "\n")
    return record


def test_the_combination_is_the_singles_above_the_presets_iqm(tmp_path):
    preset = [3000.0, 1000.0, 3100.0, 2900.0]  # IQM 2950
    record = _record(
        tmp_path,
        {
            "preset": preset,
            "normalize_value": [3000.0, 2990.0, 3100.0, 2900.0],  # 2995: above
            "adaptive_kl": [2000.0, 2000.0, 2000.0, 2000.0],
            "last_layer": preset,  # equal: not above
            "recompute": [5000.0, 0.0, 3000.0, 2950.0],  # 2975: above
            "rpo": [2900.0, 2900.0, 2900.0, 2900.0],
            "entropy": [2950.0, 2950.0, 2950.0, 2950.0],  # equal: not above
        },
    )
    assert stabiliser_study.combination(record, [0, 1, 2, 3]) == ["normalize_value", "recompute"]
    with pytest.raises(SystemExit, match="lacks seeds \\[4\\]"):
        stabiliser_study.combination(record, [0, 1, 2, 3, 4])
    table = stabiliser_study.report(record, [0, 1, 2, 3])
    assert "| preset | 4 | 2950 [" in table
    assert "| 1000 (seed 1) | 1/4 | reference |" in table  # the worst seed; one of four under 2500
    # adaptive_kl's four runs lose to the preset's three above 2000 and beat its 1000: P = 4/16.
    assert "| adaptive_kl | 4 | 2000 [2000, 2000] | 2000 (seed 0) | 4/4 | 0.25 [" in table
    assert "| rpo | 2 |" in stabiliser_study.report(record, [0, 1])  # only the seeds asked for


def test_the_winner_is_confirmed_on_fresh_seeds_by_its_probability_of_improvement(
    tmp_path, monkeypatch, capsys
):
    study = {
        "preset": [3000.0, 3100.0, 3200.0, 3300.0, 3400.0],
        "normalize_value": [3000.0, 3150.0, 3250.0, 3350.0, 3450.0],  # IQM 3250: above 3200
        "adaptive_kl": [3500.0] * 5,
        "last_layer": [1000.0] * 5,
        "recompute": [3000.0] * 5,
        "rpo": [3000.0] * 5,
        "entropy": [3000.0] * 5,
        "budget": [3000.0] * 5,
        "last_layer_mild_entropy": [3000.0] * 5,
    }
    record = _record(tmp_path / "hopper", study, first_seed=5000)
    with pytest.raises(SystemExit, match="normalize_value-adaptive_kl lacks seeds"):
        stabiliser_study.winner(record, "hopper")
    _record(tmp_path / "hopper", {"normalize_value-adaptive_kl": [3400.0] * 5}, first_seed=5000)
    assert stabiliser_study.winner(record, "hopper") == "adaptive_kl"
    _record(tmp_path / "hopper", {"normalize_value-adaptive_kl": [3600.0] * 5}, first_seed=4000)
    assert (
        stabiliser_study.winner(record, "hopper") == "adaptive_kl"
    )  # only the study's seeds count
    # Confirmation: a preset that collapses on two fresh seeds against a winner that never does.
    FRESH = stabiliser_study.CONFIRMATION_SEEDS[0]
    _record(tmp_path / "hopper", {"preset": [900.0, 3000.0, 800.0, 3100.0, 3050.0]}, FRESH)
    _record(tmp_path / "hopper", {"adaptive_kl": [3200.0, 3300.0, 3250.0, 3400.0, 3350.0]}, FRESH)
    out = _study(monkeypatch, capsys, "hopper", "--confirm", "--report", "--results", str(tmp_path))
    assert "| preset | 5 |" in out and "| adaptive_kl | 5 |" in out
    assert "interval rule: adaptive_kl replaces the preset; " in out
    # A winner on par with the preset on the fresh seeds leaves it as it is.
    tie = _record(tmp_path / "tie", {"adaptive_kl": [900.0, 3000.0, 800.0, 3100.0, 3050.0]}, FRESH)
    _record(tmp_path / "tie", {"preset": [900.0, 3000.0, 800.0, 3100.0, 3050.0]}, FRESH)
    assert stabiliser_study.verdict(tie, "adaptive_kl").startswith(
        "interval rule: the preset stays"
    )


def test_fewer_than_two_singles_above_the_preset_make_no_combination_and_none_no_winner(
    tmp_path, monkeypatch, capsys
):
    """A preset that no single beats: the combination would be the preset again and is not
    run; --confirm has nothing to confirm (Hopper's budget and pair are not Walker2d's to wait
    for). One single above it: the combination would be that single again; it is the winner,
    confirmed alone."""
    preset = [5000.0, 5100.0, 5200.0, 5300.0, 5400.0]
    below = {name: [4000.0] * 5 for name in stabiliser_study.SINGLES}
    record = _record(tmp_path / "walker2d", {"preset": preset, **below}, first_seed=5000)
    paths = ("--results", str(tmp_path), "--output-dir", str(tmp_path / "out"))
    out = _study(monkeypatch, capsys, "walker2d", "--variants", "combination", *paths)
    assert "the singles whose IQM is above the preset's are none; fewer than two" in out
    assert not record.returns("combination")
    assert stabiliser_study.winner(record, "walker2d") is None
    out = _study(monkeypatch, capsys, "walker2d", "--confirm", *paths)
    assert "nothing to confirm, the preset stays" in out
    assert not record.returns("preset").keys() & set(stabiliser_study.CONFIRMATION_SEEDS)
    _record(tmp_path / "walker2d", {"rpo": [6000.0] * 5}, first_seed=5000)
    out = _study(monkeypatch, capsys, "walker2d", "--variants", "combination", *paths)
    assert "are ['rpo']; fewer than two" in out
    assert stabiliser_study.winner(record, "walker2d") == "rpo"


def test_a_combination_is_recorded_under_its_members_and_a_changed_one_is_a_new_variant(
    tmp_path, monkeypatch, capsys
):
    """Runs of an earlier combination are not taken for the current one: once a single added
    to the study beats the preset, the members change and the new combination is a variant of
    its own (run next, here stopped by the deadline before it trains), the old one still
    reported."""
    preset = [3000.0, 3100.0, 3200.0, 3300.0, 3400.0]
    above, below = [3500.0] * 5, [1000.0] * 5
    candidates = [*stabiliser_study.SINGLES, *stabiliser_study.OUTSIDE_COMBINATION["hopper"]]
    singles = {name: below for name in candidates}
    singles |= {"adaptive_kl": above, "last_layer": above}
    old_combination = {"adaptive_kl-last_layer": [3600.0] * 5}
    paths = ("--output-dir", str(tmp_path / "out"), "--hours", "0")
    before = _record(tmp_path / "before" / "hopper", {"preset": preset, **singles}, 5000)
    _record(tmp_path / "before" / "hopper", old_combination, 5000)
    assert stabiliser_study.winner(before, "hopper") == "adaptive_kl-last_layer"
    args = ("hopper", "--variants", "combination", "--results", str(tmp_path / "before"))
    out = _study(monkeypatch, capsys, *args, *paths)
    assert "adaptive_kl-last_layer seed 5000: recorded, skipped" in out

    singles["entropy"] = [3550.0] * 5
    after = _record(tmp_path / "after" / "hopper", {"preset": preset, **singles}, 5000)
    _record(tmp_path / "after" / "hopper", old_combination, 5000)
    assert stabiliser_study.combination(after) == ["adaptive_kl", "last_layer", "entropy"]
    with pytest.raises(SystemExit, match="adaptive_kl-last_layer-entropy lacks seeds"):
        stabiliser_study.winner(after, "hopper")
    args = ("hopper", "--variants", "combination", "--results", str(tmp_path / "after"))
    out = _study(monkeypatch, capsys, *args, *paths)
    assert "deadline: adaptive_kl-last_layer-entropy seed 5000" in out
    assert "| adaptive_kl-last_layer | 5 | 3600 [3600, 3600] |" in out
    name = "adaptive_kl-last_layer-entropy"
    config = stabiliser_study.variant_config("hopper", name, 5000, tmp_path, {})
    checked = config_from_dict(json.loads(json.dumps(config.to_dict())))  # a valid run name
    assert checked.name == f"hopper_{name}_seed5000"


@pytest.mark.parametrize("variant", stabiliser_study.VARIANTS)
@pytest.mark.parametrize("task", sorted(stabiliser_study.TASKS))
def test_every_variant_is_a_valid_config_with_its_change(tmp_path, task, variant):
    changes = stabiliser_study.SINGLES.get(variant) or stabiliser_study.PAIRS.get(variant, {})
    if variant == "combination":
        changes = stabiliser_study.SINGLES["normalize_value"] | stabiliser_study.SINGLES["rpo"]
    config = stabiliser_study.variant_config(task, variant, 5000, tmp_path, changes)
    checked = config_from_dict(json.loads(json.dumps(config.to_dict())))
    params = checked.algo_params
    for key, value in changes.items():
        assert getattr(params, key) == value
    assert checked.env.seed == 5000 and checked.name == f"{task}_{variant}_seed5000"
    preset = stabiliser_study.variant_config(task, "preset", 5000, tmp_path, {})
    factor = 1.2 if variant == "budget" else 1.0
    assert checked.total_env_steps == round(preset.total_env_steps * factor)
    assert checked.evaluation == preset.evaluation


@pytest.mark.parametrize("named", stabiliser_study.OUTSIDE_COMBINATION["hopper"])
def test_budget_and_the_pairs_are_candidates_and_never_members_of_the_combination(tmp_path, named):
    """``budget`` and ``last_layer_mild_entropy`` win when their IQM is the highest, even above
    the combination's, and their own IQM above the preset's never makes them a member."""
    preset = [3000.0, 3100.0, 3200.0, 3300.0, 3400.0]
    singles = {name: [1000.0] * 5 for name in stabiliser_study.SINGLES}
    singles |= {"last_layer": [3300.0] * 5, "entropy": [3250.0] * 5}
    others = {name: [3450.0] * 5 for name in stabiliser_study.OUTSIDE_COMBINATION["hopper"]}
    others[named] = [3500.0] * 5
    record = _record(tmp_path, {"preset": preset, **singles, **others}, 5000)
    assert stabiliser_study.combination(record) == ["last_layer", "entropy"]
    _record(tmp_path, {"last_layer-entropy": [3400.0] * 5}, 5000)
    assert stabiliser_study.winner(record, "hopper") == named
    assert f"| {named} | 5 | 3500 [3500, 3500] |" in stabiliser_study.report(record)


def test_a_pair_lacking_the_study_seeds_holds_back_the_confirmation(tmp_path, monkeypatch, capsys):
    """A candidate added to the study is screened on seeds 5000-5004 before anything is
    confirmed: the winner among the others could be beaten by it."""
    preset = [3000.0, 3100.0, 3200.0, 3300.0, 3400.0]
    recorded = {name: [3500.0] * 5 for name in [*stabiliser_study.SINGLES, "budget"]}
    _record(tmp_path / "hopper", {"preset": preset, **recorded}, 5000)
    paths = ("--results", str(tmp_path), "--output-dir", str(tmp_path / "out"))
    with pytest.raises(SystemExit, match="last_layer_mild_entropy lacks seeds"):
        _study(monkeypatch, capsys, "hopper", "--confirm", *paths)


def test_the_deadline_starts_no_run_that_would_end_after_it(tmp_path):
    record = _record(tmp_path, {"preset": [1.0]})  # runs of 60 s
    assert Deadline(None, 600.0).allows(record)
    assert Deadline(61 / 3600, 600.0).allows(record)
    assert not Deadline(59 / 3600, 600.0).allows(record)
    assert not Deadline(0.1, 600.0).allows(StudyRecord(tmp_path / "empty"))  # first guess 600 s


def test_a_variant_is_run_only_in_the_study_that_screens_it(tmp_path, monkeypatch, capsys):
    paths = ("--results", str(tmp_path), "--output-dir", str(tmp_path / "out"))
    with pytest.raises(SystemExit) as stopped:
        args = ("--variants", "rpo", "last_layer_mild_entropy", "budget")
        _study(monkeypatch, capsys, "walker2d", *args, *paths)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert "budget, last_layer_mild_entropy: not a variant the walker2d study screens" in error
    assert not (tmp_path / "walker2d" / "runs.jsonl").exists()

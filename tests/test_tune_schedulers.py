"""The schedulers of ``drl tune`` (``drlcli/tune/schedulers.py``), driven the way Ray Tune's loop
drives them, without Ray running: a search never stopped against one stopped and resumed with a
new scheduler, as ``Tuner.restore`` makes one."""

from __future__ import annotations

import random

import numpy as np
import pytest

pytest.importorskip("ray.tune")

from ray.train._internal.session import _TrainingResult  # noqa: E402
from ray.tune import Checkpoint  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402
from ray.tune.schedulers import (  # noqa: E402
    ASHAScheduler,
    PopulationBasedTraining,
    TrialScheduler,
)

from drlcli.tune.schedulers import (  # noqa: E402
    ResumableASHAScheduler,
    ResumablePopulationBasedTraining,
    perturbation_times,
    reported_results,
    seeded_draws,
)

EVALUATION = 128  # env steps between two reports
END = 768


class _Controller:
    """What the scheduler asks of Ray Tune's controller."""

    search_alg = None

    def __init__(self, trials: list[Trial]) -> None:
        self.trials = trials

    def get_trials(self) -> list[Trial]:
        return self.trials

    def get_live_trials(self) -> list[Trial]:
        return [trial for trial in self.trials if trial.status != Trial.TERMINATED]

    def pause_trial(self, trial: Trial, should_checkpoint: bool = True) -> None:
        if trial.status == Trial.RUNNING:
            trial.set_status(Trial.PAUSED)

    def _schedule_trial_save(self, trial: Trial, result: dict | None = None):
        # Only a trial with a process saves (drl reports a checkpoint with every result).
        return trial.checkpoint if trial.status == Trial.RUNNING else None


def _scheduler(
    kind: type[PopulationBasedTraining], exploits: list, seed: int | None = None
) -> PopulationBasedTraining:
    """A synchronous PBT scheduler of ``kind`` (drl's knowing the trials' end) whose exploits
    are appended to ``exploits`` as ``(time, trial, trial it exploits)``; with ``seed`` (drl's
    seeded draws), the new rate each takes as well."""

    class Recording(kind):
        def _exploit(self, tune_controller, trial, trial_to_clone):
            at = self._trial_state[trial_to_clone].last_train_time
            super()._exploit(tune_controller, trial, trial_to_clone)
            new_rate = () if seed is None else (trial.config["rate"],)
            exploits.append((at, trial.trial_id, trial_to_clone.trial_id, *new_rate))

    drl = {"end": END, "seed": seed} if issubclass(kind, ResumablePopulationBasedTraining) else {}
    return Recording(
        time_attr="env_steps",
        metric="objective",
        mode="max",
        perturbation_interval=2 * EVALUATION,
        hyperparam_mutations={"rate": [1, 2, 3, 4]},
        quantile_fraction=0.5,
        synch=True,
        log_config=False,  # its policy files need a trial's storage
        **drl,
    )


def _report(trial: Trial, env_steps: int, folder) -> dict:
    """A trial's report at ``env_steps``: its objective is its rate, with a checkpoint."""
    result = {"env_steps": env_steps, "objective": float(trial.config["rate"])}
    trial.run_metadata.last_result = result
    trial.run_metadata.checkpoint_manager._latest_checkpoint_result = _TrainingResult(
        checkpoint=Checkpoint.from_directory(str(folder)), metrics=dict(result)
    )
    return result


def _trials(rates: dict[str, int], reached: dict[str, int], folder) -> list[Trial]:
    trials = []
    for number, (trial_id, rate) in enumerate(rates.items(), 1):
        tag = f"{number}_rate={rate}"
        trial = Trial(
            "trainable", config={"rate": rate}, stub=True, trial_id=trial_id, experiment_tag=tag
        )
        if reached.get(trial_id):  # a resumed search's trial: its last report and checkpoint
            _report(trial, reached[trial_id], folder)
        trials.append(trial)
    return trials


def _run(scheduler: PopulationBasedTraining, trials: list[Trial], folder, end: int = END) -> None:
    """Ray Tune's loop, one trial at a time: start the trial the scheduler chooses from where
    its checkpoint is, report every evaluation until the scheduler pauses it or it ends at
    ``end`` env steps."""
    controller = _Controller(trials)
    for trial in trials:
        scheduler.on_trial_add(controller, trial)
    while any(trial.status != Trial.TERMINATED for trial in trials):
        trial = scheduler.choose_trial_to_run(controller)
        if trial is None:
            where = {
                each.trial_id: (each.status, each.last_result.get("env_steps")) for each in trials
            }
            raise AssertionError(f"the search waits forever: {where}")
        trial.set_status(Trial.RUNNING)
        latest = trial.run_metadata.checkpoint_manager.latest_checkpoint_result
        env_steps = latest.metrics["env_steps"] if latest else 0
        while trial.status == Trial.RUNNING:
            if env_steps >= end:  # started from a checkpoint at the end: the trial returns
                scheduler.on_trial_complete(controller, trial, trial.last_result)
                trial.set_status(Trial.TERMINATED)
                break
            env_steps += EVALUATION
            decision = scheduler.on_trial_result(
                controller, trial, _report(trial, env_steps, folder)
            )
            if decision == TrialScheduler.PAUSE:  # at its last result too, as Ray does
                trial.set_status(Trial.PAUSED)


@pytest.mark.parametrize(
    ("first", "reached", "expected"),
    [(256, 0, (0, 256)), (256, 255, (0, 256)), (256, 256, (256, 512)), (256, 700, (512, 768))],
)
def test_perturbation_times_are_the_last_one_reached_and_the_next(first, reached, expected):
    assert perturbation_times(first, 256, reached) == expected


def test_a_search_that_never_stopped_perturbs_at_each_interval_but_the_end(tmp_path):
    """Ray pauses a trial at its last result, so Ray's own scheduler perturbs at the end too
    (768): the worse trial clones the better one's final checkpoint and trains no further."""
    exploits: list = []
    trials = _trials({"a": 1, "b": 4}, {}, tmp_path)
    _run(_scheduler(ResumablePopulationBasedTraining, exploits), trials, tmp_path)
    assert [at for at, _, _ in exploits] == [256, 512]
    assert exploits[0][1:] == ("a", "b")  # the worse exploits the better
    exploits = []
    trials = _trials({"a": 1, "b": 4}, {}, tmp_path)
    _run(_scheduler(PopulationBasedTraining, exploits), trials, tmp_path)
    assert [at for at, _, _ in exploits] == [256, 512, 768]


def _seeded_search(stop_at: int | None, tmp_path) -> list:
    """Four trials, the worse half exploiting one of the better half (drawn) with a new rate
    (drawn) at 256 and 512: never stopped (``stop_at`` None), or stopped at ``stop_at`` and
    resumed with a new scheduler in a process whose random state is another."""
    rates = {"a": 1, "b": 2, "c": 3, "d": 4}
    exploits: list = []
    random.seed(1)
    np.random.seed(1)
    trials = _trials(rates, {}, tmp_path)
    _run(
        _scheduler(ResumablePopulationBasedTraining, exploits, seed=7),
        trials,
        tmp_path,
        end=stop_at or END,
    )
    if stop_at is None:
        return exploits
    random.seed(2)
    np.random.seed(2)
    restored = _trials(
        {trial.trial_id: trial.config["rate"] for trial in trials},
        dict.fromkeys(rates, stop_at),
        tmp_path,
    )
    _run(_scheduler(ResumablePopulationBasedTraining, exploits, seed=7), restored, tmp_path)
    return exploits


def test_a_seeded_search_resumed_draws_what_the_search_never_stopped_draws(tmp_path):
    never_stopped = _seeded_search(None, tmp_path)
    assert [at for at, *_ in never_stopped] == [256, 256, 512, 512]
    assert _seeded_search(384, tmp_path) == never_stopped


def test_seeded_draws_depend_on_the_key_alone_and_leave_the_global_state_as_it_was():
    def draws():
        return random.random(), float(np.random.random())

    random.seed(5)
    np.random.seed(5)
    with seeded_draws("7/1/256"):
        first = draws()
    after = draws()
    random.seed(6)
    np.random.seed(6)
    with seeded_draws("7/1/256"):
        assert draws() == first
    with seeded_draws("7/1/512"):
        assert draws() != first
    random.seed(5)
    np.random.seed(5)
    assert draws() == after  # the block drew nothing from the states outside it


@pytest.mark.parametrize("kind", [PopulationBasedTraining, ResumablePopulationBasedTraining])
def test_a_search_resumed_past_a_perturbation_perturbs_at_the_next_and_ends(tmp_path, kind):
    """Both trials stopped at 384 (after the perturbation at 256): Ray's own scheduler, new
    after the resume, puts its next perturbation at the trials' own time and waits forever."""
    exploits: list = []
    trials = _trials({"a": 1, "b": 4}, {"a": 384, "b": 384}, tmp_path)
    scheduler = _scheduler(kind, exploits)
    if kind is PopulationBasedTraining:
        with pytest.raises(AssertionError, match="the search waits forever"):
            _run(scheduler, trials, tmp_path)
        return
    _run(scheduler, trials, tmp_path)
    assert exploits == [(512, "a", "b")]


def test_a_trial_restored_waiting_at_the_perturbation_is_exploited_with_its_checkpoint(tmp_path):
    """``b`` had reached the perturbation at 512 and waited for ``a`` (at 384) when the search
    stopped: on resume ``b`` waits again, still unstarted, and ``a`` takes its checkpoint."""
    exploits: list = []
    trials = _trials({"a": 1, "b": 4}, {"a": 384, "b": 512}, tmp_path)
    _run(_scheduler(ResumablePopulationBasedTraining, exploits), trials, tmp_path)
    assert exploits == [(512, "a", "b")]
    (a, _) = trials
    assert a.run_metadata.last_result["env_steps"] == END


# ASHA: four trials, one result each at times 1..8 in turns (the worse first, so that every one
# passes rungs 1 and 2 on the records before it); from time 3 on their order turns round.
# Rungs at 1, 2 and 4; max_t 8.
OBJECTIVES = {"d": 1.0, "c": 2.0, "b": 3.0, "a": 4.0}
LATE = {"d": 4.0, "c": 3.0, "b": 2.0, "a": 1.0}


def _asha(kind: type[ASHAScheduler], history: dict[str, list[dict]]) -> ASHAScheduler:
    extra = {"reported": lambda trial: history.get(trial.trial_id, [])}
    return kind(
        time_attr="env_steps",
        metric="objective",
        mode="max",
        max_t=8,
        grace_period=1,
        reduction_factor=2,
        **(extra if kind is ResumableASHAScheduler else {}),
    )


def _asha_turns(
    scheduler: ASHAScheduler, times: range, stopped: dict[str, int], history: dict
) -> None:
    """Each trial ASHA has not stopped reports at each of ``times`` in turns; ``stopped``
    gains each trial ASHA stops, with its time; ``history`` each reported result."""
    controller = _Controller([])
    for env_steps in times:
        for trial_id, objective in OBJECTIVES.items():
            if trial_id in stopped:
                continue
            trial = Trial("trainable", config={}, stub=True, trial_id=trial_id)
            reward = objective if env_steps <= 2 else LATE[trial_id]
            result = {"env_steps": env_steps, "objective": reward}
            history.setdefault(trial_id, []).append(result)
            if scheduler.on_trial_result(controller, trial, result) == TrialScheduler.STOP:
                stopped[trial_id] = env_steps


def _asha_stops(kind: type[ASHAScheduler] | None) -> dict[str, int]:
    """The trials ASHA stops: never stopped (``kind`` None), or with the search stopped after
    time 2 and resumed with a new scheduler of ``kind`` fed the trials' results before it."""
    stopped: dict[str, int] = {}
    history: dict[str, list[dict]] = {}
    first = _asha(ResumableASHAScheduler, {})
    for trial_id in OBJECTIVES:
        first.on_trial_add(_Controller([]), Trial("t", config={}, stub=True, trial_id=trial_id))
    if kind is None:
        _asha_turns(first, range(1, 9), stopped, history)
        return stopped
    _asha_turns(first, range(1, 3), stopped, history)
    resumed = _asha(kind, history)
    for trial_id in OBJECTIVES:
        resumed.on_trial_add(_Controller([]), Trial("t", config={}, stub=True, trial_id=trial_id))
    _asha_turns(resumed, range(3, 9), stopped, history)
    return stopped


def test_a_resumed_asha_search_stops_the_trials_the_search_never_stopped_stops():
    """Stopped after time 2: the never-stopped search stops ``c``, ``b`` and ``a`` at rung 4
    (below ``d``'s 4 there); Ray's own scheduler, new after the resume, has lost rungs 1 and 2
    and judges the trials at time 3 at rung 2 again, on their late objectives."""
    never_stopped = _asha_stops(None)
    assert never_stopped == {"c": 4, "b": 4, "a": 4, "d": 8}
    assert _asha_stops(ResumableASHAScheduler) == never_stopped
    assert _asha_stops(ASHAScheduler) != never_stopped


def test_reported_results_are_ray_tunes_log_of_them_without_a_cut_last_line(tmp_path):
    class Storage:
        trial_dir_name: str | None = "trial_001"

    class Stored:
        storage = Storage()  # a restored trial's
        local_path = str(tmp_path)

    assert reported_results(Stored()) == []  # a new trial
    (tmp_path / "result.json").write_text('{"env_steps": 1}\n{"env_steps": 2}\n{"env_st')
    assert reported_results(Stored()) == [{"env_steps": 1}, {"env_steps": 2}]
    Storage.trial_dir_name = None  # a new trial's folder is not named yet
    assert reported_results(Stored()) == []
    assert reported_results(Trial("t", config={}, stub=True)) == []  # no storage

"""Ray Tune's schedulers as ``drl tune`` runs them: ASHA and population-based training whose
decisions survive ``--resume``.

Ray saves a search's trials and searcher but not its scheduler: a resumed search starts a new
one that knows nothing of what the trials reported before the stop. A new ASHA has empty rungs,
so a restored trial is judged against the results reported since the resume alone (and a trial
it stopped before is forgotten); a new synchronous ``PopulationBasedTraining`` believes no trial
has trained, perturbs at the first result, sets its next perturbation at the trials' own time,
which no paused trial is below, and waits forever (Ray's ``choose_trial_to_run`` starts a paused
trial only below that time). Each class below takes up, for each trial a resumed search
restores, what the trial reported. This module imports Ray: only the tune runner imports it,
inside a function, so that ``drl --help`` stays fast.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining, TrialScheduler

RESULTS_FILE = "result.json"
"""Ray Tune's log of a trial's reported results in the trial's folder, one JSON per line."""


def reported_results(trial: Trial) -> list[dict[str, Any]]:
    """The results ``trial`` reported before its search stopped, in order, from Ray Tune's log
    of them (none for a new trial; a last line cut by a kill is left out)."""
    if trial.storage is None or trial.storage.trial_dir_name is None:  # a new trial
        return []
    path = Path(trial.local_path) / RESULTS_FILE
    if not path.exists():
        return []
    results = []
    for line in path.read_text().splitlines():
        try:
            results.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return results


class ResumableASHAScheduler(ASHAScheduler):
    """ASHA whose rungs hold, for each trial a resumed search restores, the results it reported
    before the stop (replayed in order, as they came), so a trial is judged against every
    trial's record as in the search never stopped, those ASHA stopped before included.

    Args:
        reported: a trial's results before the stop (``reported_results``: Ray's log of them).
    """

    def __init__(
        self, *args: Any, reported: Callable[[Trial], list[dict]] = reported_results, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._reported = reported

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        super().on_trial_add(tune_controller, trial)
        bracket = self._trial_info[trial.trial_id]
        for result in self._reported(trial):
            if result.get(self._time_attr) is not None and result.get(self._metric) is not None:
                reward = self._metric_op * result[self._metric]
                bracket.on_result(trial, result[self._time_attr], reward)  # decided before


def perturbation_times(first: int, interval: int, reached: int) -> tuple[int, int]:
    """The synchronous perturbations around a search whose slowest live trial is at ``reached``.

    Perturbations fall at ``first``, ``first + interval``, ``first + 2 * interval``, ...; a
    perturbation that every live trial reached is taken as done (a search stopped between a
    perturbation's last result and its exploits loses that one exploit, and never repeats one).

    Returns:
        ``(last, next)``: the last perturbation at or below ``reached`` (0 before ``first``) and
        the first one above it, in the scheduler's time unit (drl: env steps).
    """
    if reached < first:
        return 0, first
    last = first + (reached - first) // interval * interval
    return last, last + interval


@contextmanager
def seeded_draws(key: str) -> Iterator[None]:
    """Python's and numpy's global random draws inside the block seeded from ``key`` alone, and
    the states they had before restored after it (Ray's PBT draws from both: ``random`` for the
    trial to exploit and each perturbation, numpy for a value drawn again from a range)."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    random.seed(key)  # a str seeds through SHA-512: the same in every process
    np.random.seed(random.getrandbits(32))
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def trial_number(trial: Trial) -> str:
    """A trial's number in its search: the start of Ray Tune's experiment tag, which the
    searcher's seed decides and an exploit keeps (the trial id where there is no tag)."""
    return trial.experiment_tag.split("_", 1)[0] or trial.trial_id


class ResumablePopulationBasedTraining(PopulationBasedTraining):
    """``PopulationBasedTraining`` that, for each trial a resumed search restores, takes up the
    trial's last reported result as its record (time, score) and sets the next synchronous
    perturbation at the first one above the slowest live trial, as the search never stopped
    would have it; a restored trial waiting there unstarted is exploited with the checkpoint it
    was restored with. Without ``synch`` only the trials' records are restored.

    Args:
        seed: with it, each trial's draws at a perturbation (the trial it exploits, its new
            values) come from the seed, the trial's number and the perturbation's time alone
            (``seeded_draws``): a synchronous search resumed after a stop draws what the search
            never stopped draws, and the same search run twice is the same. None: Ray's
            unseeded draws.
        end: a trial's budget in the time unit: a result there ends its trial and perturbs
            nothing (Ray's PBT would pause the trial at its last result and have it exploit
            another then, a clone that trains no further, among the trials not yet marked
            finished, which timing decides). None: Ray's behaviour.
    """

    def __init__(
        self, *args: Any, seed: int | None = None, end: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._seed = seed
        self._end = end

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        if self._end is not None and result.get(self._time_attr, 0) >= self._end:
            return TrialScheduler.CONTINUE  # its last result: the trial ends
        return super().on_trial_result(tune_controller, trial, result)

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        super().on_trial_add(tune_controller, trial)
        result = trial.last_result or {}
        if self._time_attr not in result or self._metric not in result:
            return  # a new trial, or one that never reported
        state = self._trial_state[trial]
        state.last_train_time = result[self._time_attr]
        state.last_score = self._metric_op * result[self._metric]
        state.last_result = result
        if not self._synch:
            state.last_perturbation_time = result[self._time_attr]
            return
        restored = [
            state
            for each, state in self._trial_state.items()
            if not each.is_finished() and state.last_result is not None
        ]
        reached = min(state.last_train_time for state in restored)
        first = max(self._perturbation_interval, self._burn_in_period)
        last, following = perturbation_times(first, self._perturbation_interval, reached)
        self._next_perturbation_sync = following
        for state in restored:
            state.last_perturbation_time = last

    def _checkpoint_or_exploit(
        self, trial: Trial, tune_controller: Any, upper_quantile: list, lower_quantile: list
    ) -> None:
        if trial.status == Trial.PENDING and trial in upper_quantile:
            # A restored trial that waits at the perturbation has no process to save from: its
            # checkpoint is the one it was restored with, of the result it is ranked by.
            self._trial_state[trial].last_checkpoint = trial.checkpoint
            self._num_checkpoints += 1
            return
        time = self._trial_state[trial].last_train_time
        draws = (
            nullcontext()
            if self._seed is None
            else seeded_draws(f"{self._seed}/{trial_number(trial)}/{time}")
        )
        with draws:
            super()._checkpoint_or_exploit(trial, tune_controller, upper_quantile, lower_quantile)

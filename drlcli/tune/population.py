"""Ray Tune's population-based training, with a synchronous search that survives ``--resume``.

Ray saves a search's trials and searcher but not its scheduler: a resumed search starts a new
``PopulationBasedTraining`` that believes no trial has trained and that the next synchronous
perturbation is the first. Its first perturbation after the resume then sets the next one at the
trials' own time, which no paused trial is below, and the search waits forever (Ray's
``choose_trial_to_run`` starts a paused trial only below that time). This module imports Ray:
only the tune runner imports it, inside a function, so that ``drl --help`` stays fast.
"""

from __future__ import annotations

from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import PopulationBasedTraining


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


class ResumablePopulationBasedTraining(PopulationBasedTraining):
    """``PopulationBasedTraining`` that, for each trial a resumed search restores, takes up the
    trial's last reported result as its own record (time, score, checkpoint) and sets the next
    synchronous perturbation at the first one above the slowest live trial, as the search
    never stopped would have it. Without ``synch`` only the trials' records are restored."""

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
        reached = [
            self._trial_state[each].last_train_time
            for each in self._trial_state
            if not each.is_finished() and self._trial_state[each].last_result is not None
        ]
        first = max(self._perturbation_interval, self._burn_in_period)
        last, following = perturbation_times(first, self._perturbation_interval, min(reached))
        self._next_perturbation_sync = following
        for each in self._trial_state:
            if not each.is_finished() and self._trial_state[each].last_result is not None:
                self._trial_state[each].last_perturbation_time = last

    def _checkpoint_or_exploit(
        self, trial: Trial, tune_controller: Any, upper_quantile: list, lower_quantile: list
    ) -> None:
        if trial.status == Trial.PENDING and trial in upper_quantile:
            # A restored trial that waits at the perturbation has no process to save from: its
            # checkpoint is the one it was restored with, of the result it is ranked by.
            self._trial_state[trial].last_checkpoint = trial.checkpoint
            self._num_checkpoints += 1
            return
        super()._checkpoint_or_exploit(trial, tune_controller, upper_quantile, lower_quantile)

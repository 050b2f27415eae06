"""Where a run's evaluations run (the evaluator's Ray actor, or a round loop's process) and
their schedule during training.

Periodic evaluations run while the next rounds train: ``submit`` sends the weights of a round
(with its checkpoint kept here until the result is back) and ``collect`` picks a finished result
up without waiting. One evaluation at a time: where the next one is due while one is still in
flight, the round loop waits for that one first, so the weights evaluated are those of the first
round end at or past each multiple of the interval whatever the machine's load. The final
evaluation at the end of a run waits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from drlcli.actors.spec import ActorSpec
from drlcli.checkpoints.record import Checkpoint
from drlcli.config import Config
from drlcli.evaluation import EvaluationResult
from drlcli.runtime.process_owner import ProcessOwner
from drlcli.runtime.ray_errors import WorkerDied, actor_id_of
from drlcli.runtime.ray_errors import get_or_raise as _get
from drlcli.runtime.restarts import RestartCounter, get_when_restarted, restartable_actor_options
from drlcli.runtime.run_context import EvaluatorContext, HasEvaluationHost


def evaluator_has_own_process(config: Config, round_loop: type) -> bool:
    """Whether a run's evaluations take a process of their own (and its CPU share): with
    periodic evaluation, or where ``round_loop`` cannot host the final one
    (``HasEvaluationHost``)."""
    return config.evaluation.interval_env_steps is not None or not issubclass(
        round_loop, HasEvaluationHost
    )


class EvaluationRunner:
    """The evaluations of a run, in one ``PolicyEvaluator`` of their own Ray actor, or in a
    process of the round loop (``HasEvaluationHost``: PPO's rollout actor 0, an off-policy learner
    0) when the run has no periodic evaluation and only its final policy is evaluated. An
    evaluation carries no state: when its process dies and Ray restarts it (the evaluator and a
    rollout actor, as often as a rollout actor), the evaluation is redone, and a process that
    dies again while it redoes it is one restart more; a learner that dies while it evaluates
    ends the run in one line, as it would in a round.

    Args:
        config: the run (its ``evaluation`` section and its environment).
        spec: the run's policy actor.
        resources: Ray resource requests of the evaluator (a rollout actor's).
        env_steps: where the run starts (0, or a resumed checkpoint's count): the first
            evaluation is due one interval after it.
    """

    def __init__(
        self, config: Config, spec: ActorSpec, resources: dict[str, float], env_steps: int
    ) -> None:
        self.config, self.resources = config, resources
        self.context = EvaluatorContext(config.env, spec, config.evaluation.episodes)
        self.interval = config.evaluation.interval_env_steps
        self.restarts = RestartCounter(config.max_rollout_actor_restarts, names=["the evaluator"])
        self.worker: Any = None
        self.processes = ProcessOwner()  # the evaluator's own process; a host is not in it
        self.hosted = False  # the worker is the round loop's process, not the evaluator's own
        self.restartable = True  # Ray restarts the worker's process when it dies
        self.roles: dict[str, str] = {}
        self.pending: tuple[Any, Checkpoint] | None = None
        self.next_due = self._after(env_steps)
        if self.periodic:  # evaluations come back while the first rounds train
            self.start()

    def start(self, host: tuple[Any, str, bool] | None = None) -> None:
        """Choose where evaluations run (once; the first evaluation calls it otherwise): without
        periodic evaluation in ``host`` (``HasEvaluationHost.evaluation_host()``), if any, else
        in the evaluator's own process, started here.

        The driver calls this once the rollout actors and learners are up: a process start is
        seconds of CPU (torch's import), and the first round should not wait on that of a
        process that only evaluates the final policy.
        """
        import ray

        from drlcli.runtime.policy_evaluator import PolicyEvaluator

        if self.worker is not None:
            return
        if host is not None and not self.periodic:
            self.worker, name, self.restartable = host
            self.hosted = True
            self.restarts = RestartCounter(self.restarts.limit, names=[name])
        else:
            self.worker = self.processes.started(
                ray.remote(PolicyEvaluator)
                .options(**self.resources, **restartable_actor_options(self.restarts.limit))
                .remote(self.context)
            )
            name = "the evaluator"
        self.roles = {actor_id_of(self.worker): name}

    @property
    def periodic(self) -> bool:
        return self.interval is not None

    def _after(self, env_steps: int) -> int | None:
        """The first multiple of the interval after ``env_steps`` (None: not periodic)."""
        return None if self.interval is None else (env_steps // self.interval + 1) * self.interval

    def due(self, env_steps: int) -> bool:
        """Whether a periodic evaluation is due after a round that ended at ``env_steps`` (the
        one in flight, if any, must be collected first: ``collect(wait=True)``)."""
        return self.next_due is not None and env_steps >= self.next_due

    def was_submitted_at(self, env_steps: int, steps_per_round: int) -> bool:
        """Whether an uninterrupted run submits the weights of the round that ended at
        ``env_steps``: the first round end at or past each multiple of the interval."""
        if self.interval is None:
            return False
        return env_steps // self.interval > (env_steps - steps_per_round) // self.interval

    def submit(self, checkpoint: Checkpoint) -> None:
        """Evaluate a round's weights while training goes on."""
        if self.pending is not None:
            raise RuntimeError("an evaluation is in flight: collect it before the next")
        self.pending = (self._evaluate(checkpoint), checkpoint)
        self.next_due = self._after(checkpoint.progress.env_steps)

    def collect(self, wait: bool = False) -> tuple[EvaluationResult, Checkpoint] | None:
        """The result of the evaluation in flight, if it has finished (or ``wait``)."""
        import ray

        if self.pending is None:
            return None
        ref, checkpoint = self.pending
        if not wait and not ray.wait([ref], timeout=0)[0]:
            return None
        self.pending = None
        return self._result(ref, checkpoint), checkpoint

    def final_evaluation(self, latest: Checkpoint) -> EvaluationResult:
        """The evaluation of the run's final weights (``latest``'s): the one in flight when it
        evaluates them, else one run now. One of an earlier round's weights still in flight
        (a stop rule ended the run) is dropped: its row is written, and the best follows
        only the evaluations the metrics CSV records."""
        evaluated = self.collect(wait=True)
        if evaluated is not None and evaluated[1].progress.env_steps == latest.progress.env_steps:
            return evaluated[0]
        return self.evaluate_now(latest)

    def evaluate_now(self, checkpoint: Checkpoint) -> EvaluationResult:
        """Evaluate and wait (the final policy)."""
        return self._result(self._evaluate(checkpoint), checkpoint)

    def _result(self, ref: Any, checkpoint: Checkpoint) -> EvaluationResult:
        """The result of evaluation ``ref`` of ``checkpoint``'s weights, redone on the
        restarted process after each death (``max_rollout_actor_restarts`` decides)."""
        redo = partial(get_when_restarted, partial(self._evaluate, checkpoint), self.roles)
        answer = partial(_get, ref, self.roles)
        while True:
            try:
                return answer()
            except WorkerDied as death:
                if death.init_failed or not self.restartable:
                    raise
                self.restarts.died(0, death.reason)
            answer = redo

    def _evaluate(self, checkpoint: Checkpoint) -> Any:
        self.start()
        weights = (
            checkpoint.actor,
            checkpoint.obs_rms_state,
            checkpoint.observation_clip,
            checkpoint.progress.env_steps,
        )
        if self.hosted:
            return self.worker.evaluate_policy.remote(self.context, *weights)
        return self.worker.evaluate.remote(*weights)

    def close(self) -> None:
        """Stop the evaluator's own process (a host is the round loop's to stop)."""
        self.processes.close()

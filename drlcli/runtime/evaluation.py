"""The evaluator's Ray actor and its schedule during training.

Periodic evaluations run while the next round trains: ``submit`` sends the weights of a round
(with its checkpoint kept here until the result is back) and ``collect`` picks a finished result
up without waiting. One evaluation at a time: a due evaluation waits for the one in flight to
finish. The final evaluation at the end of a run waits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from drlcli.actors.spec import ActorSpec
from drlcli.checkpoint import Checkpoint
from drlcli.config import Config
from drlcli.evaluation import EvaluationResult
from drlcli.runtime.ray_session import WorkerDied, actor_id_of, get_when_restarted
from drlcli.runtime.ray_session import get_or_raise as _get
from drlcli.runtime.restarts import RestartCounter, restartable_actor_options


class EvaluationRunner:
    """One ``PolicyEvaluator`` in its own Ray actor. It holds no state between evaluations:
    when its process dies, Ray restarts it (as often as a rollout actor) and the evaluation is
    redone.

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
        self.config, self.spec, self.resources = config, spec, resources
        self.interval = config.evaluation.interval_env_steps
        self.restarts = RestartCounter(config.max_rollout_actor_restarts, names=["the evaluator"])
        self.worker: Any = None
        self.roles: dict[str, str] = {}
        self.pending: tuple[Any, Checkpoint] | None = None
        self.next_due = self._after(env_steps)
        if self.periodic:  # evaluations come back while the first rounds train
            self.start()

    def start(self) -> None:
        """Start the evaluator's process (once; the first evaluation starts it otherwise).

        Without periodic evaluation the driver calls this once the rollout actors and learners
        are up: a process start is seconds of CPU (torch's import), and the first round should
        not wait on that of a process that only evaluates the final policy.
        """
        import ray

        from drlcli.evaluation import PolicyEvaluator

        if self.worker is not None:
            return
        self.worker = (
            ray.remote(PolicyEvaluator)
            .options(**self.resources, **restartable_actor_options(self.restarts.limit))
            .remote(self.config.env, self.spec, self.config.evaluation.episodes)
        )
        self.roles = {actor_id_of(self.worker): "the evaluator"}

    @property
    def periodic(self) -> bool:
        return self.interval is not None

    def _after(self, env_steps: int) -> int | None:
        """The first multiple of the interval after ``env_steps`` (None: not periodic)."""
        return None if self.interval is None else (env_steps // self.interval + 1) * self.interval

    def due(self, env_steps: int) -> bool:
        """Whether a periodic evaluation is due after a round that ended at ``env_steps``."""
        return self.next_due is not None and env_steps >= self.next_due and self.pending is None

    def submit(self, checkpoint: Checkpoint) -> None:
        """Evaluate a round's weights while training goes on."""
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

    def evaluate_now(self, checkpoint: Checkpoint) -> EvaluationResult:
        """Evaluate and wait (the final policy)."""
        return self._result(self._evaluate(checkpoint), checkpoint)

    def _result(self, ref: Any, checkpoint: Checkpoint) -> EvaluationResult:
        try:
            return _get(ref, self.roles)
        except WorkerDied as death:
            if death.init_failed:
                raise
            self.restarts.died(0, death.reason)
            return get_when_restarted(partial(self._evaluate, checkpoint), self.roles)

    def _evaluate(self, checkpoint: Checkpoint) -> Any:
        self.start()
        return self.worker.evaluate.remote(
            checkpoint.actor,
            checkpoint.obs_rms_state,
            checkpoint.observation_clip,
            checkpoint.progress.env_steps,
        )

    def close(self) -> None:
        import ray

        if self.worker is not None:
            ray.kill(self.worker)

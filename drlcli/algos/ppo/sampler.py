"""PPO's sampling, Ray-free: ``RolloutSampler`` steps a batch of environments with the policy
for a round, computes GAE and keeps what the next round continues from (the episodes in
progress, the sampling noise's generator, the reward statistics, a recurrent policy's states).

Plain Python over an ``EnvBatch`` it is given: the runtime's Ray shell
(``runtime/mujoco_actor.py``, ``MuJoCoActor``) builds the environments in its process and adds
its identity; tests and benchmarks use a sampler directly.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import torch

from drlcli.actors.contract import validate_on_policy_actor
from drlcli.actors.gaussian import GaussianPolicyActor
from drlcli.actors.recurrent import RecurrentGaussianPolicyActor
from drlcli.actors.spec import ActorSpec, build_policy_actor
from drlcli.algos.ppo.closed_form import DenseNetwork, array_view, gaussian_log_prob
from drlcli.algos.ppo.dense_recurrent import DenseRecurrentCore
from drlcli.algos.ppo.maths import compute_gae
from drlcli.algos.ppo.networks import build_value_network
from drlcli.algos.ppo.params import PPOParams
from drlcli.algos.ppo.rollout_memory import RolloutMemory
from drlcli.env_facts import EnvFacts
from drlcli.normalization import (
    RewardScaler,
    RmsState,
    compute_batch_moments,
    normalize_observation,
)
from drlcli.observations import GroupReader
from drlcli.rollout import prepare_action


class SteppedEnvs(Protocol):
    """What the sampler asks of its environments (``drlcli.envs.EnvBatch``): ``num_envs``
    environments stepped together, each reset in the step its episode ends."""

    num_envs: int
    facts: EnvFacts
    obs: np.ndarray  # [num_envs, obs_dim]: the observations the next step acts on

    def step(self, env_actions: np.ndarray) -> Any:
        """Step every env: ``rewards, terminated, truncated [num_envs]``, ``final_obs`` (the
        pre-reset observations), ``finished_returns, finished_lengths, finished_successes``."""
        ...

    def restart(self) -> None:
        """Back to the environments as they were made (seeds and streams)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class RolloutSampler:
    """Samples PPO's on-policy trajectories from ``envs`` with the policy ``actor_spec`` builds.

    Args:
        envs: the environments, made in this process.
        actor_spec: the policy actor, rebuilt here (validated against the contract and PPO's
            ``log_prob_and_entropy``).
        params: PPO's parameters (network shape, normalisation switches, a recurrent core).
        gamma: the discount (reward scaling).
        seed: seeds the warm-up's uniform actions (torch's generator is the caller's to seed,
            before the networks are built).
    """

    def __init__(
        self,
        envs: SteppedEnvs,
        actor_spec: ActorSpec,
        params: PPOParams,
        gamma: float,
        seed: int,
    ) -> None:
        self.params = params
        self.seed = seed
        self.envs = envs
        facts = envs.facts
        self.action_low, self.action_high = facts.action_low, facts.action_high
        self.actor = build_policy_actor(
            actor_spec,
            facts.policy_dim,
            facts.action_dim,
            "cpu",
            facts.action_low,
            facts.action_high,
        )
        validate_on_policy_actor(self.actor, facts.policy_dim)
        # A privileged critic: the policy reads its group of each observation, the value
        # network the critic's (Method.md, "Observation groups").
        self.groups = GroupReader(facts.observation_groups)
        self.value_network = build_value_network(params, facts.critic_dim)
        # A recurrent policy's memory (ADR 0018): every env's states, carried across rounds.
        self.memory = (
            None
            if params.recurrent is None
            else RolloutMemory(
                self.actor.recurrent_state_shape(envs.num_envs),
                self.value_network.core.state_shape(envs.num_envs),
            )
        )
        # The built-in networks run in numpy on their parameters' memory, as the learner's
        # closed-form update does (closed_form.py): a torch call per layer costs more than the
        # layer's arithmetic at this size. A custom actor runs as its own module. A recurrent
        # policy's cores step in numpy too (dense_recurrent.py); their MLP heads are these.
        self.dense_value = DenseNetwork.of(self.value_network.network)
        builtin = type(self.actor) in (GaussianPolicyActor, RecurrentGaussianPolicyActor)
        self.dense_policy_mean = DenseNetwork.of(self.actor.mean_network) if builtin else None
        self.dense_policy_core = self.dense_value_core = None
        if self.memory is not None:  # the built-in recurrent actor (ADR 0018 decision 5)
            self.dense_policy_core = DenseRecurrentCore.of(self.actor.core)
            self.dense_value_core = DenseRecurrentCore.of(self.value_network.core)
        if self.dense_policy_mean is not None:
            self.log_std = array_view(self.actor.log_std)  # load_state_dict writes in place
        self.reward_scaler = (
            RewardScaler(envs.num_envs, gamma) if params.normalize_rewards else None
        )

    def identity(self) -> dict[str, Any]:
        """Who sampled: what leads the stats, warm-up moments and state this returns (a Ray
        shell's actor and process ids); nothing for a sampler of its own."""
        return {}

    def sample(
        self,
        state_dict: dict[str, Any],
        rollout_length: int,
        gamma: float,
        gae_lambda: float,
        obs_rms_state: dict[str, Any] | None,
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Collect ``rollout_length`` steps of every environment with the given parameters.

        Args:
            state_dict: ``{"actor", "value"}`` parameters of this actor's learner.
            rollout_length: steps per environment this round.
            gamma, gae_lambda: GAE parameters.
            obs_rms_state: global observation statistics after the previous round (or None);
                used unchanged for the whole rollout.

        Returns:
            ``(trajectory, stats)``. trajectory: columnar float32 arrays ``obs [N, O]``
            (normalised), ``act [N, A]`` (raw policy sample), ``logp``, ``value``, ``adv``,
            ``ret`` ``[N]`` with ``N = rollout_length * num_envs``, time-major; a recurrent
            policy's also ``episode_start [rollout_length, num_envs]`` (bool) and the states
            each step read, ``policy_state`` and ``value_state`` ``[N, *state]``; under
            ``recompute_advantages_per_epoch`` also ``round_steps.STEP_COLUMNS``. stats, led
            by ``identity()``: ``episodes, episode_return_sum, episode_returns,
            episode_len_sum, episode_successes, obs_rms_moments`` (moments of this round's raw
            observations only), ``reward_moments`` (the reward scaler's running moments after
            this round, or None: the driver's copy to restore into this actor's process should
            it die before the next sample; checkpoints take them from ``state_dict``).
        """
        self.actor.load_state_dict(state_dict["actor"])
        self.value_network.load_state_dict(state_dict["value"])
        rms = RmsState.from_dict(obs_rms_state) if obs_rms_state is not None else None
        if not self.params.normalize_observations:
            rms = None
        clip = self.params.observation_clip
        steps, num_envs = rollout_length, self.envs.num_envs
        obs_dim, action_dim = self.envs.facts.obs_dim, self.envs.facts.action_dim

        raw_obs = np.empty((steps, num_envs, obs_dim), dtype=np.float64)
        obs = np.empty((steps, num_envs, obs_dim), dtype=np.float32)
        actions = np.empty((steps, num_envs, action_dim), dtype=np.float32)
        logps = np.empty((steps, num_envs), dtype=np.float32)
        values = np.empty((steps, num_envs), dtype=np.float64)
        next_values = np.empty((steps, num_envs), dtype=np.float64)
        rewards = np.empty((steps, num_envs), dtype=np.float64)
        terminated = np.empty((steps, num_envs), dtype=bool)
        truncated = np.empty((steps, num_envs), dtype=bool)
        episode_returns: list[float] = []
        episode_lengths: list[int] = []
        episode_successes: list[bool] = []
        memory = self.memory
        recompute = self.params.recompute_advantages_per_epoch
        if recompute:
            final_obs = np.empty((steps, num_envs, obs_dim), dtype=np.float32)
        if memory is not None:
            episode_start, policy_states, value_states = memory.empty_trajectory(steps)

        with torch.inference_mode():
            for t in range(steps):
                raw_obs[t] = self.envs.obs
                obs[t] = normalize_observation(self.envs.obs, rms, clip)
                if memory is None:
                    sampled, logps[t] = self._sample_actions(self.groups.policy(obs[t]))
                    values[t] = self._values(self.groups.critic(obs[t]))
                else:
                    episode_start[t], policy_states[t], value_states[t] = memory.begin_step()
                    sampled, logps[t], values[t] = self._recurrent_step(obs[t], memory)
                policy_action, env_action = prepare_action(
                    sampled, self.action_low, self.action_high
                )
                actions[t] = policy_action
                step = self.envs.step(env_action)
                rewards[t], terminated[t], truncated[t] = (
                    step.rewards,
                    step.terminated,
                    step.truncated,
                )
                if self.reward_scaler is not None:
                    self.reward_scaler.update(step.rewards, step.terminated | step.truncated)
                    rewards[t] = np.clip(
                        step.rewards / self.reward_scaler.divisor(),
                        -self.params.reward_clip,
                        self.params.reward_clip,
                    )
                if step.truncated.any():
                    # V(final pre-reset observation): the truncation bootstrap of compute_gae.
                    final = normalize_observation(step.final_obs[step.truncated], rms, clip)
                    if recompute:
                        final_obs[t, step.truncated] = final
                    next_values[t, step.truncated] = self._values(
                        self.groups.critic(final), step.truncated
                    )
                if memory is not None:
                    memory.end_step(step.terminated | step.truncated)
                episode_returns += step.finished_returns
                episode_lengths += step.finished_lengths
                episode_successes += step.finished_successes
            last_obs = normalize_observation(self.envs.obs, rms, clip)
            last_values = self._values(self.groups.critic(last_obs), next_step=True)

        # Where the episode went on, V(s_{t+1}) is the next step's value estimate.
        following = np.concatenate([values[1:], last_values[None]], axis=0)
        next_values = np.where(truncated, next_values, following)
        advantages, returns = compute_gae(
            rewards, values, next_values, terminated, truncated, gamma, gae_lambda
        )
        count = steps * num_envs
        trajectory = {
            "obs": obs.reshape(count, obs_dim),
            "act": actions.reshape(count, action_dim),
            "logp": logps.reshape(count),
            "value": values.reshape(count).astype(np.float32),
            "adv": advantages.reshape(count).astype(np.float32),
            "ret": returns.reshape(count).astype(np.float32),
        }
        if recompute:  # what the learner's GAE reads again (round_steps.py)
            next_obs = np.concatenate([obs[1:], last_obs[None].astype(np.float32)], axis=0)
            next_obs[truncated] = final_obs[truncated]
            trajectory |= {
                "reward": rewards.reshape(count),
                "terminated": terminated.reshape(count),
                "truncated": truncated.reshape(count),
                "next_obs": next_obs.reshape(count, obs_dim),
                "rollout_step": np.repeat(np.arange(steps, dtype=np.int32), num_envs),
            }
        if memory is not None:
            trajectory["episode_start"] = episode_start
            trajectory["policy_state"] = policy_states.reshape(count, *policy_states.shape[2:])
            trajectory["value_state"] = value_states.reshape(count, *value_states.shape[2:])
        stats = {
            **self.identity(),
            "episodes": len(episode_returns),
            "episode_return_sum": float(sum(episode_returns)),
            "episode_returns": episode_returns,
            "episode_len_sum": int(sum(episode_lengths)),
            "episode_successes": episode_successes,
            "obs_rms_moments": compute_batch_moments(raw_obs.reshape(count, obs_dim)).to_dict(),
            "reward_moments": (
                None if self.reward_scaler is None else self.reward_scaler.state_dict()
            ),
        }
        return trajectory, stats

    def warm_up_observations(self, steps: int) -> dict[str, Any]:
        """Step every environment ``steps`` times with actions drawn uniformly from the action
        box, then restart the environments as they were made (``EnvBatch.restart``): the first
        round starts from the same states and random streams as without the warm-up, and
        torch's sampling stream is untouched (the actions come from numpy, seeded apart).

        Returns:
            ``{obs_rms_moments}``: the moments of the ``steps * num_envs``
            raw observations seen (the statistics the first round standardises with).
        """
        generator = np.random.default_rng([self.seed, 1])
        num_envs, obs_dim = self.envs.num_envs, self.envs.facts.obs_dim
        raw_obs = np.empty((steps, num_envs, obs_dim), dtype=np.float64)
        for t in range(steps):
            raw_obs[t] = self.envs.obs
            actions = generator.uniform(
                self.action_low, self.action_high, size=(num_envs, len(self.action_low))
            )
            self.envs.step(actions)
        self.envs.restart()
        return {
            **self.identity(),
            "obs_rms_moments": compute_batch_moments(raw_obs.reshape(-1, obs_dim)).to_dict(),
        }

    def _sample_actions(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Raw policy actions ``[N, A]`` for normalised observations ``[N, O]`` (float32) and
        their log-probabilities ``[N]``."""
        if self.dense_policy_mean is None:
            sampled, info = self.actor(torch.from_numpy(obs), training=False)
            return sampled.numpy(), info["log_prob"].numpy()
        return self._sample_around(self.dense_policy_mean.forward(obs)[-1])

    def _sample_around(self, mean: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``mean + exp(log_std) * noise`` ``[N, A]`` and its log-probabilities ``[N]``."""
        # torch's generator, as the module's randn_like(mean) would draw: the same noise.
        noise = torch.randn(mean.shape).numpy()
        sampled = mean + np.exp(self.log_std) * noise
        return sampled, gaussian_log_prob(sampled, mean, self.log_std)

    def _recurrent_step(
        self, obs: np.ndarray, memory: RolloutMemory
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A recurrent policy's step of every env from normalised observations ``[n, O]`` and
        the states ``memory.begin_step`` left: raw actions ``[n, A]``, their log-probs and
        the values ``[n]``; the memory moves on to the states after the step."""
        features, policy_state = self.dense_policy_core.step(self.groups.policy(obs), memory.policy)
        sampled, log_prob = self._sample_around(self.dense_policy_mean.forward(features)[-1])
        values, value_state = self._recurrent_values(self.groups.critic(obs), memory.value)
        memory.policy, memory.value = policy_state, value_state
        return sampled, log_prob, values

    def _recurrent_values(
        self, obs: np.ndarray, state: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The recurrent critic's values ``[n]`` of ``obs [n, O]`` read from ``state``, and
        the state after that step."""
        features, after = self.dense_value_core.step(obs, state)
        return self._real(self.dense_value.forward(features)[-1][:, 0]), after

    def _values(
        self, obs: np.ndarray, envs: np.ndarray | None = None, next_step: bool = False
    ) -> np.ndarray:
        """``V(obs)`` ``[N]`` of normalised observations ``[N, O]`` (float32). A recurrent
        critic reads them after the step its memory last took, in the environments ``envs``
        selects (bool ``[n]``: an episode's final observation), or as the next step
        (``next_step``: a rollout's last observation, zero states where an episode starts);
        its memory does not move on."""
        if self.memory is not None:
            state = self.memory.value_state_of_next_step() if next_step else self.memory.value
            if envs is not None:
                state = state[..., envs, :]
            return self._recurrent_values(obs, state)[0]
        if self.dense_value is None:
            return self._real(self.value_network(torch.from_numpy(obs)).numpy())
        return self._real(self.dense_value.forward(obs)[-1][:, 0])

    def _real(self, predicted: np.ndarray) -> np.ndarray:
        """The value network's predictions as values of the return (``normalize_value``
        learns standardised ones)."""
        statistics = self.value_network.return_statistics
        return predicted if statistics is None else statistics.real(predicted)

    def state_dict(self) -> dict[str, Any]:
        """What the next sample depends on beyond the parameters and statistics it is given:
        the environments' episodes in progress (``EnvBatch.state_dict``), torch's generator
        (the sampling noise), the reward scaler's running moments (``reward_scaler``:
        ``RewardScaler.state_dict()``, None where scaling is off or before any step), each
        env's discounted return and a recurrent policy's memory (``recurrent``:
        ``RolloutMemory.state_dict()``, None for an MLP). With it a resumed run samples what
        the uninterrupted one would have (Method.md)."""
        scaler = self.reward_scaler
        return {
            **self.identity(),
            "envs": self.envs.state_dict(),
            "torch_rng": torch.get_rng_state(),
            "reward_scaler": None if scaler is None else scaler.state_dict(),
            "discounted_return": None if scaler is None else scaler.discounted_return.copy(),
            "recurrent": None if self.memory is None else self.memory.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state_dict`` was taken (a sampler of the same task, number of
        environments and settings).

        Raises:
            KeyError, TypeError, ValueError, RuntimeError: the state does not fit.
        """
        self.envs.load_state_dict(state["envs"])
        torch.set_rng_state(torch.as_tensor(state["torch_rng"], dtype=torch.uint8))
        self.restore_reward_scaler(state["reward_scaler"])
        if self.reward_scaler is not None and state["discounted_return"] is not None:
            stored = np.asarray(state["discounted_return"], dtype=np.float64)
            if stored.shape != self.reward_scaler.discounted_return.shape:
                raise ValueError(f"discounted returns of shape {stored.shape}")
            self.reward_scaler.discounted_return = stored.copy()
        stored_memory = state.get("recurrent")
        if (stored_memory is None) != (self.memory is None):
            raise ValueError(
                "recurrent states stored" if self.memory is None else "no recurrent states"
            )
        if self.memory is not None:
            self.memory.load_state_dict(stored_memory)

    def restore_reward_scaler(self, state: dict[str, Any] | None) -> None:
        """Continue the reward statistics from ``RewardScaler.state_dict()`` output alone (a
        restarted process, or a resume under another topology); None starts them afresh."""
        if self.reward_scaler is not None:
            self.reward_scaler.load_state_dict(state)

    def close(self) -> None:
        self.envs.close()

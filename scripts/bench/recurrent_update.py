"""The recurrent PPO update with the value network on its own thread, against the same update
with one backward on one thread (the baseline), in one run.

    python scripts/bench/recurrent_update.py                      # LSTM, 4 minibatches
    python scripts/bench/recurrent_update.py --cell gru --num-minibatches 32
    python scripts/bench/recurrent_update.py --episode-length 10  # an early round's episodes

One learner of the position-only pendulum's sizes (LSTM or GRU of 64 units, 64x64 heads, 10
epochs, chunks of 32 steps) trains on a synthetic rollout of 4 envs x 512 steps with an episode
start per env every ``--episode-length`` steps on average (100 by default; a random policy's
pendulum episodes last about 8, so an early round's chunks are mostly padding); each repeat
times ``add`` and ``train_step`` of the round (its median over 3 rounds after a first, the
warm-up) for both paths. Prints the medians over the repeats and the ratio baseline / threaded.
torch runs one intra-op thread, as a learner beside its rollout actors does.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from drlcli.algos.ppo.algorithm import gaussian_actor_spec
from drlcli.algos.ppo.learner import Learner
from drlcli.algos.ppo.maths import ppo_loss
from drlcli.algos.ppo.params import PPOParams, RecurrentParams
from drlcli.algos.ppo.sequences import sequence_steps

STEPS, ENVS, OBS, ACTIONS = 512, 4, 2, 1


def one_thread_gradients(learner: Learner, **chunks: torch.Tensor) -> dict:
    """The baseline: ``ppo_loss`` of both networks and one backward, on the calling thread."""
    chunks = sequence_steps(chunks)
    new_logprob, entropy, new_value = learner.evaluate_actions(chunks)
    loss, stats = ppo_loss(
        new_logprob=new_logprob,
        entropy=entropy,
        new_value=new_value,
        old_logprob=chunks["old_logprob"],
        old_value=chunks["old_value"],
        advantages=chunks["advantages"],
        returns=chunks["returns"],
        params=learner.params,
        mask=chunks["mask"],
    )
    learner.flat.zero_grad()
    loss.backward()
    return stats


def rollout(
    learner: Learner, rng: np.random.Generator, episode_length: float
) -> dict[str, np.ndarray]:
    """A round as a rollout actor sends it, with random data and zero stored states."""
    count = STEPS * ENVS
    starts = rng.random((STEPS, ENVS)) < 1.0 / episode_length
    starts[0] = True
    policy_shape = learner.actor.core.state_shape(1)
    value_shape = learner.value_network.core.state_shape(1)
    return {
        "obs": rng.normal(size=(count, OBS)).astype(np.float32),
        "act": rng.normal(size=(count, ACTIONS)).astype(np.float32),
        "logp": rng.normal(size=count).astype(np.float32) - 1.0,
        "value": rng.normal(size=count).astype(np.float32),
        "adv": rng.normal(size=count).astype(np.float32),
        "ret": rng.normal(size=count).astype(np.float32),
        "episode_start": starts,
        "policy_state": np.zeros((count, *_without_batch(policy_shape)), dtype=np.float32),
        "value_state": np.zeros((count, *_without_batch(value_shape)), dtype=np.float32),
    }


def _without_batch(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:-2] + shape[-1:]  # the core's state [..., B, size] stored per step


def seconds_per_round(
    cell: str, minibatches: int, threaded: bool, seed: int, episode_length: float
) -> float:
    core = RecurrentParams(cell=cell, size=64, layers=1, sequence_length=32)
    params = PPOParams(
        hidden_sizes=(64, 64), num_minibatches=minibatches, num_epochs=10, recurrent=core
    )
    spec = gaussian_actor_spec(params, [-3.0] * ACTIONS, [3.0] * ACTIONS)
    learner = Learner(spec, OBS, ACTIONS, params, seed=seed)
    if not threaded:
        learner.minibatch_gradients = lambda **chunks: one_thread_gradients(learner, **chunks)
    data = rollout(learner, np.random.default_rng(seed), episode_length)
    times = []
    for _ in range(4):
        start = time.perf_counter()
        learner.add(data)
        learner.train_step(fraction_done=0.1)
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cell", choices=("lstm", "gru"), default="lstm")
    parser.add_argument("--num-minibatches", type=int, default=4)
    parser.add_argument("--episode-length", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    baseline, threaded = [], []
    for repeat in range(args.repeats):
        for threaded_path, times in ((False, baseline), (True, threaded)):
            times.append(
                seconds_per_round(
                    args.cell, args.num_minibatches, threaded_path, repeat, args.episode_length
                )
            )
        print(f"repeat {repeat}: one thread {baseline[-1]:.3f} s, value thread {threaded[-1]:.3f}")
    one, two = statistics.median(baseline), statistics.median(threaded)
    print(
        f"{args.cell}, {args.num_minibatches} minibatches, episodes of ~{args.episode_length:g} "
        f"steps, median of {args.repeats}: one thread "
        f"{one:.3f} s a round, value thread {two:.3f} s, ratio {one / two:.2f}"
    )


if __name__ == "__main__":
    main()

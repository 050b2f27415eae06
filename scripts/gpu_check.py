"""The GPU path's checks: PASS or FAIL per check, exit 1 on any failure; SKIPPED where there is
no CUDA device. Run through ``scripts/gpu_check.sh`` (under 5 minutes on one GPU).

1. graphed = eager: a FlashSAC learner with the whole-cycle CUDA graph and one without, same
   seed, same batches, same policy samples, for 12 updates (3 eager warm-ups per kind, then
   capture and replays of both the actor-and-critic and the critic-only kind, the cosine
   learning rate moving every update): every parameter agrees within 1e-4 (absolute and
   relative; float32 kernels of one GPU in two orders).
2. FlashSAC trains on cuda, graphs on and off (2 rounds of hopper_flash_sac, small budget).
3. PPO trains on cuda (2 rounds of hopper_ppo).
4. A checkpoint written on the CPU resumes on cuda with the graph: the loaded optimisers keep the
   graphed learner's settings (capturable, one cuda ``lr`` tensor, step counters on cuda), both
   kinds of update are captured, and 8 updates agree with an eager cuda learner loaded from the
   same state within the tolerance of check 1.
5. FlashSAC updates per second at the paper's sizes (batch 512), graphs on and off (printed).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

REPO = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-4


def learner(graphs: bool, params, facts, total_updates: int = 1000, device: str = "cuda"):
    from drlcli.algos.entry_types import LearnerContext, RoundPlan
    from drlcli.algos.flash_sac.algorithm import flash_sac_actor_spec
    from drlcli.algos.flash_sac.learner import FlashSACLearner

    params = dataclasses.replace(params, use_whole_cycle_cuda_graph=graphs)
    spec = flash_sac_actor_spec(params, facts.action_low, facts.action_high)
    # The run's env steps that plan ``total_updates`` updates for one learner.
    env_steps = math.ceil(total_updates / params.updates_per_env_step)
    plan = RoundPlan(1, env_steps)
    return FlashSACLearner(LearnerContext(spec, facts, params, 0.99, env_steps, 1, device, 0, plan))


def batches(facts, size: int, count: int):
    from drlcli.off_policy.replay import TransitionReplay

    rng = np.random.default_rng(0)
    replay = TransitionReplay(4096, facts.obs_dim, facts.action_dim, seed=0)
    replay.add(
        rng.normal(size=(4096, facts.obs_dim)),
        rng.uniform(facts.action_low, facts.action_high, (4096, facts.action_dim)),
        rng.normal(size=4096),
        rng.normal(size=(4096, facts.obs_dim)),
        rng.random(4096) < 0.05,
    )
    return [replay.sample(size, 1.0, torch.device("cuda")) for _ in range(count)]


def preset(name: str):
    from drlcli.config import load_config
    from drlcli.envs import env_facts, make_env

    config = load_config(REPO / "drlcli" / "presets" / f"{name}.yaml")
    return config, env_facts(make_env(config.env.id))


def updated_alike(graphed, eager, work) -> float:
    """Update both learners with each batch of ``work`` and the same policy samples; after
    every update their actor and critic tensors agree within TOLERANCE. Returns the largest
    difference seen."""
    worst = 0.0
    for index, batch in enumerate(work):
        rng = torch.cuda.get_rng_state()
        graphed.update(batch)
        torch.cuda.set_rng_state(rng)
        eager.update(batch)
        for part in ("actor", "critic"):
            mine, theirs = getattr(graphed, part).state_dict(), getattr(eager, part).state_dict()
            for name, tensor in theirs.items():
                if not tensor.is_floating_point():
                    continue
                torch.testing.assert_close(
                    mine[name],
                    tensor,
                    rtol=TOLERANCE,
                    atol=TOLERANCE,
                    msg=lambda m, i=index, n=name, p=part: f"update {i + 1}, {p}.{n}: {m}",
                )
                worst = max(worst, float((mine[name] - tensor).abs().max()))
    return worst


def check_graphed_equals_eager() -> str:
    config, facts = preset("hopper_flash_sac")
    graphed, eager = (
        learner(True, config.algo_params, facts, 12),
        learner(False, config.algo_params, facts, 12),
    )
    worst = updated_alike(graphed, eager, batches(facts, config.algo_params.batch_size, 12))
    kinds = sorted(graphed._graphs.graphs)
    if kinds != [False, True]:
        raise AssertionError(f"captured kinds {kinds}, expected both")
    return (
        f"12 updates, both kinds captured, largest difference {worst:.2e} (tolerance {TOLERANCE})"
    )


def check_cpu_checkpoint_resumes_graphed() -> str:
    import copy

    config, facts = preset("hopper_flash_sac")
    writer = learner(False, config.algo_params, facts, 20, device="cpu")
    for batch in batches(facts, config.algo_params.batch_size, 4):
        writer.update({name: tensor.cpu() for name, tensor in batch.items()})
    state = writer.state_dict()
    graphed = learner(True, config.algo_params, facts, 20)
    eager = learner(False, config.algo_params, facts, 20)
    graphed.load_state_dict(copy.deepcopy(state))
    eager.load_state_dict(copy.deepcopy(state))
    for optimizer in (graphed.actor_optimizer, graphed.critic_optimizer):
        group = optimizer.param_groups[0]
        rate = group["lr"]
        if not (group["capturable"] and isinstance(rate, torch.Tensor) and rate.is_cuda):
            raise AssertionError(f"loaded groups lost the graph's settings: {group.keys()}")
        steps = [optimizer.state[p]["step"] for p in group["params"]]
        if not all(step.is_cuda for step in steps):
            raise AssertionError("step counters left on the CPU")
    worst = updated_alike(graphed, eager, batches(facts, config.algo_params.batch_size, 8))
    kinds = sorted(graphed._graphs.graphs)
    if kinds != [False, True]:
        raise AssertionError(f"captured kinds {kinds}, expected both")
    return f"8 updates after the load, both kinds captured, largest difference {worst:.2e}"


def short_training(name: str, rollout_length: int | None = None, **params) -> str:
    from drlcli.runtime.training import train

    config, _ = preset(name)
    config = dataclasses.replace(config, rollout_length=rollout_length or config.rollout_length)
    out = Path(tempfile.mkdtemp(prefix="drl-gpu-check-"))
    steps = config.num_actors * config.env.num_envs * config.rollout_length * 2
    config = dataclasses.replace(
        config,
        total_env_steps=steps,
        output_dir=str(out),
        metrics_path=str(out / "metrics.csv"),
        evaluation=dataclasses.replace(config.evaluation, interval_env_steps=None, episodes=1),
        algo_params=dataclasses.replace(config.algo_params, **params),
    )
    started = time.perf_counter()
    summary = train(config, quiet=True, console=Console(quiet=True))
    seconds = time.perf_counter() - started
    return f"{summary.rounds} rounds, {summary.env_steps} env steps in {seconds:.1f} s"


def updates_per_second() -> str:
    config, facts = preset("hopper_flash_sac")
    rates = {}
    for graphs in (True, False):
        model = learner(graphs, config.algo_params, facts)
        work = batches(facts, config.algo_params.batch_size, 8)
        for batch in work * 2:  # warm-up and capture
            model.update(batch)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(25):
            for batch in work:
                model.update(batch)
        torch.cuda.synchronize()
        rates[graphs] = 200 / (time.perf_counter() - started)
    return (
        f"graphs on {rates[True]:.0f} updates/s, off {rates[False]:.0f} updates/s "
        f"(ratio {rates[True] / rates[False]:.2f})"
    )


def main() -> int:
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device here (torch.cuda.is_available() is False)")
        return 0
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    # Updates start within the first round: the graphs are captured during training.
    flash = {"rollout_length": 1000, "warmup_steps": 256}
    checks = [
        ("graphed update equals the eager one", check_graphed_equals_eager),
        (
            "FlashSAC trains on cuda, graphs on",
            lambda: short_training("hopper_flash_sac", use_whole_cycle_cuda_graph=True, **flash),
        ),
        (
            "FlashSAC trains on cuda, graphs off",
            lambda: short_training("hopper_flash_sac", use_whole_cycle_cuda_graph=False, **flash),
        ),
        ("PPO trains on cuda", lambda: short_training("hopper_ppo")),
        ("a CPU checkpoint resumes graphed on cuda", check_cpu_checkpoint_resumes_graphed),
        ("FlashSAC updates per second", updates_per_second),
    ]
    failed = 0
    for name, check in checks:
        try:
            print(f"PASS {name}: {check()}", flush=True)
        except Exception as error:  # every check reports, whatever went wrong
            failed += 1
            reason = " ".join(str(error).split())[:400]
            print(f"FAIL {name}: {type(error).__name__}: {reason}", flush=True)
            traceback.print_exc(file=sys.stderr)
    print(f"{len(checks) - failed} of {len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

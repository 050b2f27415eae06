"""Drive a policy that ``drl export`` wrote with onnxruntime and Gymnasium alone: no drl, no
torch. What a deployment does: read the graph's metadata, cut the policy's part of each
observation, and for a recurrent policy feed the state back, zeros at each episode's start.

    python examples/onnx_client.py policy.onnx --episodes 10

The graph holds the observation normalisation and the action transform: its ``action`` goes to
``env.step`` as it is. Flat Box observations (whole, or the slices ``observation_groups`` or
``observation_keys`` gave the policy); a Dict task's parts are read by key the same way.
"""

from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import onnxruntime


def policy_input(observation, layout: list[dict] | None) -> np.ndarray:
    """The graph's ``obs [1, obs_dim]``: the whole flat observation, or each part the layout
    names (a slice ``'a:b'`` of a flat Box, or a Dict key), raveled and joined in order."""
    if layout is None:
        return np.asarray(observation, np.float32).reshape(1, -1)
    parts = []
    for part in layout:
        key = part["key"]
        if isinstance(observation, dict):
            value = observation[key]
        elif ":" in key:
            start, stop = (int(x) if x else None for x in key.split(":"))
            value = observation[start:stop]
        else:
            value = observation[int(key) : int(key) + 1]
        parts.append(np.asarray(value, np.float32).ravel())
    return np.concatenate(parts).reshape(1, -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the .onnx file drl export wrote")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="episode i is reset with seed + i")
    args = parser.parse_args()

    session = onnxruntime.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    metadata = session.get_modelmeta().custom_metadata_map
    layout = json.loads(metadata["drl.observation_layout"])
    recurrent = json.loads(metadata["drl.recurrent"]) if "drl.recurrent" in metadata else None
    env = gym.make(metadata["drl.env_id"])
    returns = []
    for episode in range(args.episodes):
        observation, _ = env.reset(seed=args.seed + episode)
        state = {}
        if recurrent is not None:  # zeros at an episode's first observation
            layers, _, size = recurrent["state"]["h"]
            state = {name: np.zeros((layers, 1, size), np.float32) for name in recurrent["inputs"]}
        total, steps = 0.0, 0
        while True:
            outputs = session.run(None, {"obs": policy_input(observation, layout), **state})
            action = outputs[0][0]
            if recurrent is not None:  # the state after this step is the next step's input
                state = dict(zip(recurrent["inputs"], outputs[1:], strict=True))
            observation, reward, terminated, truncated, _ = env.step(action)
            total, steps = total + float(reward), steps + 1
            if terminated or truncated:
                break
        returns.append(total)
        print(f"episode {episode}: return {total:.1f} over {steps} steps")
    env.close()
    print(
        f"mean return {np.mean(returns):.1f} ± {np.std(returns):.1f} over {len(returns)} episodes"
    )


if __name__ == "__main__":
    main()

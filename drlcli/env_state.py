"""Snapshots of a Gymnasium environment's state as plain data, so a resumed run continues the
episodes in progress exactly where they were (Method.md, "Resume is exact").

What a snapshot holds, for an environment made by ``gymnasium.make``:

- MuJoCo's whole integration state (``mj_getState`` with ``mjSTATE_INTEGRATION``: time,
  positions, velocities, actuator activations, the constraint solver's warm start, controls,
  applied forces, mocap poses, user data) where the unwrapped environment holds ``model`` and
  ``data`` of MuJoCo's types: stepping after ``mj_setState`` is bit for bit the stepping that
  would have followed;
- the environment's random generator (``np_random``'s bit-generator state);
- every attribute of plain data (numbers, booleans, strings, None, numeric arrays) of the
  unwrapped environment and of each wrapper (``TimeLimit``'s elapsed steps, say).

Python objects an environment keeps in other attributes (lists, dicts, objects of its own) are
not in it: such an environment resumes with those as they are after a fresh reset.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_PLAIN = (bool, int, float, str, type(None))


def _plain_attributes(obj: Any) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if isinstance(value, (*_PLAIN, np.generic)):
            attributes[name] = value.item() if isinstance(value, np.generic) else value
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
            attributes[name] = value.copy()
    return attributes


def _restore_attributes(obj: Any, attributes: dict[str, Any]) -> None:
    for name, value in attributes.items():
        if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
            value = value.numpy()  # an array a checkpoint holds as a tensor
        current = getattr(obj, name, None)
        if (
            isinstance(current, np.ndarray)
            and isinstance(value, np.ndarray)
            and current.shape == value.shape
            and current.flags.writeable
        ):
            np.copyto(current, value)  # in place: the array may be a view another part reads
        else:
            setattr(obj, name, value)


def _wrappers(env: Any) -> list[Any]:
    """The wrapper chain from the outside in, then the unwrapped environment."""
    chain = [env]
    while hasattr(chain[-1], "env") and chain[-1] is not getattr(chain[-1], "unwrapped", None):
        chain.append(chain[-1].env)
    return chain


def _mujoco_parts(env: Any) -> tuple[Any, Any] | None:
    import mujoco

    model, data = getattr(env, "model", None), getattr(env, "data", None)
    if isinstance(model, mujoco.MjModel) and isinstance(data, mujoco.MjData):
        return model, data
    return None


def env_state(env: Any) -> dict[str, Any]:
    """The state of ``env`` (and its wrappers) as plain data: ``{mujoco: float64 [n] or None,
    np_random: the bit generator's state or None, attributes: [one mapping per wrapper, the
    unwrapped environment last]}``."""
    import mujoco

    unwrapped = env.unwrapped
    parts = _mujoco_parts(unwrapped)
    physics = None
    if parts is not None:
        model, data = parts
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        physics = np.empty(mujoco.mj_stateSize(model, spec), dtype=np.float64)
        mujoco.mj_getState(model, data, physics, spec)
    generator = getattr(unwrapped, "_np_random", None)
    return {
        "mujoco": physics,
        "np_random": None if generator is None else generator_state(generator),
        "attributes": [_plain_attributes(layer) for layer in _wrappers(env)],
    }


def load_env_state(env: Any, state: dict[str, Any]) -> None:
    """Put ``env`` back into a state ``env_state`` took of an environment made the same way.

    Raises:
        ValueError: the state does not fit this environment (another task or wrapper chain).
    """
    import mujoco

    layers = _wrappers(env)
    attributes = state["attributes"]
    if len(attributes) != len(layers):
        raise ValueError(
            f"the stored state has {len(attributes)} wrapper layers, this environment {len(layers)}"
        )
    unwrapped = env.unwrapped
    parts = _mujoco_parts(unwrapped)
    if (state["mujoco"] is None) != (parts is None):
        raise ValueError("the stored state and this environment differ in having MuJoCo physics")
    spec = mujoco.mjtState.mjSTATE_INTEGRATION
    if parts is not None:
        physics = np.asarray(state["mujoco"], dtype=np.float64)
        if physics.shape != (mujoco.mj_stateSize(parts[0], spec),):
            raise ValueError("the stored MuJoCo state does not fit this model")
    # Checked: now change the environment.
    if state["np_random"] is not None:  # first: gymnasium's setter also resets the seed record
        unwrapped.np_random = generator_of(state["np_random"])
    for layer, stored in zip(layers, attributes, strict=True):
        _restore_attributes(layer, stored)
    if parts is not None:
        model, data = parts
        mujoco.mj_setState(model, data, physics, spec)
        mujoco.mj_forward(model, data)  # positions, contacts and sensors of the restored state


def generator_state(generator: np.random.Generator) -> dict[str, Any]:
    """A numpy generator's bit-generator state as plain data, its 128-bit integers as decimal
    strings (a checkpoint holds tensors and plain values; an integer that wide is neither)."""
    return _stringify(generator.bit_generator.state)


def generator_of(state: dict[str, Any]) -> np.random.Generator:
    """The generator ``generator_state`` described, in the same state."""
    restored = _unstringify(state)
    bit_generator = getattr(np.random, restored["bit_generator"])()
    bit_generator.state = restored
    return np.random.Generator(bit_generator)


def _stringify(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _stringify(item) for key, item in value.items()}
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return {"int": str(int(value))}
    if isinstance(value, np.ndarray):
        return {"uint_array": [str(int(x)) for x in value.ravel()], "dtype": str(value.dtype)}
    return value


def _unstringify(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"int"}:
            return int(value["int"])
        if set(value) == {"uint_array", "dtype"}:
            return np.array([int(x) for x in value["uint_array"]], dtype=value["dtype"])
        return {key: _unstringify(item) for key, item in value.items()}
    return value

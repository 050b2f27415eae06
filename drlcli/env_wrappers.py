"""Gymnasium's own wrappers, named in the config (``env.wrappers``), around a task.

Only the wrapper classes of ``gymnasium.wrappers`` are taken, by name, with plain-data keyword
arguments: a config never imports code from a file, and a checkpoint records the names and
arguments, so play, evaluation and export rebuild the task exactly as training made it.
Wrappers that would do drl's own work twice, or undo it, are refused with what to use instead.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any

from drlcli.errors import EnvironmentSpecError

# Wrappers whose work drl does itself: refused, with the setting that does it.
REFUSED = {
    "Autoreset": "drl resets each environment itself (EnvBatch)",
    "TimeLimit": "use env.max_episode_steps",
    "RecordVideo": "use drl play --video",
    "HumanRendering": "use drl play --render",
    "RenderCollection": "use drl play --video",
    "PassiveEnvChecker": "gymnasium.make applies it already",
    "OrderEnforcing": "gymnasium.make applies it already",
}


def wrapper_class(name: str, where: str) -> type:
    """The class ``gymnasium.wrappers.<name>``.

    Raises:
        EnvironmentSpecError: not a wrapper of ``gymnasium.wrappers`` (the nearest name is
            suggested), or one drl refuses (``REFUSED``).
    """
    import gymnasium
    import gymnasium.wrappers

    if name in REFUSED:
        raise EnvironmentSpecError(f"{where}: {name} is refused: {REFUSED[name]}")
    candidate = getattr(gymnasium.wrappers, name, None) if name.isidentifier() else None
    if not (isinstance(candidate, type) and issubclass(candidate, gymnasium.Wrapper)):
        known = [
            attribute
            for attribute in dir(gymnasium.wrappers)
            if isinstance(getattr(gymnasium.wrappers, attribute), type)
            and issubclass(getattr(gymnasium.wrappers, attribute), gymnasium.Wrapper)
        ]
        nearest = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {nearest[0]}?" if nearest else ""
        raise EnvironmentSpecError(
            f"{where}: {name!r} is not a wrapper of gymnasium.wrappers (only those are taken, by "
            f"name){hint}"
        )
    return candidate


def apply_wrappers(env: Any, wrappers: Sequence[Any]) -> Any:
    """``env`` inside each wrapper in order (the first innermost); each item has ``name`` and
    ``kwargs`` (an ``EnvWrapperConfig``, or a checkpoint's record of one as a mapping).

    Raises:
        EnvironmentSpecError: naming the wrapper, for a name ``wrapper_class`` refuses or
            keyword arguments the wrapper does not take.
    """
    for index, wrapper in enumerate(wrappers):
        name, kwargs = _name_and_kwargs(wrapper)
        where = f"env.wrappers[{index}] {name}"
        cls = wrapper_class(name, f"env.wrappers[{index}]")
        try:
            env = cls(env, **kwargs)
        except Exception as error:  # whatever the wrapper raises about its arguments: one line
            reason = " ".join(str(error).split())[:300]
            raise EnvironmentSpecError(
                f"{where}: cannot wrap the task with {kwargs} ({type(error).__name__}: {reason})"
            ) from error
    return env


def wrapper_records(wrappers: Sequence[Any]) -> list[dict[str, Any]]:
    """The wrappers as plain data (a checkpoint's ``env.wrappers``)."""
    return [dict(zip(("name", "kwargs"), _name_and_kwargs(w), strict=True)) for w in wrappers]


def _name_and_kwargs(wrapper: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(wrapper, dict):
        return str(wrapper["name"]), dict(wrapper.get("kwargs") or {})
    return wrapper.name, dict(wrapper.kwargs)

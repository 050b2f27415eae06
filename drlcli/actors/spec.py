"""Actor specs: building a policy actor from ``{builder, kwargs}`` (plain data: whether a builder
is drl's own is the registry's to say, ``drlcli/checkpoints/semantics.py``).

A spec names a builder as ``"pkg.module:callable"``; the builder is resolved with
``importlib.import_module`` and called as ``builder(obs_dim=..., action_dim=..., device=...,
**kwargs)``. Because the spec is plain data (kwargs must be JSON-serialisable), any process can
rebuild the same actor from it (spawn safety), and a checkpoint can record it as
``actor_semantics``.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drlcli.config_fields import check_plain_data
from drlcli.errors import ConfigError, DrlError, PolicyActorContractError, error_line

SEMANTICS_SCHEMA_VERSION = 1
SUPPORTED_SEMANTICS_VERSIONS = (1,)
SEMANTICS_FIELDS = (
    "schema_version",
    "kind",
    "builder",
    "kwargs",
    "obs_dim",
    "action_dim",
    "action_transform",
)
Builder = TypeVar("Builder", bound=Callable[..., Any])
RECURRENT_GAUSSIAN_BUILDER = "drlcli.actors.recurrent:build_recurrent_gaussian_actor"
"""The one builder whose actors may be recurrent (ADR 0018 decision 5): PPO's, which drl's
rollout, learner, play and export know how to carry the state of."""
BUILDER_PATTERN = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


@dataclass(frozen=True)
class ActorSpec:
    """How to build a policy actor: a dotted-path builder and JSON-serialisable kwargs."""

    builder: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.builder, str) or not BUILDER_PATTERN.match(self.builder):
            raise PolicyActorContractError(
                f"actor builder must look like 'pkg.module:callable', got {self.builder!r}"
            )
        try:
            json.dumps(self.kwargs, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise PolicyActorContractError(
                f"actor kwargs of {self.builder} must be JSON-serialisable ({error})"
            ) from error

    @property
    def module(self) -> str:
        return self.builder.split(":", 1)[0]


@dataclass(frozen=True)
class ActorConfig:
    """A custom policy actor in a config's ``algo_params`` (docs/adr/0017-custom-policy-actors.md):
    ``builder(obs_dim=, action_dim=, device=, **kwargs)``.

    Naming a builder in the config is the user's consent to import that module.
    """

    builder: str
    """``"pkg.module:callable"``, importable in every training process."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """JSON-serialisable keyword arguments of the builder."""


def check_actor_config(actor_config: ActorConfig, where: str = "algo_params.actor_config") -> None:
    """A builder drl can import and kwargs every process and checkpoint can carry.

    Raises:
        ConfigError: naming the key path ``where``.
    """
    if not BUILDER_PATTERN.match(actor_config.builder):
        raise ConfigError(
            f"{where}.builder: must look like 'pkg.module:callable', got {actor_config.builder!r}"
        )
    check_plain_data(actor_config.kwargs, f"{where}.kwargs")


def resolve_builder(spec: ActorSpec) -> Any:
    """Import the builder's module and return the callable."""
    module_name, attribute = spec.builder.split(":", 1)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise PolicyActorContractError(
            f"actor builder {spec.builder}: cannot import module {module_name!r} ({error}); "
            "it must be importable in every training process"
        ) from error
    except Exception as error:  # SyntaxError, or the module's own code raised on import
        raise PolicyActorContractError(
            f"actor builder {spec.builder}: importing module {module_name!r} failed "
            f"({_where(error)}{error_line(error)})"
        ) from error
    builder = getattr(module, attribute, None)
    if not callable(builder):
        raise PolicyActorContractError(
            f"actor builder {spec.builder}: module {module_name!r} has no callable {attribute!r}"
        )
    return builder


def _where(error: BaseException) -> str:
    """``"at file:line: "`` of the innermost frame an exception (or a SyntaxError's source)
    names, or empty."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"at {error.filename}:{error.lineno}: "
    frames = traceback.extract_tb(error.__traceback__)
    return f"at {frames[-1].filename}:{frames[-1].lineno}: " if frames else ""


def passes_keywords_to(actor_class: type) -> Callable[[Builder], Builder]:
    """Decorate a builder ``(obs_dim, action_dim, device="cpu", **kwargs)`` that hands
    ``kwargs`` on to ``actor_class(obs_dim, action_dim, **kwargs)``: the builder's signature
    becomes the class's keywords, so that ``build_policy_actor`` refuses a keyword the class
    does not take before anything is built, naming it."""

    def decorate(builder: Builder) -> Builder:
        keywords = list(inspect.signature(actor_class).parameters.values())[2:]
        builder.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [
                inspect.Parameter("obs_dim", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter("action_dim", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                inspect.Parameter("device", inspect.Parameter.POSITIONAL_OR_KEYWORD, default="cpu"),
                *(keyword.replace(kind=inspect.Parameter.KEYWORD_ONLY) for keyword in keywords),
            ]
        )
        return builder

    return decorate


def build_policy_actor(
    spec: ActorSpec,
    obs_dim: int,
    action_dim: int,
    device: Any = "cpu",
    action_low: Any = None,
    action_high: Any = None,
) -> Any:
    """Build the actor and validate it against the contract (fail closed); with the env's
    action bounds, its actions must lie inside them."""
    from drlcli.actors.contract import validate_policy_actor

    builder = resolve_builder(spec)
    arguments = {"obs_dim": obs_dim, "action_dim": action_dim, "device": device, **spec.kwargs}
    try:
        inspect.signature(builder).bind(**arguments)
    except TypeError as error:
        raise PolicyActorContractError(
            f"actor builder {spec.builder} rejected its arguments ({error}); it is called as "
            "builder(obs_dim=, action_dim=, device=, **kwargs)"
        ) from error
    except ValueError:  # no signature to read (a builtin): the call itself tells
        pass
    try:
        actor = builder(**arguments)
    except DrlError:
        raise
    except Exception as error:  # the builder's own code failed: say where, in one line
        raise PolicyActorContractError(
            f"actor builder {spec.builder} raised {_where(error)}{error_line(error)}"
        ) from error
    if hasattr(actor, "recurrent_state_shape") and spec.builder != RECURRENT_GAUSSIAN_BUILDER:
        raise PolicyActorContractError(
            f"policy actor {type(actor).__name__} from {spec.builder} is recurrent (it has "
            "recurrent_state_shape), but custom policy actors are one-step (ADR 0018): give it "
            "a history with env.wrappers: [{name: FrameStackObservation, kwargs: {stack_size: "
            "4}}, {name: FlattenObservation}], or train algo: ppo with algo_params.recurrent"
        )
    validate_policy_actor(actor, obs_dim, action_dim, action_low, action_high)
    return actor

"""``drl verify``'s report: every check of ``checkpoints/verified.py`` on one file, with the
verdict and the JSON form (``drl verify --json``, the dashboard's audit)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from drlcli.actors.recurrent_layout import core_of, state_record
from drlcli.checkpoints.files import load_payload
from drlcli.checkpoints.verified import FAIL, WARN, Check, run_checks


@dataclass(frozen=True)
class AuditReport:
    path: str
    checks: list[Check]
    # The file's actor_semantics as stored (a mapping, else None), for programs reading --json.
    actor_semantics: dict | None = None
    # A recurrent policy's core and state layout (ADR 0018), None for a one-step one.
    recurrent: dict | None = None
    # The algorithm's audited params as the checkpoint's config holds them (PPO's
    # stabilisers), None where the algorithm records none or the config is unreadable.
    training: dict | None = None
    # Which run wrote it: its name, task and env.seed as its stored config holds them (seeds of
    # one config differ by these alone), None where the config is unreadable.
    run: dict | None = None

    @property
    def failed(self) -> bool:
        return any(check.status == FAIL for check in self.checks)

    @property
    def verdict(self) -> str:
        failures = sum(check.status == FAIL for check in self.checks)
        warnings = sum(check.status == WARN for check in self.checks)
        if failures:
            return f"FAIL: {failures} of {len(self.checks)} checks failed"
        suffix = f" ({warnings} warning{'s' if warnings > 1 else ''})" if warnings else ""
        return f"PASS: all {len(self.checks)} checks passed{suffix}"

    def to_json(self) -> str:
        return json.dumps(
            {
                "path": self.path,
                "verdict": self.verdict,
                "ok": not self.failed,
                "actor_semantics": self.actor_semantics,
                "recurrent": self.recurrent,
                "training": self.training,
                "run": self.run,
                "checks": [asdict(check) for check in self.checks],
            },
            indent=2,
        )


def audit_checkpoint(path: str | Path, payload: dict | None = None) -> AuditReport:
    """Audit ``path`` (its ``payload`` when the caller has already loaded it). Raises
    CheckpointError when the file cannot be read at all."""
    if payload is None:
        payload = load_payload(path)
    checks = run_checks(payload)
    semantics = payload.get("actor_semantics")
    return AuditReport(
        str(path),
        checks,
        _plain(semantics) if isinstance(semantics, dict) else None,
        _recurrent(payload.get("actor")),
        _training(payload),
        _run(payload),
    )


def _run(payload: dict) -> dict | None:
    """``{name, task, seed}`` of the run, from the checkpoint's stored config."""
    config = payload.get("config")
    env = config.get("env") if isinstance(config, dict) else None
    if not isinstance(env, dict):
        return None
    return {
        "name": _plain(config.get("name")),
        "task": _plain(env.get("id")),
        "seed": _plain(env.get("seed", 0)),
    }


def _training(payload: dict) -> dict | None:
    """The algorithm's ``audited_params`` from the checkpoint's stored config; a setting the
    config lacks (a file older than the setting) is the default it was trained with."""
    from drlcli.algos.registry import get_algorithm
    from drlcli.errors import ConfigError

    try:
        algorithm = get_algorithm(payload.get("algo"))
    except ConfigError:  # the checks name the unknown algorithm
        return None
    config = payload.get("config")
    stored = config.get("algo_params") if isinstance(config, dict) else None
    if not algorithm.audited_params or not isinstance(stored, dict):
        return None
    defaults = algorithm.params_type()
    return {
        name: _plain(stored[name] if name in stored else getattr(defaults, name))
        for name in algorithm.audited_params
    }


def _recurrent(actor: Any) -> dict | None:
    """The record of the recurrent core the actor's weights hold, or None."""
    if not isinstance(actor, dict):
        return None
    try:
        core = core_of(actor)
    except (AttributeError, TypeError, ValueError):  # a damaged file: the checks say what
        return None
    return None if core is None else state_record(core)


def _plain(value: Any) -> Any:
    """``value`` with what JSON cannot hold (tensors, say, in a damaged file) as their repr."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        return repr(value)

"""Rich renderings of configs, topologies and run summaries for the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from drlcli.actors.memory import describe_memory, format_bytes
from drlcli.algos.registry import actor_kind, get_algorithm
from drlcli.config import Config
from drlcli.observations import describe_layout


def _flatten(data: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            rows.extend(_flatten(value, f"{path}."))
        else:
            rows.append((path, value))
    return rows


def render_dry_run(config: Config, console: Console) -> None:
    """Print the resolved config, the environment's spaces and the topology. Starts no Ray."""
    from drlcli.envs import env_facts as describe
    from drlcli.envs import make_task_env
    from drlcli.runtime.nodes import check_runtime_env, import_py_modules_here
    from drlcli.topology import detect_available_devices, topology_for_config

    check_runtime_env(config.runtime_env)
    import_py_modules_here(config.runtime_env)  # a task they register, as training sees it
    devices = detect_available_devices()
    topology = topology_for_config(config, devices)
    env = make_task_env(config.env)
    facts = describe(env)
    episode_limit = env.spec.max_episode_steps if env.spec is not None else None
    env.close()
    algorithm = get_algorithm(config.algo)
    spec = algorithm.actor_spec(config.algo_params, facts.action_low, facts.action_high)
    # The rules that need the learner device (a CUDA graph, say), as training checks them.
    algorithm.check_learner_device(
        config.algo_params, spec, topology.learner_device, topology.num_learners
    )

    table = Table(title=f"config {config.name}", show_header=True, header_style="bold")
    table.add_column("key")
    table.add_column("value")
    for key, value in _flatten(config.to_dict()):
        table.add_row(key, "null" if value is None else escape(str(value)))
    console.print(table)

    spaces = Table(title=f"environment {facts.env_id}", header_style="bold")
    spaces.add_column("property")
    spaces.add_column("value")
    spaces.add_row("observation dim", str(facts.obs_dim))
    if facts.observation_layout is not None:
        parts = [f"{f.key} [{f.start}:{f.stop}]" for f in facts.observation_layout]
        spaces.add_row("observation parts", escape(", ".join(parts)))
    groups = facts.observation_groups
    if groups is not None:
        policy = describe_layout(groups.policy_layout)
        spaces.add_row("policy reads", escape(f"{groups.policy_dim}: {policy} (exported)"))
        critic = ", ".join(groups.critic_keys)
        spaces.add_row("critic reads", escape(f"{groups.critic_dim}: {critic} (training only)"))
    spaces.add_row("action dim", str(facts.action_dim))
    spaces.add_row("action low", str(facts.action_low.tolist()))
    spaces.add_row("action high", str(facts.action_high.tolist()))
    spaces.add_row("episode step limit", str(episode_limit))
    console.print(spaces)

    layout = Table(title="topology", header_style="bold")
    layout.add_column("property")
    layout.add_column("value")
    layout.add_row("algorithm", escape(f"{algorithm.name}: {algorithm.summary}"))
    layout.add_row("policy actor", escape(f"{spec.builder} ({actor_kind(spec.builder)})"))
    layout.add_row("visible CUDA devices", str(devices.cuda_devices))
    layout.add_row("learners", f"{topology.num_learners} on {topology.learner_device}")
    if topology.num_learners < topology.requested_learners:
        layout.add_row("note", f"{topology.requested_learners} learners requested; fewer devices")
    layout.add_row("rollout actors per learner", str(topology.actors_per_learner))
    layout.add_row("rollout actors", str(topology.num_actors))
    per_round = topology.num_actors * config.transitions_per_round
    layout.add_row("env steps per round", str(per_round))
    rounds = -(-config.total_env_steps // per_round)
    layout.add_row("rounds", str(rounds))
    layout.add_row("param_sync_interval", str(config.param_sync_interval))
    layout.add_row("metrics", escape(config.metrics_path))
    layout.add_row(
        "checkpoints", escape(f"{config.checkpoint_path}, {config.best_checkpoint_path}")
    )
    console.print(layout)
    console.print("dry run: config valid; nothing started", style="green")


def render_audit(report: Any, console: Console) -> None:
    """The checks of ``drl verify`` as a table, then the one-line verdict."""
    styles = {"PASS": "green", "WARN": "yellow", "FAIL": "bold red"}
    table = Table(title=escape(f"verify {report.path}"), header_style="bold")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for check in report.checks:
        table.add_row(
            check.name, f"[{styles[check.status]}]{check.status}[/]", escape(check.detail)
        )
    console.print(table)
    if report.run:
        run = report.run
        console.print(
            escape(f"run: {run['name']} on {run['task']}, env.seed {run['seed']}"), highlight=False
        )
    if report.training:
        settings = ", ".join(f"{name} {value}" for name, value in report.training.items())
        console.print(escape(f"trained with: {settings}"), highlight=False)
    console.print(
        report.verdict, style="bold red" if report.failed else "bold green", highlight=False
    )


def render_episodes(results: Any, title: str, console: Console) -> None:
    """Per-episode return, length and (a task that reports it) success, then mean +- std and
    the success rate."""
    import statistics

    from drlcli.success import success_rate

    successes = [r.success for r in results]
    rate = success_rate(successes)
    table = Table(title=escape(title), header_style="bold")
    table.add_column("episode", justify="right")
    table.add_column("return", justify="right")
    table.add_column("length", justify="right")
    if rate is not None:
        table.add_column("success", justify="right")
    for index, result in enumerate(results):
        cells = [str(index), f"{result.episode_return:.2f}", str(result.length)]
        if rate is not None:
            cells.append({True: "yes", False: "no", None: "-"}[result.success])
        table.add_row(*cells)
    returns = [r.episode_return for r in results]
    lengths = [r.length for r in results]
    spread = statistics.pstdev(returns) if len(returns) > 1 else 0.0
    table.add_section()
    summary = [
        "mean",
        f"{statistics.fmean(returns):.2f} ± {spread:.2f}",
        f"{statistics.fmean(lengths):.1f}",
    ]
    if rate is not None:
        known = [s for s in successes if s is not None]
        summary.append(f"{rate:.0%} ({sum(known)}/{len(known)})")
    table.add_row(*summary)
    console.print(table)


def render_export(summary: Any, console: Console) -> None:
    """What ``drl export`` wrote and how well it matches torch."""
    table = Table(title=escape(f"exported {summary.path}"), header_style="bold")
    table.add_column("")
    table.add_column("")
    table.add_row("file size", f"{summary.file_size_bytes / 1024:.1f} KiB")
    table.add_row("opset", str(summary.opset))
    inputs = "".join(f", {name}_in" for name in summary.state_names)
    outputs = "".join(f", {name}_out" for name in summary.state_names)
    table.add_row(
        "input / output",
        escape(
            f"obs float32 [batch, obs_dim]{inputs} -> action float32 [batch, action_dim]{outputs}"
        ),
    )
    if summary.state_names:
        table.add_row(
            "recurrent state",
            escape(
                "each [layers, batch, size] float32: zeros at an episode's first observation, "
                "the previous step's outputs after that (metadata drl.recurrent)"
            ),
        )
    table.add_row("observation normalisation", summary.normalization)
    compared = "steps of sequences, state fed back" if summary.state_names else "observations"
    table.add_row(
        "parity max |onnx - torch|",
        f"{summary.max_abs_error:.2e} over {summary.parity_samples} {compared}",
    )
    table.add_row("onnxruntime latency, batch 1", f"{summary.latency_batch1_ms:.3f} ms (median)")
    table.add_row(
        "inference memory",
        escape(
            f"{describe_memory(summary.inference_memory)}; the export module holds "
            f"{format_bytes(summary.export_module_bytes)}"
        ),
    )
    console.print(table)


def render_search_plan(plan: Any, folder: Any, console: Console) -> None:
    """``drl tune --dry-run``: the searched keys and how the search would run."""
    space = Table(title="search space", header_style="bold")
    space.add_column("key")
    space.add_column("distribution")
    space.add_column("values")
    for dimension in plan.dimensions:
        values = (
            ", ".join(escape(repr(value)) for value in dimension.values)
            if dimension.kind == "choice"
            else f"[{dimension.low:g}, {dimension.high:g}]"
        )
        space.add_row(escape(dimension.key), dimension.kind, values)
    console.print(space)
    settings = plan.settings
    how = Table(title="search", show_header=False)
    how.add_column("", style="bold")
    how.add_column("")

    def evaluations(count: int) -> str:
        return f"{count} evaluation{'s' if count > 1 else ''}"

    fraction = f"{settings.quantile_fraction:.0%}"
    schedulers = {
        "asha": ("pruning", f"ASHA, after {evaluations(settings.grace_evaluations)}"),
        "pbt": (
            "population",
            f"PBT: every {evaluations(settings.perturbation_evaluations)}, the bottom "
            f"{fraction} continue from the top {fraction}'s checkpoints with perturbed values"
            + (" (all together)" if settings.synchronous else ""),
        ),
        "none": ("pruning", "none (every trial runs its whole budget)"),
    }
    scheduling, scheduled = schedulers[settings.scheduler]
    retrain = (
        f"the best {settings.retrain_top} on seeds {', '.join(map(str, settings.retrain_seeds))}"
        if settings.retrain_top
        else "none (the winner is the best trial as searched)"
    )
    seeds = plan.trial_seeds
    objective = f"mean return of the last {settings.objective_evaluations} evaluations"
    cpus = f"{settings.cpus_per_trial:g}"
    if len(seeds) == 1:
        on_seeds = f"1 (seed {seeds[0]})"
    else:
        on_seeds = f"{len(seeds)} (seeds {seeds[0]}-{seeds[-1]}, side by side)"
        aggregate = {"iqm": "IQM", "mean": "mean", "median": "median"}
        objective = (
            f"{aggregate[settings.objective_aggregate or 'mean']} over the seeds of each one's "
            f"{objective}"
        )
        cpus += f", shared by its {len(seeds)} seeds' runs"
    for what, value in (
        ("trials", f"{settings.trials}, {plan.env_steps:,} env steps each"),
        ("seeds per trial", on_seeds),
        ("searcher", "Optuna TPE" if settings.searcher == "optuna" else "random"),
        (scheduling, scheduled),
        ("evaluation", f"every {plan.evaluation_interval:,} env steps"),
        ("objective", objective),
        ("CPUs per trial", cpus),
        ("re-training", retrain),
        ("folder", escape(str(folder))),
    ):
        how.add_row(what, value)
    console.print(how)


def render_search_summary(summary: Any, console: Console) -> None:
    """The re-trained candidates (median, IQM with its 95% bootstrap interval, worst seed), the
    chance the winner beats the runner-up, the winner and what the search wrote."""
    from drlcli.seed_statistics import improvement_interval, probability_of_improvement

    if summary.candidates:
        seeds = list(summary.candidates[0].seed_returns)
        title = f"the best trials, re-trained on seeds {', '.join(map(str, seeds))}"
        table = Table(title=title, header_style="bold", min_width=len(title))
        for column in ("trial", "search", "median", "IQM [interval]", "worst"):
            table.add_column(escape(column), justify="left" if column == "trial" else "right")
        for candidate in summary.candidates:
            returns = [candidate.seed_returns[seed] for seed in seeds]
            iqm = f"{candidate.iqm:.1f}"
            if len(returns) > 1:
                interval = candidate.iqm_interval
                iqm += f" [{interval.low:.0f}, {interval.high:.0f}]"
            table.add_row(
                escape(candidate.trial),
                f"{candidate.search_objective:.1f}",
                f"{candidate.median:.1f}",
                iqm,
                f"{min(returns):.1f}",
            )
        console.print(table)
        for candidate in summary.candidates:  # below the table: it stays narrow
            values = ", ".join(f"{key}={_short(value)}" for key, value in candidate.values.items())
            finals = " / ".join(f"{candidate.seed_returns[seed]:.0f}" for seed in seeds)
            console.print(escape(f"{candidate.trial}: {values}; seeds {finals}"), highlight=False)
        if len(summary.candidates) > 1 and len(seeds) > 1:
            winner, runner_up = summary.candidates[:2]
            better, worse = (
                list(winner.seed_returns.values()),
                list(runner_up.seed_returns.values()),
            )
            chance = improvement_interval(better, worse)
            console.print(
                escape(
                    f"P({winner.trial} beats {runner_up.trial} on a seed): "
                    f"{float(probability_of_improvement(better, worse)):.2f} "
                    f"[{chance.low:.2f}, {chance.high:.2f}]"
                ),
                highlight=False,
            )
    console.print(
        escape(f"winner: drl train {summary.winner_yaml}"), style="bold green", highlight=False
    )
    console.print(escape(f"every trial: {summary.results_csv}"), highlight=False)


def _short(value: Any) -> str:
    """A searched value as the table shows it: floats to 4 significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else repr(value)


def render_comparison(reports: Any, console: Console) -> None:
    """``drl compare``'s table: per group of seeds, the median and IQM of its final
    deterministic evaluations, the IQM's 95% bootstrap interval, and the probability that a run
    of the group beats one of its reference's (the first group's, or the first of its task's);
    each run's figure below."""
    from drlcli.seed_statistics import figure

    if not reports:
        return
    reference = reports[0].group
    table = Table(
        title="final deterministic evaluation over seeds (95% bootstrap intervals)",
        header_style="bold",
    )
    for column in ("group", "seeds", "median", "IQM [interval]"):
        table.add_column(escape(column), justify="left" if column == "group" else "right")
    if len(reports) > 1:
        table.add_column(escape("P(improve) [interval]"), justify="right")
    for report in reports:
        interval = report.iqm_interval
        row = [
            escape(report.group),
            str(len(report.runs)),
            figure(report.median),
            f"{figure(report.iqm)} [{figure(interval.low)}, {figure(interval.high)}]",
        ]
        if report.improvement is not None:
            value, chance = report.improvement
            row.append(f"{value:.2f} [{chance.low:.2f}, {chance.high:.2f}]")
        elif len(reports) > 1:
            row.append("reference")
        table.add_row(*row)
    console.print(table)
    references = [report for report in reports if report.reference is None]
    if len(references) > 1:  # groups of several tasks: each measured against its own task's
        named = ", ".join(f"{report.group} on {report.task}" for report in references)
        console.print(
            escape(
                "P(improve): the chance that a run of the group beats one of the reference of "
                f"its task: {named}"
            ),
            highlight=False,
        )
    elif len(reports) > 1:
        console.print(
            escape(f"P(improve): the chance that a run of the group beats one of {reference}'s"),
            highlight=False,
        )
    for report in reports:  # below the table: it stays narrow
        finals = " / ".join(figure(run.final_return) for run in report.runs)
        seeds = [run.seed for run in report.runs]
        on_seeds = "" if None in seeds else f" (seeds {', '.join(map(str, seeds))})"
        task = f" on {report.task}" if report.task else ""
        console.print(escape(f"{report.group}{task}: {finals}{on_seeds}"), highlight=False)
    if any(run.final_source != "final evaluation" for report in reports for run in report.runs):
        console.print(
            "a run without a final evaluation in its checkpoint counts its last periodic one",
            style="yellow",
        )

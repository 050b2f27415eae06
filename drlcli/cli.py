"""The ``drl`` command line: parse, call one library function, render the result.

Keep this module light: ``drl --help`` must not import torch or ray, so heavy modules are
imported inside the command bodies.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from drlcli import __version__
from drlcli.errors import DrlError, first_line

app = typer.Typer(
    name="drl",
    help="Deep reinforcement learning for MuJoCo robots: train, play, export, verify, dashboard.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

stdout = Console()
stderr = Console(stderr=True)
_state = {"debug": False}

T = TypeVar("T")


def _run_command(action: Callable[[], T]) -> T:
    """Run a command body; a DrlError becomes one line on stderr and its exit code."""
    try:
        return action()
    except DrlError as error:
        if _state["debug"]:
            traceback.print_exc()
        message = " ".join(str(error).split())
        stderr.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
        raise typer.Exit(error.exit_code) from None
    except KeyboardInterrupt:
        stderr.print("interrupted")
        raise typer.Exit(130) from None


# The Ray cluster of a run or a search (train, tune).
AddressOption = Annotated[
    str | None,
    typer.Option(
        "--address",
        envvar="RAY_ADDRESS",
        help="Ray cluster to join (default: start a local Ray on this machine).",
    ),
]

SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        metavar="KEY=VALUE",
        help="Set a config key for this run (dotted, the value as YAML; repeat for more), "
        "e.g. --set algo_params.learning_rate=1e-3.",
    ),
]


def _overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set`` items as dotted config keys and their YAML values (``parse_override``)."""
    from drlcli.config import parse_override

    return dict(parse_override(item) for item in items or [])


def _consent_option(flag: str, what: str) -> Any:
    """A repeatable ``--allow-...`` option (play, export): consent to import a module a
    checkpoint names, ``what`` saying which."""
    return Annotated[
        list[str] | None,
        typer.Option(flag, metavar="MODULE", help=f"Allow importing {what} (repeatable)."),
    ]


AllowBuilderOption = _consent_option("--allow-builder", "this custom actor builder module")
AllowEnvModuleOption = _consent_option(
    "--allow-env-module", "this module to make the checkpoint's task 'MODULE:Task-v0'"
)


# Examples under each command's --help: (command line, what it does); the README's table of
# commands shows the first of each, the command's page in docs/ all of them (tests/test_cli.py).
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "train": [
        ("drl train hopper_ppo", "a preset (drl presets), local Ray on this machine"),
        ("drl train my.yaml", "your config (drl presets show hopper_ppo > my.yaml)"),
        ("drl train hopper_ppo --seed 3", "env.seed 3, the run hopper_ppo_seed3"),
        ("drl train hopper_ppo --set algo_params.learning_rate=1e-3", "a key for this run"),
        ("drl train hopper_ppo --quiet", "one plain log line per round"),
        ("drl train hopper_ppo --dry-run", "validate, show spaces and topology; start nothing"),
        ("drl train hopper_ppo --address HOST:6379", "join a Ray cluster (or RAY_ADDRESS)"),
        ("drl train hopper_ppo --resume output/model_hopper_ppo.pt", "continue a run"),
    ],
    "play": [
        ("drl play output/model_quickstart.pt", "5 deterministic episodes, table of returns"),
        ("drl play output/model_quickstart.pt --episodes 10 --seed 3 --stochastic", ""),
        ("drl play output/model_quickstart.pt --render", "MuJoCo viewer, real-time pace"),
        ("drl play output/model_quickstart.pt --video run.mp4 --width 640 --height 480", ""),
    ],
    "export": [("drl export output/model_quickstart.pt policy.onnx", "ONNX, parity-checked")],
    "verify": [("drl verify output/model_quickstart.pt", "audit; --json for machines")],
    "tune": [
        ("drl tune hopper_ppo space.yaml", "the search space file: see docs/tune.md"),
        ("drl tune hopper_ppo space.yaml --dry-run", "check both files, print the plan"),
        ("drl tune hopper_ppo space.yaml --resume", "continue an interrupted search"),
        ("drl tune my.yaml space.yaml --trials 40 --address HOST:6379", "over a cluster"),
    ],
    "compare": [
        ("drl compare output/", "every seed group under output/ (names ending _seed<N>)"),
        ("drl compare runs/a runs/b --plot ab.png --json ab.json", "two configs' seeds"),
        ("drl compare output/ --reference hopper_ppo", "each group against hopper_ppo's seeds"),
    ],
    "dashboard": [
        ("drl dashboard", "every run under output/, at http://127.0.0.1:6007/"),
        ("drl dashboard runs/ other/ --port 8080", ""),
        ("drl train hopper_ppo --dashboard", "the same page beside a training run"),
    ],
}


def _examples(command: str) -> str:
    """The ``--help`` epilog of a command: its examples, one paragraph each."""
    lines = [f"{line}    # {what}" if what else line for line, what in EXAMPLES[command]]
    return "Examples:\n\n" + "\n\n".join(lines)


def _version_callback(value: bool) -> None:
    if value:
        stdout.print(f"drl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version_callback, is_eager=True, help="Print the version."
        ),
    ] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of errors.")] = False,
) -> None:
    """Deep reinforcement learning for MuJoCo robots: train, play, export, verify, dashboard."""
    _state["debug"] = debug


@app.command(epilog=_examples("train"))
def train(
    config_path: Annotated[
        Path,
        typer.Argument(
            metavar="CONFIG", help="YAML training config, or a preset name (drl presets)."
        ),
    ],
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Validate CONFIG, print it and the topology; start nothing."
        ),
    ] = False,
    address: AddressOption = None,
    overrides: SetOption = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            metavar="N",
            help="Train on seed N: env.seed N, the run named <name>_seed<N> (its own "
            "checkpoints and metrics; drl compare groups the seeds).",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option("--resume", metavar="CKPT", help="Continue training from a checkpoint."),
    ] = None,
    resume_replay: Annotated[
        bool,
        typer.Option(
            "--resume-replay",
            help="FlashSAC, SAC: also refill the replay buffer saved beside CKPT "
            "(needs algo_params.save_replay_buffer: true in the run that wrote it); one "
            "saved with another round than CKPT is refused.",
        ),
    ] = False,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="Plain log lines instead of the progress bar.")
    ] = False,
    with_dashboard: Annotated[
        bool,
        typer.Option(
            "--dashboard", help="Also serve the dashboard of the run's folders on 127.0.0.1."
        ),
    ] = False,
    dashboard_port: Annotated[
        int, typer.Option("--dashboard-port", help="Port of --dashboard.")
    ] = 6007,
    tensorboard: Annotated[
        Path | None,
        typer.Option(
            "--tensorboard",
            metavar="DIR",
            help="Also write TensorBoard event files into DIR/<run name> (logging.tensorboard; "
            "pip install 'drlcli\\[tensorboard]').",
        ),
    ] = None,
    wandb: Annotated[
        str | None,
        typer.Option(
            "--wandb",
            metavar="PROJECT",
            help="Also log a Weights & Biases run to PROJECT (logging.wandb; WANDB_MODE=offline "
            "writes it locally; pip install 'drlcli\\[wandb]').",
        ),
    ] = None,
    mlflow: Annotated[
        str | None,
        typer.Option(
            "--mlflow",
            metavar="URI",
            help="Also log an MLflow run to the store or server URI (sqlite:///mlflow.db, "
            "http://host:5000; logging.mlflow; pip install 'drlcli\\[mlflow]').",
        ),
    ] = None,
) -> None:
    """Train a policy as CONFIG describes; writes metrics CSV and checkpoints."""

    def body() -> None:
        import dataclasses

        from drlcli.config import MlflowConfig, WandbConfig, load_config, with_seed
        from drlcli.report import render_dry_run

        config = load_config(_config_or_preset(config_path), _overrides(overrides))
        if seed is not None:
            config = with_seed(config, seed)
        if resume is not None:
            _check_resume_target(resume, config, seed)
        sinks: dict[str, Any] = {}  # the options win over the config's logging section
        if tensorboard is not None:
            sinks["tensorboard"] = str(tensorboard)
        if wandb is not None:
            sinks["wandb"] = dataclasses.replace(
                config.logging.wandb or WandbConfig(), project=wandb
            )
        if mlflow is not None:
            settings = config.logging.mlflow or MlflowConfig()
            sinks["mlflow"] = dataclasses.replace(settings, tracking_uri=mlflow)
        if sinks:
            config = dataclasses.replace(
                config, logging=dataclasses.replace(config.logging, **sinks)
            )
        from drlcli.sinks import check_sinks

        check_sinks(config)
        if dry_run:
            render_dry_run(config, stdout)
            return
        from drlcli.errors import TrainingStopped
        from drlcli.runtime.training import train as run_training

        server = None
        if with_dashboard:
            from drlcli.dashboard.server import page_is_built, start_dashboard

            folders = {Path(config.output_dir), Path(config.metrics_path).parent}
            for folder in folders:
                folder.mkdir(parents=True, exist_ok=True)
            server = start_dashboard(sorted(folders), port=dashboard_port)
            _announce_dashboard(server, "127.0.0.1", page_is_built())
        try:
            run_training(
                config,
                address=address,
                resume=resume,
                resume_replay=resume_replay,
                quiet=quiet,
                console=stdout,
            )
        except TrainingStopped as stopped:
            how = (
                "; continue with: "
                + resume_command(config_path, overrides or [], seed, stopped.checkpoint)
                if stopped.checkpoint is not None
                else ""
            )
            stderr.print(escape(f"{stopped}{how}"), highlight=False, soft_wrap=True)
            raise typer.Exit(stopped.exit_code) from None
        finally:
            if server is not None:
                server.shutdown()

    _run_command(body)


def resume_command(
    config_path: Path, overrides: list[str], seed: int | None, checkpoint: Path
) -> str:
    """The ``drl train`` line that continues a stopped run: its config, ``--set`` and ``--seed``
    as given, and ``--resume CHECKPOINT``, quoted for a POSIX shell."""
    again = ["drl", "train", str(config_path), *(f"--set={item}" for item in overrides)]
    again += [] if seed is None else ["--seed", str(seed)]
    return shlex.join([*again, "--resume", str(checkpoint)])


def _check_resume_target(resume: Path, config: Any, seed: int | None) -> None:
    """``--resume CKPT`` continues the run that wrote CKPT, into the files the config names: a
    checkpoint of another seed than ``--seed`` is refused, and so is one of another run where
    the config's files already hold a run (its checkpoint would be replaced and its metrics
    appended to). An unreadable checkpoint is left to the resume's own checks.

    Raises:
        UsageError: naming the checkpoint's run and the ways on.
    """
    from drlcli.errors import UsageError

    stored = _checkpoint_config(resume)
    if stored is None:
        return
    if seed is not None and stored.env.seed != seed:
        raise UsageError(
            f"--seed {seed}: {resume} trained on seed {stored.env.seed}; continue it with "
            f"--seed {stored.env.seed}, or resume seed {seed}'s own run ({config.checkpoint_path})"
        )
    if resume.resolve() == config.checkpoint_path.resolve():
        return  # the config's own checkpoint (a run's files copied under a new name, say)
    taken = [path for path in (config.checkpoint_path, Path(config.metrics_path)) if path.exists()]
    if stored.name != config.name and taken:
        raise UsageError(
            f"--resume {resume}: it is run {stored.name}'s checkpoint, and this config names run "
            f"{config.name}, whose files it would write over ({', '.join(map(str, taken))}); "
            f"resume with the name it trained under (set name: {stored.name}, or --seed if it "
            "was one), or give the continued run a new name (--set name=...)"
        )


def _config_or_preset(path: Path) -> Path:
    """``path`` when the file exists, else the shipped preset of that name (said on stderr)."""
    if path.exists():
        return path
    from drlcli.errors import ConfigError
    from drlcli.preset_catalog import find_preset, preset_names

    preset = find_preset(str(path))
    if preset is None:
        raise ConfigError(
            f"{path}: config file not found, nor a preset of that name ({preset_names()})"
        )
    stderr.print(escape(f"using preset {preset.name} ({preset.path})"), highlight=False)
    return preset.path


presets_app = typer.Typer(
    help="The shipped presets: list them, or print one to start a config from.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(presets_app, name="presets")


@presets_app.callback()
def presets(context: typer.Context) -> None:
    """List the presets: task, algorithm, budget, and the result measured with each."""
    if context.invoked_subcommand is not None:
        return

    def body() -> None:
        from rich.table import Table

        from drlcli.preset_catalog import available_presets

        table = Table(title="presets (drl train NAME; drl presets show NAME)", header_style="bold")
        table.add_column("name", no_wrap=True)
        table.add_column("task")
        table.add_column("algo")
        table.add_column("env steps", justify="right")
        table.add_column("measured on two CPU cores (deterministic evaluation)")
        for preset in available_presets():
            config = preset.config()
            table.add_row(
                preset.name,
                escape(config.env.id),
                config.algo,
                f"{config.total_env_steps:,}",
                escape(preset.measured or "-"),
            )
        stdout.print(table)

    _run_command(body)


@presets_app.command("show")
def presets_show(
    name: Annotated[str, typer.Argument(metavar="NAME", help="A preset name (drl presets).")],
) -> None:
    """Print a preset's YAML, to start a config from: drl presets show hopper_ppo > my.yaml"""

    def body() -> None:
        from drlcli.errors import UsageError
        from drlcli.preset_catalog import find_preset, preset_names

        preset = find_preset(name)
        if preset is None:
            raise UsageError(f"no preset {name!r}; the presets are: {preset_names()}")
        sys.stdout.write(preset.text)

    _run_command(body)


@app.command(epilog=_examples("play"))
def play(
    checkpoint: Annotated[Path, typer.Argument(metavar="CKPT", help="Checkpoint to run.")],
    episodes: Annotated[int, typer.Option("--episodes", min=1, help="Episodes to run.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Episode i is reset with SEED + i.")] = 0,
    stochastic: Annotated[
        bool,
        typer.Option("--stochastic", help="Sample actions (explore) instead of transform(mean)."),
    ] = False,
    render: Annotated[
        bool, typer.Option("--render", help="Show the MuJoCo viewer at real-time pace.")
    ] = False,
    video: Annotated[
        Path | None,
        typer.Option("--video", metavar="OUT.mp4", help="Record offscreen to a video file."),
    ] = None,
    width: Annotated[int, typer.Option("--width", help="Video width in pixels.")] = 640,
    height: Annotated[int, typer.Option("--height", help="Video height in pixels.")] = 480,
    fps: Annotated[
        int | None, typer.Option("--fps", min=1, help="Video frame rate (default: the env's).")
    ] = None,
    env_id: Annotated[
        str | None,
        typer.Option("--env", metavar="ID", help="Run in another env with identical spaces."),
    ] = None,
    camera: Annotated[
        str,
        typer.Option(
            "--camera",
            metavar="VIEW",
            help="follow: track the robot; fixed: a still view; or a camera NAME of the model.",
        ),
    ] = "follow",
    allow_builder: AllowBuilderOption = None,
    allow_env_module: AllowEnvModuleOption = None,
) -> None:
    """Run a trained policy: print episode returns, show it, or record a video.

    The checkpoint's actor_semantics are checked against the environment and the rebuilt actor
    before any weight is loaded; observations use the checkpoint's frozen statistics.
    """

    def body() -> None:
        from drlcli.actors.memory import describe_memory
        from drlcli.checkpoints.policy import load_play_actor
        from drlcli.errors import UsageError
        from drlcli.evaluation import run_episodes
        from drlcli.play import play_in_window, record_video
        from drlcli.report import render_episodes

        if render and video is not None:
            raise UsageError("choose one of --render and --video")
        policy = load_play_actor(
            checkpoint,
            env_id=env_id,
            allow_builders=allow_builder or (),
            allow_env_modules=allow_env_module or (),
        )
        deterministic = not stochastic
        if video is not None:
            results, frames = record_video(
                policy, video, episodes, seed, deterministic, width, height, fps, camera
            )
            stderr.print(
                escape(f"wrote {video} ({frames} frames, {width}x{height})"), highlight=False
            )
            _add_to_run(checkpoint, video, "wandb")
        elif render:
            results = play_in_window(policy, episodes, seed, deterministic, camera)
        else:
            results = run_episodes(policy, episodes, seed, deterministic)
        mode = "deterministic transform(mean)" if deterministic else "stochastic explore"
        render_episodes(results, f"{policy.env_id}: {checkpoint} ({mode})", stdout)
        stdout.print(
            escape(f"inference memory: {describe_memory(policy.inference_memory)}"),
            highlight=False,
        )

    _run_command(body)


@app.command(epilog=_examples("export"))
def export(
    checkpoint: Annotated[Path, typer.Argument(metavar="CKPT", help="Checkpoint to export.")],
    output: Annotated[Path, typer.Argument(metavar="OUT.onnx", help="ONNX file to write.")],
    opset: Annotated[int, typer.Option("--opset", help="ONNX opset (17-23).")] = 18,
    allow_builder: AllowBuilderOption = None,
    allow_env_module: AllowEnvModuleOption = None,
) -> None:
    """Export the deterministic policy to ONNX, checked against torch with onnxruntime.

    The graph maps a raw observation (float32 [batch, obs_dim]) to the env action that
    deterministic `drl play` sends; normalisation and the action transform are inside. The file
    is written only if onnx.checker passes and onnxruntime matches torch within 1e-5.
    """

    def body() -> None:
        from drlcli.export import export_onnx
        from drlcli.report import render_export

        summary = export_onnx(
            checkpoint,
            output,
            opset=opset,
            allow_builders=allow_builder or (),
            allow_env_modules=allow_env_module or (),
        )
        render_export(summary, stdout)
        _add_to_run(checkpoint, output, "mlflow")

    _run_command(body)


def _checkpoint_config(checkpoint: Path) -> Any:
    """The config a checkpoint stores, or None (an older or foreign one)."""
    from drlcli.checkpoints.files import load_payload
    from drlcli.config import config_from_dict

    try:
        # As the checkpoint stores it: a run from before unread settings were refused loads too.
        stored = load_payload(checkpoint)["config"]
        return config_from_dict(stored, refuse_unread_settings=False)
    except Exception:
        return None


def _add_to_run(checkpoint: Path, output: Path, sink: str) -> None:
    """Add a file made from a checkpoint (``drl export``'s ONNX: MLflow; ``drl play
    --video``'s video: W&B) to the run that wrote it, when its config logs to ``sink`` and the
    package is here; a failure is a one-line warning (the file is written)."""
    config = _checkpoint_config(checkpoint)
    if config is None or getattr(config.logging, sink) is None:
        return
    if importlib.util.find_spec(sink) is None:
        return
    try:
        if sink == "mlflow":
            from drlcli.sinks.mlflow_sink import log_export as add
        else:
            from drlcli.sinks.wandb_sink import log_video as add
        run_id = add(config, output)
    except Exception as error:
        first = first_line(str(error), type(error).__name__)
        stderr.print(
            escape(f"warning: {output} is written; {sink} did not take it ({first})"),
            style="yellow",
        )
        return
    if run_id is not None:
        stdout.print(escape(f"{sink} run {run_id}: {output.name}"), highlight=False)


@app.command(epilog=_examples("verify"))
def verify(
    checkpoint: Annotated[Path, typer.Argument(metavar="CKPT", help="Checkpoint to audit.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Audit a checkpoint's actor_semantics schema and integrity.

    Runs without making the environment, starting Ray or importing custom builders. Exit 0 when
    every check passes (warnings allowed), 1 when one fails, 2 when the file cannot be read.
    """

    def body() -> None:
        from drlcli.checkpoints.audit import audit_checkpoint
        from drlcli.errors import CheckpointError, UsageError
        from drlcli.report import render_audit

        try:
            report = audit_checkpoint(checkpoint)
        except CheckpointError as error:
            raise UsageError(str(error)) from error  # unreadable: exit 2
        if as_json:
            print(report.to_json())
        else:
            render_audit(report, stdout)
        if report.failed:
            raise typer.Exit(1)

    _run_command(body)


@app.command(epilog=_examples("compare"))
def compare(
    paths: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_OR_FOLDER",
            help="Runs (a metrics CSV or checkpoint) or folders of runs; seeds of one config "
            "form a group, the first group is the reference.",
        ),
    ],
    plot: Annotated[
        Path,
        typer.Option(
            "--plot",
            help="PNG of the groups' evaluation curves with their bands (default under output/, "
            "where runs go, so a checkout stays clean).",
        ),
    ] = Path("output/compare.png"),
    json_path: Annotated[
        Path | None,
        typer.Option("--json", metavar="PATH", help="Write the figures as JSON too ('-': stdout)."),
    ] = None,
    reference: Annotated[
        str | None,
        typer.Option(
            "--reference",
            metavar="GROUP",
            help="The group the others are measured against (default: the first found).",
        ),
    ] = None,
) -> None:
    """Compare groups of seeds: median, IQM and intervals, P(improve), evaluation curves.

    Each group's final deterministic evaluation as median, IQM and 95% stratified-bootstrap
    intervals (Agarwal et al. 2021), the probability that a group improves on the first, and a
    PNG of the evaluation curves with their interval bands."""

    def body() -> None:
        from drlcli.compare import (
            compare_groups,
            group_seed_runs,
            with_reference,
            write_curves_png,
            write_json,
        )
        from drlcli.metrics.seed_runs import find_seed_runs
        from drlcli.report import render_comparison

        groups = group_seed_runs(find_seed_runs(paths))
        if reference is not None:
            groups = with_reference(groups, reference)
        reports = compare_groups(groups)
        console = stderr if json_path is not None and str(json_path) == "-" else stdout
        render_comparison(reports, console)
        write_curves_png(groups, plot)
        console.print(escape(f"curves: {plot}"), highlight=False, soft_wrap=True)
        if json_path is not None:
            write_json(reports, json_path)

    _run_command(body)


@app.command(epilog=_examples("dashboard"))
def dashboard(
    folders: Annotated[
        list[Path] | None,
        typer.Argument(metavar="DIR", help="Folders to find runs in (default: output)."),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Port to serve on.")] = 6007,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to serve on (default loopback only; another makes the runs visible "
            "to the network).",
        ),
    ] = "127.0.0.1",
) -> None:
    """Serve live learning curves of every run under the folders in the browser.

    Finds each run's metrics CSV (recursively), its checkpoints and videos; the page shows
    returns and any metric against env steps or wall time, overlays runs, groups seeds, and
    follows runs that are still training. Ctrl-C stops it.
    """

    def body() -> None:
        import time

        from drlcli.dashboard.server import page_is_built, start_dashboard

        roots = folders or [Path("output")]
        server = start_dashboard(roots, host=host, port=port)
        _announce_dashboard(server, host, page_is_built())
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:  # Ctrl-C is how a dashboard is stopped
            stderr.print("dashboard stopped")
        finally:
            server.shutdown()

    _run_command(body)


@app.command(epilog=_examples("tune"))
def tune(
    config_path: Annotated[
        Path, typer.Argument(metavar="CONFIG", help="The config every trial starts from.")
    ],
    space_path: Annotated[
        Path,
        typer.Argument(
            metavar="SPACE", help="YAML: 'space' (config key -> distribution) and 'search'."
        ),
    ],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", help="The search's folder (default: <output_dir>/search_<config name>)."
        ),
    ] = None,
    trials: Annotated[
        int | None, typer.Option("--trials", min=1, help="Trials (overrides search.trials).")
    ] = None,
    overrides: SetOption = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check CONFIG and SPACE, print the plan; start nothing."),
    ] = False,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the interrupted search in the folder, each trial from its last "
            "checkpoint.",
        ),
    ] = False,
    address: AddressOption = None,
    quiet: Annotated[
        bool, typer.Option("--quiet", help="No live table of the trials; the summary only.")
    ] = False,
) -> None:
    """Search hyper-parameters with Ray Tune; the winner is re-trained and written as a config.

    Trials of drl train as Ray Tune trials (Optuna's TPE, ASHA pruning at evaluation points, or
    population-based training), the best re-trained on fresh seeds, the winner written as a
    config drl train runs, and every trial in results.csv."""

    def body() -> None:
        from drlcli.report import render_search_plan
        from drlcli.tune.runner import prepare_search, require_tune, search_folder

        plan = prepare_search(
            _config_or_preset(config_path), space_path, trials, _overrides(overrides)
        )
        folder = output or search_folder(plan)
        if dry_run:
            render_search_plan(plan, folder, stdout)
            return
        require_tune(plan.settings.searcher)
        from drlcli.errors import SearchInterrupted
        from drlcli.report import render_search_summary
        from drlcli.tune.runner import run_search

        try:
            summary = run_search(plan, folder, resume=resume, address=address, quiet=quiet)
        except SearchInterrupted as stopped:
            again = ["drl", "tune", str(config_path), str(space_path), "--resume"]
            again += [f"--set={item}" for item in overrides or []]
            if output is not None:
                again += ["--output", str(output)]
            if trials is not None:
                again += ["--trials", str(trials)]
            stderr.print(
                escape(f"{stopped}; continue with: {shlex.join(again)}"),
                highlight=False,
                soft_wrap=True,
            )
            raise typer.Exit(stopped.exit_code) from None
        render_search_summary(summary, stdout)

    _run_command(body)


@app.command()
def doctor() -> None:
    """Check this machine for drl: versions, CUDA, rendering backends, the Ray cluster.

    Versions, CUDA, MuJoCo rendering backends and the Ray cluster at RAY_ADDRESS. One line per
    problem with its fix; exit 1 if drl train or drl play --video would fail here."""

    def body() -> None:
        from rich.table import Table

        from drlcli.doctor import diagnose

        diagnosis = diagnose()
        table = Table(title="drl doctor", show_header=False)
        table.add_column("what", style="bold")
        table.add_column("finding")
        for what, finding in diagnosis.facts:
            table.add_row(escape(what), escape(finding))
        stdout.print(table)
        for problem in diagnosis.problems:
            stderr.print(
                f"[bold red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True
            )
        if diagnosis.blocking:
            raise typer.Exit(1)
        if not diagnosis.problems:
            stdout.print("no problem found: drl train and drl play --video can run here")

    _run_command(body)


def _announce_dashboard(server: Any, host: str, built: bool) -> None:
    if host not in ("127.0.0.1", "localhost", "::1"):
        stderr.print(
            f"warning: serving on {escape(host)}: every run's metrics, config and videos are "
            "visible to the network",
            style="yellow",
        )
    if not built:
        stderr.print(
            "warning: the page is not built (run make setup, or cd web && npm ci && npm run "
            "build); the JSON API works",
            style="yellow",
        )
    stdout.print(f"drl dashboard: {server.url}", highlight=False)


def main() -> None:
    """Console-script entry point. A command line that click refuses (a missing argument, an
    unknown option, a value out of its range) is one line on stderr and exit 2, as drl's own
    errors are, not click's boxed usage."""
    try:
        code = app(prog_name="drl", standalone_mode=False)
    except typer.Abort:  # end of input where click read it
        sys.exit(1)
    except Exception as error:
        # click's own classes (typer vendors click from 0.22 on): known by name
        kinds = {cls.__name__ for cls in type(error).__mro__}
        if "NoArgsIsHelpError" in kinds:
            sys.exit(2)  # the help is printed already
        if "ClickException" not in kinds:
            raise
        stderr.print(escape(f"error: {usage_error_line(error)}"), highlight=False, soft_wrap=True)
        sys.exit(error.exit_code)  # type: ignore[attr-defined]
    sys.exit(code if isinstance(code, int) else 0)


def usage_error_line(error: Any) -> str:
    """A click error as drl says its own: ``drl play: missing argument 'CKPT' (drl play -h
    for help)``."""
    message = error.format_message().rstrip(".")
    if message[:2].istitle():  # "Missing argument", not "CKPT ..."
        message = message[0].lower() + message[1:]
    ctx = getattr(error, "ctx", None)
    if ctx is None:
        return message
    return f"{ctx.command_path}: {message} ({ctx.command_path} -h for help)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

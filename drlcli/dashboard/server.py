"""The dashboard's HTTP server: the built page (``static/``) and a JSON API over the runs.

    GET /                                  the page
    GET /static/<file>                     its assets
    GET /api/runs                          every run under the folders
    GET /api/runs/<id>/rows?offset=&generation=
                                           CSV rows after a byte offset (all, on a reset)
    GET /api/runs/<id>/details             config, actor semantics, drl verify audit, returns
    GET /api/runs/<id>/video/<name>        a video beside the run (byte ranges supported)
    GET /api/groups?runs=<id>,<id>...      per seed group of those runs: the IQM of their final
                                           evaluations and its 95% bootstrap interval
    POST /api/intervals {"points": [[...]]}
                                           per point of a curve, the 95% bootstrap interval of
                                           the seeds' mean (the page's seed-group bands)

Only files found under the given folders (real paths) and the page's own assets are served; a
malformed CSV is an error for that run (HTTP 422 with a message), never for the server. The
standard library's HTTP server, and scipy's bootstrap for the intervals.
"""

from __future__ import annotations

import errno
import json
import math
import mimetypes
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from drlcli.errors import UsageError
from drlcli.metrics.runs import MalformedCsv, Run, find_runs, read_rows

STATIC_DIR = Path(__file__).resolve().parent / "static"
DEFAULT_PORT = 6007
RUN_LIST_SECONDS = 1.0  # a rescan of the folders at most this often
MAX_BODY_BYTES = 8 << 20  # an intervals request: a curve's points, never this large
NOT_BUILT = (
    "<!doctype html><title>drl dashboard</title><p>The dashboard page is not built. Run "
    "<code>make setup</code>, or <code>cd web &amp;&amp; npm ci &amp;&amp; npm run build</code>, "
    "then reload. The JSON API is at <a href='/api/runs'>/api/runs</a>.</p>"
)


class RunIndex:
    """The runs under the roots, rescanned at most every ``RUN_LIST_SECONDS``."""

    def __init__(self, roots: list[Path]) -> None:
        self.roots = [root.resolve() for root in roots]
        self._lock = threading.Lock()
        self._runs: dict[str, Run] = {}
        self._scanned = 0.0

    def runs(self, fresh: bool = False) -> dict[str, Run]:
        with self._lock:
            now = time.monotonic()
            if fresh or now - self._scanned > RUN_LIST_SECONDS:
                self._runs = {run.id: run for run in find_runs(self.roots)}
                self._scanned = now
            return self._runs

    def get(self, identifier: str) -> Run | None:
        return self.runs().get(identifier) or self.runs(fresh=True).get(identifier)


def run_details(run: Run) -> dict[str, Any]:
    """Config, actor semantics, the ``drl verify`` audit (as ``drl verify --json``), returns."""
    from drlcli.checkpoints.audit import audit_checkpoint
    from drlcli.errors import DrlError

    details: dict[str, Any] = {
        **run.describe(),
        "config": None,
        "actor_semantics": None,
        "audit": None,
        "best_return": None,
        "progress": None,
        "checkpoint_error": None,
    }
    if run.checkpoint is None:
        details["checkpoint_error"] = "no checkpoint beside the metrics CSV"
        return details
    try:
        from drlcli.checkpoints.files import load_payload
        from drlcli.checkpoints.record import Checkpoint

        payload = load_payload(run.checkpoint)  # read once: for the audit and the fields
        details["audit"] = json.loads(audit_checkpoint(run.checkpoint, payload).to_json())
        checkpoint = Checkpoint.from_payload(payload, source=str(run.checkpoint))
        details["config"] = checkpoint.config
        details["actor_semantics"] = checkpoint.actor_semantics
        details["progress"] = {
            "round": checkpoint.progress.round,
            "env_steps": checkpoint.progress.env_steps,
            "wall_time_s": checkpoint.progress.wall_time_s,
        }
        details["best_return"] = checkpoint.progress.best_return
    except DrlError as error:
        details["checkpoint_error"] = " ".join(str(error).split())
    return details


# checkpoint path -> ((mtime_ns, size), summary): a poll reads a checkpoint only once it changed
_SUMMARIES: dict[Path, tuple[tuple[int, int], dict[str, Any]]] = {}


def run_summary(run: Run) -> dict[str, Any]:
    """What the runs table needs of a run's latest checkpoint: its config, progress and best
    return (None each without a readable checkpoint); read again only when the file changed."""
    from drlcli.checkpoints.files import load_payload
    from drlcli.checkpoints.record import Checkpoint
    from drlcli.errors import DrlError

    empty = {"config": None, "progress": None, "best_return": None, "best_criterion": None}
    path = run.checkpoint
    if path is None:
        return {**empty, "checkpoint_error": "no checkpoint beside the metrics CSV"}
    try:
        status = path.stat()
    except OSError as error:
        return {**empty, "checkpoint_error": str(error)}
    key = (status.st_mtime_ns, status.st_size)
    cached = _SUMMARIES.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    try:
        checkpoint = Checkpoint.from_payload(load_payload(path), source=str(path))
    except DrlError as error:
        return {**empty, "checkpoint_error": " ".join(str(error).split())}
    progress = checkpoint.progress
    summary = {
        "config": checkpoint.config,
        "progress": {
            "round": progress.round,
            "env_steps": progress.env_steps,
            "wall_time_s": progress.wall_time_s,
        },
        "best_return": progress.best_return,
        "best_criterion": progress.best_criterion,
        "checkpoint_error": None,
    }
    _SUMMARIES[path] = (key, summary)
    return summary


class DashboardHandler(BaseHTTPRequestHandler):
    """One request. The index is the server's (``self.server.index``)."""

    server_version = "drl-dashboard"
    index: RunIndex

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        """Quiet: a poll every second per run would flood the terminal."""

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_POST(self) -> None:  # noqa: N802
        try:
            if urlsplit(self.path).path != "/api/intervals":
                self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)
                return
            self._intervals()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as error:  # never let one request stop the server
            self._json(
                {"error": f"{type(error).__name__}: {error}"}, HTTPStatus.INTERNAL_SERVER_ERROR
            )

    def do_GET(self) -> None:  # noqa: N802
        try:
            self._route()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-answer
        except Exception as error:  # never let one request stop the server
            self._json(
                {"error": f"{type(error).__name__}: {error}"}, HTTPStatus.INTERNAL_SERVER_ERROR
            )

    def _route(self) -> None:
        url = urlsplit(self.path)
        raw_parts = url.path.split("/")
        parts = [unquote(part) for part in raw_parts if part]
        if any(
            part in ("..", ".") or "/" in part or "\\" in part or "\0" in part for part in parts
        ):
            self._json({"error": "path not allowed"}, HTTPStatus.FORBIDDEN)
            return
        index: RunIndex = self.server.index  # type: ignore[attr-defined]
        if not parts:
            self._page()
        elif parts[0] == "static" and len(parts) >= 2:
            self._static(parts[1:])
        elif parts == ["api", "runs"]:
            runs = index.runs()
            self._json(
                {
                    "roots": [str(root) for root in index.roots],
                    "runs": [run.describe() for run in runs.values()],
                }
            )
        elif parts == ["api", "groups"]:
            wanted = [i for i in parse_qs(url.query).get("runs", [""])[0].split(",") if i]
            runs = [run for identifier in wanted if (run := index.get(identifier)) is not None]
            from drlcli.metrics.seed_runs import group_statistics

            self._json({"groups": group_statistics(runs)})
        elif len(parts) >= 4 and parts[:2] == ["api", "runs"]:
            run = index.get(parts[2])
            if run is None:
                self._json({"error": f"no run {parts[2]!r}"}, HTTPStatus.NOT_FOUND)
            elif parts[3] == "rows" and len(parts) == 4:
                self._rows(run, parse_qs(url.query))
            elif parts[3] == "details" and len(parts) == 4:
                self._json(run_details(run))
            elif parts[3] == "summary" and len(parts) == 4:
                self._json(run_summary(run))
            elif parts[3] == "video" and len(parts) == 5:
                self._video(run, parts[4])
            else:
                self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)
        else:
            self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)

    def _rows(self, run: Run, query: dict[str, list[str]]) -> None:
        try:
            offset = int(query.get("offset", ["0"])[0])
        except ValueError:
            self._json({"error": "offset must be an integer"}, HTTPStatus.BAD_REQUEST)
            return
        generation = query.get("generation", [None])[0]
        try:
            chunk = read_rows(run.csv_path, offset, generation)
        except MalformedCsv as error:
            self._json({"error": f"{run.name}: {error}"}, HTTPStatus.UNPROCESSABLE_ENTITY)
            return
        except OSError as error:
            self._json({"error": f"{run.name}: {error.strerror}"}, HTTPStatus.NOT_FOUND)
            return
        self._json(chunk.to_json())

    def _intervals(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY_BYTES:
            self._json({"error": "a JSON body of points is needed"}, HTTPStatus.BAD_REQUEST)
            return
        try:
            points = json.loads(self.rfile.read(length))["points"]
            if not all(
                isinstance(values, list)
                and all(isinstance(v, int | float) and math.isfinite(v) for v in values)
                for values in points
            ):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            self._json(
                {"error": 'expected {"points": [[number, ...], ...]}'}, HTTPStatus.BAD_REQUEST
            )
            return
        from drlcli.seed_statistics import mean_intervals

        low, high = mean_intervals(points)
        self._json({"low": low, "high": high})

    def _page(self) -> None:
        page = STATIC_DIR / "index.html"
        if not page.is_file():
            self._send(NOT_BUILT.encode(), "text/html; charset=utf-8")
            return
        self._send(page.read_bytes(), "text/html; charset=utf-8")

    def _static(self, parts: list[str]) -> None:
        path = (STATIC_DIR / Path(*parts)).resolve()
        if not path.is_file() or STATIC_DIR not in path.parents:
            self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)
            return
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self._send(path.read_bytes(), kind)

    def _video(self, run: Run, name: str) -> None:
        videos = {path.name: path for path in run.videos}
        if name not in videos:
            self._json({"error": "not found"}, HTTPStatus.NOT_FOUND)
            return
        path = videos[name]
        size = path.stat().st_size
        start, end = 0, size - 1
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes=") :].partition("-")
            try:
                start = int(first) if first else max(0, size - int(last))
                end = min(int(last), size - 1) if first and last else end
            except ValueError:
                start, end = 0, size - 1
        if start > end or start >= size:
            self.send_response(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
            self.send_header("Content-Range", f"bytes */{size}")
            self.end_headers()
            return
        with path.open("rb") as handle:
            handle.seek(start)
            body = handle.read(end - start + 1)
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        status = HTTPStatus.PARTIAL_CONTENT if ranged else HTTPStatus.OK
        extra = {"Accept-Ranges": "bytes"}
        if ranged:
            extra["Content-Range"] = f"bytes {start}-{end}/{size}"
        self._send(body, kind, status, extra)

    def _json(self, data: Any, status: HTTPStatus = HTTPStatus.OK) -> None:
        self._send(json.dumps(data, allow_nan=False).encode(), "application/json", status)

    def _send(
        self,
        body: bytes,
        kind: str,
        status: HTTPStatus = HTTPStatus.OK,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class DashboardServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], index: RunIndex) -> None:
        super().__init__(address, DashboardHandler)
        self.index = index

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{shown}:{port}/"


def start_dashboard(
    roots: list[Path], host: str = "127.0.0.1", port: int = DEFAULT_PORT
) -> DashboardServer:
    """Serve the dashboard for ``roots`` from a background thread; returns the server
    (``.url``; ``.shutdown()`` stops it).

    Raises:
        UsageError: a folder that does not exist, or the port is taken.
    """
    missing = [str(root) for root in roots if not Path(root).is_dir()]
    if missing:
        raise UsageError(
            f"not a folder: {', '.join(missing)}; name the folders that hold your runs "
            "(drl train writes them to output_dir, default output)"
        )
    try:
        server = DashboardServer((host, port), RunIndex([Path(root) for root in roots]))
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is in use (another dashboard?); choose one with --port"
            ) from None
        raise UsageError(f"cannot serve on {host}:{port}: {error.strerror}") from None
    # shutdown() waits for the serving loop's next poll: 0.1 s instead of the default 0.5 s
    # (a dashboard's Ctrl-C, the end of `drl train --dashboard`).
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name="drl-dashboard",
        daemon=True,
    )
    thread.start()
    return server


def page_is_built() -> bool:
    return (STATIC_DIR / "index.html").is_file()

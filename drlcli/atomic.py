"""Atomic file replacement: write beside the target, then ``os.replace``.

Used for checkpoints, videos and ONNX files: a reader, or a crash at any moment, sees the
previous complete file or the new complete file, never a partial one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from drlcli.errors import StorageError


@functools.cache
def _default_mode() -> int:
    """The mode a plain new file gets here: 0o666 less the process's umask. Read from
    /proc where it can be (Linux): setting the umask to read it would, for that instant, make
    every file another thread creates (a metrics sink's) world-writable; elsewhere it is set
    and restored once, cached."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o077)  # the narrowest: a file made meanwhile is private, not open
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder; on success it replaces ``path``.

    The temporary file keeps ``path``'s suffix (writers that pick a format from it work) and is
    hidden (leading dot). On any exception, Ctrl-C included, it is removed and ``path`` is left
    untouched. The data and the rename are fsynced.

    Raises:
        StorageError: the folder cannot be written (permissions, a full disk: any OSError of
            the writes), naming ``path``.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, name = tempfile.mkstemp(
            prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent
        )
    except OSError as error:
        raise storage_error(path, error) from None
    os.close(handle)
    temp = Path(name)
    try:
        yield temp
        with open(temp, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temp, _default_mode())  # mkstemp creates 0600; give the file normal permissions
        os.replace(temp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise storage_error(path, error) from None
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def storage_error(path: str | Path, error: OSError) -> StorageError:
    """One line for a failed write of ``path``: the system's reason, and on a full disk the
    space left."""
    reason = error.strerror or str(error)
    if error.errno == errno.ENOSPC:
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(Path(path).parent).free
            reason += f" ({free / 2**20:.1f} MiB free there)"
    return StorageError(f"cannot write {path}: {reason}")


def check_writable(folder: str | Path, what: str) -> None:
    """Create ``folder`` if needed and a file in it, or raise StorageError naming ``what`` (the
    config field), before a run starts rather than at its first write."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise StorageError(
            f"{what}: cannot write in {folder}: {error.strerror or error}; choose a folder "
            "you can write to"
        ) from None


def remove_leftovers(path: str | Path) -> list[Path]:
    """Remove the temporary files ``atomic_output(path)`` leaves when its process is killed
    (SIGKILL, power loss) in the middle of a write; returns them. Call before writing ``path``
    again, from the one process that writes it."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    leftovers = sorted(path.parent.glob(f".{glob.escape(path.name)}.*{glob.escape(path.suffix)}"))
    for leftover in leftovers:
        leftover.unlink(missing_ok=True)
    return leftovers

"""Atomic file replacement: write beside the target, then ``os.replace``.

Used for checkpoints, videos and ONNX files: a reader, or a crash at any moment, sees the
previous complete file or the new complete file, never a partial one.
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path in ``path``'s folder; on success it replaces ``path``.

    The temporary file keeps ``path``'s suffix (writers that pick a format from it work) and is
    hidden (leading dot). On any exception, Ctrl-C included, it is removed and ``path`` is left
    untouched. The data and the rename are fsynced.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(handle)
    temp = Path(name)
    try:
        yield temp
        with open(temp, "rb+") as stream:
            os.fsync(stream.fileno())
        os.chmod(temp, _default_mode())  # mkstemp creates 0600; give the file normal permissions
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


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

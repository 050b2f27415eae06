"""Checkpoint files: written atomically with a content hash, read without running any code.

``write_checkpoint`` saves a ``Checkpoint`` with ``torch.save`` (``drlcli.atomic``: the old file
or the new one, never a part); ``load_payload`` reads the raw payload with ``weights_only=True``
only and says why a file is refused (missing, truncated, a pickle that would call code, another
format); ``read_checkpoint`` checks the content hash and the fields. drl's own commands read
with ``checkpoints.verified.read_verified_checkpoint``, which runs every check of ``drl
verify`` besides.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from drlcli.atomic import atomic_output
from drlcli.checkpoints.record import FORMAT_NAME, SUPPORTED_FORMAT_VERSIONS, Checkpoint
from drlcli.errors import CheckpointError

CONTENT_HASH = "content_hash"


def write_checkpoint(path: str | Path, checkpoint: Checkpoint) -> Path:
    """Write atomically (``drlcli.atomic``): the old or the new file, never a part."""
    return save_payload(path, checkpoint.to_payload())


def save_payload(path: str | Path, payload: Mapping[str, Any]) -> Path:
    """``torch.save`` a payload atomically (``write_checkpoint``'s lower half), with the
    ``content_hash`` of everything in it."""
    path = Path(path)
    contents = {key: value for key, value in payload.items() if key != CONTENT_HASH}
    # Serialised in memory first: torch's file writer reports a full disk as an obscure
    # RuntimeError, Python's as OSError ENOSPC (a StorageError from atomic_output).
    buffer = io.BytesIO()
    torch.save({**contents, CONTENT_HASH: content_hash(contents)}, buffer)
    with atomic_output(path) as temp:
        temp.write_bytes(buffer.getbuffer())
    return path


def content_hash(payload: Mapping[str, Any]) -> str:
    """BLAKE2b of a payload's structure and values (tensor bytes, dtypes, shapes, plain
    values), independent of how torch lays the file out: a flipped byte changes it."""
    digest = hashlib.blake2b(digest_size=16)

    def feed(value: Any, where: str) -> None:
        if isinstance(value, torch.Tensor):
            tensor = value.detach().cpu().contiguous()
            digest.update(f"{where}:{tensor.dtype}:{list(tensor.shape)}:".encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(value, Mapping):
            for key in sorted(value, key=str):
                feed(value[key], f"{where}.{key}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                feed(item, f"{where}[{index}]")
        else:
            digest.update(f"{where}={value!r};".encode())

    feed(payload, "")
    return digest.hexdigest()


def check_content_hash(payload: Mapping[str, Any]) -> bool:
    """Whether the payload matches the hash stored with it (False also when none is: drl
    writes one into every checkpoint)."""
    stored = payload.get(CONTENT_HASH)
    if stored is None:
        return False
    contents = {key: value for key, value in payload.items() if key != CONTENT_HASH}
    return stored == content_hash(contents)


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint without running any code from it, after checking its content hash
    and fields only: for tools and tests that inspect files drl wrote. drl's own commands
    (resume, play, export) read with ``verified.read_verified_checkpoint``, which also runs every
    check of ``drl verify``.

    Raises:
        CheckpointError: see ``load_payload``; contents that do not match the stored hash
            (corrupted after writing); a field missing or of the wrong type.
    """
    payload = load_payload(path)
    if not check_content_hash(payload):
        raise corrupted_error(path, payload)
    return Checkpoint.from_payload(payload, source=str(path))


def corrupted_error(path: str | Path, payload: Mapping[str, Any]) -> CheckpointError:
    """The error of a payload ``check_content_hash`` refuses."""
    if payload.get(CONTENT_HASH) is None and {"format_version", "actor_semantics"} <= set(payload):
        return CheckpointError(
            f"{path}: written by an older drl, before every checkpoint carried a content hash: "
            "its integrity cannot be checked and the format has no migration; train again "
            "with this drl (drl train CONFIG)"
        )
    if payload.get(CONTENT_HASH) is None:
        return CheckpointError(
            f"{path}: carries no content hash, which drl writes into every checkpoint: the file "
            "is damaged or was not written by drl; use another checkpoint"
        )
    return CheckpointError(
        f"{path}: corrupted: its contents do not match the content hash written with it (a "
        "changed byte, a damaged copy); use another checkpoint"
    )


def load_payload(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint file's raw payload without running any code from it (``drl verify``
    audits it field by field; everything else reads a ``Checkpoint``).

    Raises:
        CheckpointError: missing path, directory, empty/truncated/non-torch file, a pickle that
            would run code, or a file that is not a drl checkpoint of a supported version.
    """
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: checkpoint not found")
    if path.is_dir():
        raise CheckpointError(f"{path}: is a directory, expected a checkpoint file (.pt)")
    if path.stat().st_size == 0:
        raise CheckpointError(f"{path}: checkpoint file is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's notes on pickle protocols: not the user's
            payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        unsafe = _unsafe_global(str(error)) or _pickled_callable(path)
        if unsafe is not None:
            raise CheckpointError(
                f"{path}: refused to load: unpickling it would call {unsafe}, which is code, "
                "not data; drl checkpoints hold only tensors and plain data. Do not load this "
                "file with torch.load(weights_only=False) unless you made it yourself"
            ) from error
        raise CheckpointError(  # garbage bytes, not a code-running object
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): "
            f"UnpicklingError: {_unpickler_reason(str(error))}"
        ) from error
    except Exception as error:  # torch raises many types for garbage input; all mean the same
        reason = f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
        raise CheckpointError(
            f"{path}: not a readable torch checkpoint (truncated or corrupt?): {reason}"
        ) from error
    if not isinstance(payload, dict) or not _is(payload.get("format"), str, FORMAT_NAME):
        raise CheckpointError(f"{path}: not a drl checkpoint (no format '{FORMAT_NAME}')")
    version = payload.get("format_version")
    if not any(_is(version, int, supported) for supported in SUPPORTED_FORMAT_VERSIONS):
        raise CheckpointError(
            f"{path}: checkpoint format version {version!r} is not supported by this drl "
            f"(supported: {list(SUPPORTED_FORMAT_VERSIONS)})"
        )
    return payload


def _is(value: Any, kind: type, expected: Any) -> bool:
    """``value == expected`` for a value of exactly ``kind`` (a tensor or a bool is not)."""
    return type(value) is kind and value == expected


def _unsafe_global(message: str) -> str | None:
    """The callable a refused pickle asks for (``posix.system``), from torch's message."""
    match = re.search(r"GLOBAL ([\w.]+)", message)
    return match.group(1) if match else None


def _pickled_callable(path: Path) -> str | None:
    """The first module-level callable a plain pickle names (``posix.system``), read with
    ``pickletools`` (which runs nothing), or None. Torch's own zip files are not scanned."""
    import pickletools
    import zipfile

    if zipfile.is_zipfile(path):
        return None
    strings: list[str] = []
    try:
        for opcode, argument, _ in pickletools.genops(path.read_bytes()):
            if opcode.name == "GLOBAL":
                return str(argument).replace(" ", ".")
            if opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                return f"{strings[-2]}.{strings[-1]}"
            if isinstance(argument, str):
                strings.append(argument)
    except Exception:  # not a pickle at all: garbage, not an attack to name
        return None
    return None


def _unpickler_reason(message: str) -> str:
    """The one useful sentence of torch's long weights-only refusal, without its advice to
    load with ``weights_only=False``."""
    detail = message.split("trusted source.", 1)[-1]
    detail = detail.split("WeightsUnpickler error:", 1)[-1]
    detail = detail.split("Check the documentation")[0].split(". Please use")[0]
    return " ".join(detail.split())[:160]

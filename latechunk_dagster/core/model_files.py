"""A model directory's files, checked before anything loads them, so that a model that cannot load
is one error naming the directory and the file (issue 39 D9), not a library's traceback.

Two kinds of file break a load deep inside transformers, safetensors or vLLM:

- a **Git LFS pointer** in place of the file: a repository cloned without ``git lfs`` holds, for
  each large file, a text file of three lines (``version https://git-lfs.github.com/spec/v1``,
  ``oid sha256:...``, ``size ...``; the pointer format of
  https://github.com/git-lfs/git-lfs/blob/main/docs/spec.md, under 1024 bytes). safetensors reads
  its first 8 bytes as a header length and fails with "header too large";
- a file that is **not what its name says**: a ``*.json`` that does not parse, a ``*.safetensors``
  whose header (8 bytes of little-endian length, then that many bytes of JSON: the safetensors
  format, https://github.com/huggingface/safetensors#format) does not fit the file.

:func:`check_model_files` runs on every model directory before it loads (the model card's read and
each in-process engine's start); it reads the small files and the safetensors headers only.
:func:`read_json` reads a configuration file. :func:`load_error` turns a library's failure to load
the directory into the same kind of error, naming the file where one does not parse.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from latechunk_dagster.core.errors import ModelNotSupportedError

#: The first bytes of a Git LFS pointer file, and the size under which every pointer lies (the spec above).
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX_BYTES = 1024
#: Weight files (what an engine loads); the other files (configuration, tokenizer) every load reads.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def model_files(path: Path) -> list[Path]:
    """Every file under ``path``, outside hidden folders (``.git``, ``.cache``), sorted."""
    return sorted(
        f for f in path.rglob("*") if f.is_file() and not any(p.startswith(".") for p in f.relative_to(path).parts)
    )


def check_model_files(path: str | Path, *, weights: bool) -> None:
    """Refuse a model directory holding a Git LFS pointer for a file, or (``weights``) a safetensors
    file whose header does not fit it. Reads files under 1024 bytes and the safetensors headers.

    Args:
        weights: check the weight files too (an in-process engine loads them; a vLLM server engine
            needs only the configuration and the tokenizer here).

    Raises:
        ModelNotSupportedError: ``"{path}: {file} is a Git LFS pointer ..."`` or
            ``"{path}: {file} is not a safetensors file ..."``.
    """
    path = Path(path)
    if not path.is_dir():
        return
    for f in model_files(path):
        if f.name.endswith(WEIGHT_SUFFIXES) and not weights:
            continue
        name = f.relative_to(path)
        size = f.stat().st_size
        if size < LFS_POINTER_MAX_BYTES and f.read_bytes().startswith(LFS_POINTER_PREFIX):
            raise ModelNotSupportedError(
                f"{path}: {name} is a Git LFS pointer ({size} bytes), not the file: the model was cloned "
                f"without Git LFS; run `git lfs pull` in its repository, or download the file"
            )
        if f.suffix == ".safetensors":
            _check_safetensors_header(path, f, size)


def _check_safetensors_header(path: Path, file: Path, size: int) -> None:
    with file.open("rb") as fh:
        head = fh.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
        ok = length is not None and 8 + length <= size
        if ok:
            try:
                ok = isinstance(json.loads(fh.read(length)), dict)
            except (ValueError, UnicodeDecodeError):
                ok = False
    if not ok:
        raise ModelNotSupportedError(
            f"{path}: {file.relative_to(path)} is not a safetensors file ({size} bytes; its header does not fit "
            "it): a truncated or corrupted download"
        )


def read_json(path: Path, file: Path, kind: type = dict) -> Any:
    """The JSON value of the model file ``file`` (of the model directory ``path``); ``kind()`` (empty)
    where the file is not there.

    Raises:
        ModelNotSupportedError: ``"{path}: {file} is not JSON (...)"``, or not a JSON ``kind``.
    """
    if not file.is_file():
        return kind()
    try:
        value = json.loads(file.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise ModelNotSupportedError(f"{path}: {file.relative_to(path)} is not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise ModelNotSupportedError(
            f"{path}: {file.relative_to(path)} holds a JSON {type(value).__name__}, not a JSON "
            f"{'object' if kind is dict else 'array'}"
        )
    return value


def load_error(path: str | Path, what: str, exc: BaseException) -> ModelNotSupportedError:
    """The error for a library (``what``: "the tokenizer", "transformers 5.0") that failed to load the
    model directory ``path``: the first JSON file of it that does not parse, named (the usual cause),
    else the library's own reason, its first line."""
    path = Path(path)
    if path.is_dir():
        for f in model_files(path):
            if f.suffix == ".json":
                try:
                    json.loads(f.read_bytes())
                except (ValueError, UnicodeDecodeError) as bad:
                    return ModelNotSupportedError(f"{path}: {f.relative_to(path)} is not JSON ({bad})")
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ModelNotSupportedError(f"{path}: {what} could not load the model: {type(exc).__name__}: {reason}")

"""The demo document store, built at run time from the docstrings of the Python standard library.

No text is committed: every Python ships its own. One document per public standard-library module
(``sys.stdlib_module_names``): the module docstring, then the docstrings of the public classes
(each followed by its public methods) and functions defined in that module, each preceded by a
header line (``Class json.JSONDecoder:``, ``Method json.JSONDecoder.decode():``,
``Function json.dumps():``), separated by blank lines.

Output: ``<out>/<shard>.jsonl`` for every shard of :data:`DEMO_SHARDS` (a shard with no module is
an empty file, so the partition keys never change), rows ``{"id": "<module>", "text": "..."}``
sorted by id. Read it back with ``DocumentStore.from_path(out)``.

The modules are imported in a separate ``python -S`` process (no site-packages, fixed hash
seed), so the calling process (a Dagster process hosting a vLLM engine) is not polluted by them.
Only the standard library is imported here: the child process loads this file by path.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Shard name -> first letters of the module names in it. Hard-coded so the partition keys are the
#: same on every Python build; chosen to balance characters and modules per shard on CPython 3.11
#: ("s" is the largest: a first letter cannot be split).
SHARD_LETTERS: dict[str, str] = {
    "a": "a",
    "b": "b",
    "c": "c",
    "d-e": "de",
    "f-g": "fg",
    "h-k": "hijk",
    "l-o": "lmno",
    "p": "p",
    "q-r": "qr",
    "s": "s",
    "t": "t",
    "u-z": "uvwxyz",
}

#: The partition keys of the demo store, sorted.
DEMO_SHARDS: list[str] = sorted(SHARD_LETTERS)

#: Modules never imported: side effects on import, GUI toolkits, the IDE, test packages.
SKIPPED_MODULES = frozenset(
    {"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "xxlimited", "xxsubtype"}
)

MIN_CHARS = 200  # modules whose document is shorter are left out
IMPORT_TIMEOUT_S = 2.0  # per module, in the child process
BUILD_TIMEOUT_S = 600.0  # the whole child process

_LETTER_TO_SHARD = {letter: shard for shard, letters in SHARD_LETTERS.items() for letter in letters}
_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+>")  # "<object at 0x7f..>" in reprs: differs per process


def shard_of(module: str) -> str:
    """Shard name of a module name (by its first letter, case-insensitive)."""
    try:
        return _LETTER_TO_SHARD[module[:1].lower()]
    except KeyError:
        raise ValueError(f"module name {module!r} does not start with a letter a-z") from None


def candidate_modules(modules: Iterable[str] | None = None) -> list[str]:
    """Sorted module names worth importing: ``modules`` (default ``sys.stdlib_module_names``)
    minus private names (leading underscore), :data:`SKIPPED_MODULES` and test packages."""
    names = sys.stdlib_module_names if modules is None else modules
    return sorted(
        {
            name
            for name in names
            if name
            and not name.startswith("_")
            and name.split(".")[0] not in SKIPPED_MODULES
            and not name.split(".")[-1].startswith("test")
        }
    )


def build_demo_store(out_dir: Path, *, max_modules: int | None = None, modules: Iterable[str] | None = None) -> Path:
    """Write the demo store into ``out_dir`` (created if needed) and return ``out_dir``.

    Args:
        out_dir: directory for the ``<shard>.jsonl`` files.
        max_modules: keep only the first N names of :func:`candidate_modules` (sorted order),
            before the import and length filters; ``None`` for all.
        modules: module names to use instead of ``sys.stdlib_module_names`` (same filters).

    Idempotent: a shard file is rewritten (atomically) only when its content changed, so the
    fingerprints of unchanged shards stay the same. Other files in ``out_dir`` are left alone.

    Raises:
        RuntimeError: the child process failed or timed out.
    """
    names = candidate_modules(modules)
    if max_modules is not None:
        names = names[:max_modules]
    docs = _extract_in_subprocess(names)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for shard in DEMO_SHARDS:
        rows = [{"id": name, "text": docs[name]} for name in sorted(docs) if shard_of(name) == shard]
        content = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
        _write_if_changed(out_dir / f"{shard}.jsonl", content)
    return out_dir


def _write_if_changed(path: Path, content: bytes) -> None:
    if path.is_file() and path.read_bytes() == content:
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(content)
    os.replace(tmp, path)


def _extract_in_subprocess(names: list[str]) -> dict[str, str]:
    """Run :func:`_child_main` in a fresh ``python -S -P`` and return {module: document}."""
    code = (
        "import importlib.util, sys\n"
        "spec = importlib.util.spec_from_file_location('_latechunk_demo_corpus', sys.argv[1])\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "sys.modules[spec.name] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "mod._child_main(sys.argv[2], sys.argv[3])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory(prefix="latechunk-demo-") as tmp:
        names_file, out_file = Path(tmp, "names.json"), Path(tmp, "docs.json")
        names_file.write_text(json.dumps(names), encoding="utf-8")
        cmd = [sys.executable, "-S", "-P", "-c", code, str(Path(__file__).resolve()), str(names_file), str(out_file)]
        try:
            proc = subprocess.run(
                cmd,
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=BUILD_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"demo corpus extraction timed out after {BUILD_TIMEOUT_S:.0f} s") from exc
        if proc.returncode != 0 or not out_file.is_file():
            tail = proc.stderr.decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"demo corpus extraction failed (exit {proc.returncode}): {tail}")
        return json.loads(out_file.read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- child process side


class _ImportTimeout(Exception):
    pass


def _child_main(names_file: str, out_file: str) -> None:
    """Child entry point: import each module quietly, write {module: document} as JSON."""
    names = json.loads(Path(names_file).read_text(encoding="utf-8"))
    warnings.simplefilter("ignore")
    docs = {}
    for name in names:
        module = _quiet_import(name)
        if module is None:
            continue
        try:
            text = module_document(module)
        except Exception:
            continue
        if len(text) >= MIN_CHARS and _is_utf8(text):
            docs[name] = text
    Path(out_file).write_text(json.dumps(docs, ensure_ascii=False, sort_keys=True), encoding="utf-8")


def _quiet_import(name: str) -> object | None:
    """The imported module, or None if the import failed, printed anything or took too long."""

    def on_alarm(signum: int, frame: object) -> None:
        raise _ImportTimeout(name)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    try:
        signal.setitimer(signal.ITIMER_REAL, IMPORT_TIMEOUT_S)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(name)
    except (Exception, SystemExit):  # _ImportTimeout included
        return None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if out.getvalue() or err.getvalue() or time.monotonic() - start > IMPORT_TIMEOUT_S:
        return None
    return module


def module_document(module: object) -> str:
    """The document of one imported module: its docstring, then its public classes (with their
    public methods) and functions, each after a header line; parts separated by blank lines."""
    name = module.__name__
    parts = [_clean(inspect.getdoc(module))]
    for member_name, obj in _own_members(module):
        if inspect.isclass(obj):
            parts.extend(_class_parts(f"{name}.{member_name}", obj))
        else:
            doc = _clean(inspect.getdoc(obj))
            if doc:
                parts.append(f"Function {name}.{member_name}():\n{doc}")
    return _ADDRESS.sub(">", "\n\n".join(part for part in parts if part))


def _own_members(module: object) -> Iterator[tuple[str, object]]:
    """(name, object) of the public classes and functions defined in the module (or, for a package,
    in its submodules; or in its ``_name`` C accelerator), sorted by name, each object once."""
    name = module.__name__
    is_package = hasattr(module, "__path__")
    seen: set[int] = set()
    for member_name, obj in sorted(vars(module).items()):
        if member_name.startswith("_") or not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        owner = getattr(obj, "__module__", None) or ""
        own = owner in (name, f"_{name}") or (is_package and owner.startswith(f"{name}."))
        if own and id(obj) not in seen:
            seen.add(id(obj))
            yield member_name, obj


def _class_parts(qualname: str, cls: type) -> list[str]:
    """Header + own docstring of a class (not a base class's), then its documented public methods."""
    own_doc = cls.__dict__.get("__doc__")
    parts = [f"Class {qualname}:\n{_clean(own_doc)}" if isinstance(own_doc, str) and own_doc.strip() else ""]
    for attr_name, attr in sorted(vars(cls).items()):
        if attr_name.startswith("_"):
            continue
        if isinstance(attr, (classmethod, staticmethod)):
            attr = attr.__func__
        if not inspect.isroutine(attr):
            continue
        try:
            doc = _clean(inspect.getdoc(getattr(cls, attr_name)))
        except Exception:
            doc = _clean(inspect.getdoc(attr))
        if doc:
            parts.append(f"Method {qualname}.{attr_name}():\n{doc}")
    if not parts[0] and len(parts) > 1:
        parts[0] = f"Class {qualname}:"
    return [part for part in parts if part]


def _clean(doc: str | None) -> str:
    return doc.strip() if isinstance(doc, str) else ""


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

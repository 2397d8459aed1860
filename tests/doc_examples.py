"""The examples of the README and of the guides in ``docs/``, found by name for the tests that run them.

An example is the fenced block right after a ``<!-- example: NAME -->`` line, in ``README.md`` or
any ``docs/*.md``. Names are unique across those files (``tests/test_readme.py`` asserts it), so a
test names the example, not the file: moving an example between the README and a guide changes
no test.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from latechunk_dagster import LateChunker

ROOT = Path(__file__).resolve().parents[1]

#: A marker line and the fenced block that follows it (its language tag is optional).
EXAMPLE = re.compile(r"^<!-- example: (?P<name>[^\n]+?) -->\n```[\w.+-]*\n(?P<body>.*?)^```", re.S | re.M)
#: Any marker line (alone on its line), followed by a block or not (a missing block is an error).
MARKER = re.compile(r"^<!-- example: (?P<name>[^\n]+?) -->$", re.M)


def documents() -> list[Path]:
    """What a user reads: ``README.md`` and every ``docs/*.md``, README first."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples() -> dict[str, tuple[Path, str]]:
    """Every example: name -> (the file holding it, the block's text without its fences).

    Raises:
        AssertionError: a name given twice (naming both files), or a marker not followed by a
            fenced block (naming the file and the example).
    """
    found: dict[str, tuple[Path, str]] = {}
    for path in documents():
        text = path.read_text(encoding="utf-8")
        blocks = {m["name"]: m["body"] for m in EXAMPLE.finditer(text)}
        for name in MARKER.findall(text):
            assert name in blocks, f"{path.relative_to(ROOT)}: the example {name!r} has no fenced block right after it"
            assert name not in found, (
                f"the example {name!r} is in both {found[name][0].relative_to(ROOT)} and {path.relative_to(ROOT)}"
            )
            found[name] = (path, blocks[name])
    return found


def example(name: str) -> str:
    """The text of the example ``name`` (the fenced block after ``<!-- example: name -->``).

    Raises:
        AssertionError: no such example in ``README.md`` or ``docs/*.md``.
    """
    found = examples()
    assert name in found, f"no example {name!r} in README.md or docs/*.md"
    return found[name][1]


def lend_engine(monkeypatch: pytest.MonkeyPatch, chunker: LateChunker) -> None:
    """Let an example's ``LateChunker(model)`` (imported from ``latechunk_dagster``) hand back
    ``chunker``, the test module's real engine: vLLM runs one in-process engine per process, so an
    example run in the tests' process cannot start its own. Not a fake: the example must ask for the
    chunker's own model and nothing else (asserted), and every call it makes reaches the real engine.
    """
    import latechunk_dagster

    @contextlib.contextmanager
    def shared(model: object, **kwargs: object) -> Iterator[LateChunker]:
        assert Path(str(model)).resolve() == Path(chunker.card.path).resolve() and not kwargs, (model, kwargs)
        yield chunker

    monkeypatch.setattr(latechunk_dagster, "LateChunker", shared)

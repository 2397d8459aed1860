"""Examples of the guides in ``docs/`` that no subject's test module runs: run as written, on the real engine.

docs/pipeline.md's ``chunker.py`` (the chunker without an orchestrator) prints what the guide shows
under it (``chunker.py output``), line for line: the engine path, the vector shape and dtype, each
chunk's token and character ranges and text.
"""

from __future__ import annotations

import ast
import re

import pytest

from latechunk_dagster import LateChunker
from tests.doc_examples import example, lend_engine


def test_chunker_example_prints_what_the_pipeline_guide_shows(
    chunker: LateChunker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lend_engine(monkeypatch, chunker)
    exec(example("chunker.py"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == example("chunker.py output").splitlines()
    # each chunk line's text is the input's own characters at the char range it shows, and the token
    # ranges tile the document (the example's text, read from the example itself)
    text = ast.literal_eval(re.search(r"\[(\"Acme[^\"]*\")\]", example("chunker.py"))[1])
    chunks = [re.fullmatch(r"(\d+) (\(\d+, \d+\)) (\(\d+, \d+\)) (.*)", line) for line in printed[1:-1]]
    assert all(chunks) and len(chunks) == 3
    tokens = [ast.literal_eval(m[2]) for m in chunks]
    assert tokens[0][0] == 0 and all(a[1] == b[0] for a, b in zip(tokens, tokens[1:]))
    for m in chunks:
        start, end = ast.literal_eval(m[3])
        assert text[start:end] == ast.literal_eval(m[4])

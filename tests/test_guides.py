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


def test_a_python_example_run_as_a_file_prints_no_engine_info_log(tmp_path) -> None:  # noqa: ANN001
    """Issue 40.5: the Python examples printed 35 lines of vLLM INFO log around their 3 result lines.
    The chunker example, saved and run as a file with no VLLM_LOGGING_LEVEL set: vLLM logs errors only
    (the package's default; issue 51.5: 13 WARNING lines at the former default, 5 of them one line), and
    the example's own lines are printed as the guide shows them."""
    import os
    import subprocess
    import sys

    (tmp_path / "example.py").write_text(example("chunker.py"))
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_LEVEL"}
    out = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
    )
    assert out.returncode == 0, out.stderr
    lines = (out.stdout + out.stderr).splitlines()
    assert [line for line in lines if re.search(r"\b(INFO|WARNING)\b", line)] == []
    printed = [line for line in out.stdout.splitlines() if not line.startswith("(")]  # vLLM's: "(MainProcess pid=..."
    assert printed == example("chunker.py output").splitlines()


def test_a_bucket_of_documents_example_prints_what_the_documents_guide_shows(
    chunker: LateChunker, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path
) -> None:  # noqa: ANN001
    """docs/documents.md's ``bucket_of_documents.py``, run as written against a moto S3 bucket holding
    the files the guide describes (credentials and endpoint from ``AWS_*``, as the guide says): it
    prints the guide's lines, and every hit it shows is its chunk's text (the example asserts it)."""
    import boto3

    from tests.document_files import html_page, pdf_bytes
    from tests.servers import s3_bucket
    from tests.test_converted_materialization import PDF_PAGES

    files = {
        "library/tea/tea.html": html_page(
            "Tea", [(1, "Tea", "Green tea is steamed."), (2, "Storage", "Keep it dry and dark.")]
        ).encode(),
        "library/pumps/report.pdf": pdf_bytes(PDF_PAGES, outline=[(1, "Pumps in Rotterdam", 0), (2, "Maintenance", 1)]),
        "library/pumps/scan.pdf": pdf_bytes([["scanned words"]], text_layer=False),
    }
    with s3_bucket("my-documents") as (srv, _):
        client = boto3.client(
            "s3", endpoint_url=srv.url, aws_access_key_id="t", aws_secret_access_key="t", region_name="us-east-1"
        )
        for key, body in files.items():
            client.put_object(Bucket="my-documents", Key=key, Body=body)
        monkeypatch.setenv("AWS_ENDPOINT_URL", srv.url)
        monkeypatch.chdir(tmp_path)
        lend_engine(monkeypatch, chunker)
        exec(example("bucket_of_documents.py"), {})
    printed = capsys.readouterr().out.splitlines()
    assert printed == example("bucket_of_documents.py output").splitlines()

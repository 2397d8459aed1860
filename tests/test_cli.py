"""The `latechunk` command: clear one-line errors, no side effects before a search can run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(args: list[str], home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "LATECHUNK_HOME": str(home), "HF_HUB_OFFLINE": "1", **env}
    environ.pop("DAGSTER_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "latechunk_dagster.app.cli", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_search_before_any_materialization_is_one_line_and_touches_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    out = run_cli(["search", "gzip"], home)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("latechunk search: error: no table 'chunks'")
    assert "Traceback" not in out.stderr
    assert not home.exists()  # a read-only command creates no directories


def test_sync_partitions_with_a_missing_store_is_one_line(tmp_path: Path) -> None:
    out = run_cli(["sync-partitions"], tmp_path / "home", LATECHUNK_DOCUMENT_STORE=str(tmp_path / "nope"))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "latechunk sync-partitions: error:" in out.stderr and "nope" in out.stderr


def test_sync_partitions_adds_the_stores_shards(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "a").mkdir(parents=True)
    (store / "a" / "x.txt").write_text("hello")
    (store / "b.txt").write_text("root file")
    out = run_cli(["sync-partitions"], tmp_path / "home", LATECHUNK_DOCUMENT_STORE=str(store))
    assert out.returncode == 0, out.stderr
    assert "added ['_root', 'a']" in out.stdout


def test_search_arguments_are_checked_before_the_model_loads(tmp_path: Path) -> None:
    """From a user trial: `-k 0`, an empty query and a bad filter failed only after the model loaded
    (with LanceDB's wording); `--uri/--table` reach a user's own table."""
    import lancedb

    from latechunk_dagster.sink import REJECTED_SCHEMA, chunk_schema

    db = tmp_path / "db"
    lancedb.connect(str(db)).create_table("mine", schema=chunk_schema(384))
    lancedb.connect(str(db)).create_table("rejected_documents", schema=REJECTED_SCHEMA)
    for args, message in (
        (["search", "pumps", "--uri", str(db), "--table", "nope"], "no table 'nope'"),
        (
            ["search", "pumps", "--uri", str(db), "--table", "rejected_documents"],
            "table 'rejected_documents' is not a chunk table (no vector, model_sha256",
        ),
        (
            ["search", "pumps", "--uri", str(db), "--table", "mine", "--dimensions", "100"],
            "holds 384-dimensional vectors, not --dimensions 100",
        ),
        (["search", "pumps", "--uri", str(db), "--table", "mine", "-k", "0"], "-k must be >= 1"),
        (["search", "  ", "--uri", str(db), "--table", "mine"], "the query is empty"),
        (["search", "\x01\x02", "--uri", str(db), "--table", "mine"], "the query is empty"),
        (["search", "pumps", "--uri", str(tmp_path / "gone")], "no table 'chunks' at " + str(tmp_path / "gone")),
        (["search", "pumps", "--uri", str(db), "--table", "mine", "--where", "nope = 'a'"], "bad --where filter"),
    ):
        out = run_cli(args, tmp_path / "home")
        assert out.returncode == 2, out.stderr
        assert "Traceback" not in out.stderr and message in out.stderr.strip().splitlines()[-1], out.stderr


def single_strategy_row(dim: int) -> object:
    """One row of a single strategy's chunk table (``granularity`` ``""``), as the pipeline writes it."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from latechunk_dagster.sink import chunk_schema

    schema = chunk_schema(dim)
    row: dict[str, object] = {f.name: None for f in schema}
    row |= {"chunk_id": "c", "doc_id": "d", "partition": "p", "chunk_index": 0, "token_start": 0, "token_end": 1}
    row |= {"vector": [0.0] * dim, "doc_sha256": "s", "doc_tokens": 1, "windows": 1, "id": "c", "granularity": ""}
    strings = ["model_name", "model_sha256", "head", "opt_ins", "strategy", "strategy_params", "engine_path"]
    row |= {k: "x" for k in [*strings, "vllm_version", "package_version", "run_id"]}
    row |= {"materialized_at": datetime(2026, 12, 4, tzinfo=UTC)}
    return pa.Table.from_pylist([row], schema=schema)


def test_search_on_a_definition_of_granularities_names_them(tmp_path: Path) -> None:
    """From a user trial: after the demo (tables chunks_sentences32, chunks_sentences128) a plain
    search, or a misspelt --granularity, said only "materialize the chunk asset first"."""
    import lancedb

    from latechunk_dagster.sink import chunk_schema

    db = tmp_path / "db"
    for name in ("chunks_small", "chunks_large"):
        lancedb.connect(str(db)).create_table(name, schema=chunk_schema(384))
    # issue 40: the README's own Dagster table beside them, a single strategy's (its rows say granularity ""):
    # not listed as a granularity of 'chunks', and --granularity minilm is refused naming what its rows say
    lancedb.connect(str(db)).create_table("chunks_minilm", data=single_strategy_row(384))
    out = run_cli(["search", "pumps", "--uri", str(db), "--granularity", "minilm"], tmp_path / "home")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.endswith(
        "table 'chunks_minilm' is not granularity 'minilm' of 'chunks': its rows say granularity '' "
        "(another table definition's table; tables of granularities of 'chunks': large, small)"
    ), out.stderr
    for args in (["search", "pumps", "--uri", str(db)], ["search", "pumps", "--uri", str(db), "--granularity", "tiny"]):
        out = run_cli(args, tmp_path / "home")
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert (
            out.stderr.strip()
            .splitlines()[-1]
            .endswith("'chunks' is a table definition of granularities large, small: pass --granularity NAME")
        ), out.stderr


def test_an_empty_or_control_character_query_is_refused_by_the_api(chunker: object) -> None:
    """search("") embedded the special tokens alone and returned hits (user trial); now refused by name."""
    import pytest

    from latechunk_dagster.core.errors import InvalidQueryError

    for query in ("", "   ", "\x00", "\x01\x02"):
        with pytest.raises(InvalidQueryError, match="the query is empty"):
            chunker.embed_queries([query])  # type: ignore[attr-defined]


def broken_model(minilm: Path, folder: Path, file: str, content: bytes) -> Path:
    """The shipped model with one file replaced by ``content`` (the others linked, not copied)."""
    folder.mkdir(parents=True)
    for f in minilm.iterdir():
        (folder / f.name).symlink_to(f)
    (folder / file).unlink()
    (folder / file).write_bytes(content)
    return folder


#: What a clone without Git LFS holds in place of the weights (the pointer of the shipped file's size).
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"5" * 64 + b"\nsize 90868376\n"


def test_a_model_that_cannot_load_is_one_line_naming_the_directory_and_the_file(
    tmp_path: Path, minilm_dir: Path
) -> None:
    """Issue 39 D9: `latechunk search --model DIR` printed two tracebacks (50 lines) for a Git LFS
    pointer in place of model.safetensors, and a JSON error naming no file for a config.json that is
    not JSON. Each is one line naming the directory and the file, exit 2: search (the light engine's
    query process, and --engine vllm) and eval."""
    import lancedb

    from latechunk_dagster.sink import chunk_schema

    db = tmp_path / "db"
    lancedb.connect(str(db)).create_table("mine", schema=chunk_schema(384))
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "pumps", "doc_id": "a"}\n')
    cases = {
        "model.safetensors": (LFS_POINTER, "model.safetensors is a Git LFS pointer (133 bytes), not the file"),
        "config.json": (b'{"model_type": "bert",\n', "config.json is not JSON (Expecting property name"),
        "tokenizer.json": (b'{"version": "1.0", "truncation": nul', "tokenizer.json is not JSON (Expecting value"),
        "vocab.txt": (LFS_POINTER, "vocab.txt is a Git LFS pointer"),
    }
    cases["model.safetensors "] = (  # a truncated download: the header says more bytes than the file has
        (minilm_dir / "model.safetensors").read_bytes()[:4096],
        "model.safetensors is not a safetensors file (4096 bytes; its header does not fit it)",
    )
    for i, (file, (content, message)) in enumerate(cases.items()):
        model = broken_model(minilm_dir, tmp_path / f"m{i}", file.strip(), content)
        runs = [["search", "pumps", "--uri", str(db), "--table", "mine", "--model", str(model)]]
        runs.append(["eval", str(queries), "--uri", str(db), "--table", "mine", "--model", str(model)])
        if i == 0:
            runs.append([*runs[0], "--engine", "vllm"])
        for args in runs:
            out = run_cli(args, tmp_path / "home", VLLM_LOGGING_LEVEL="ERROR")
            assert out.returncode == 2, out.stderr
            assert len(out.stderr.splitlines()) == 1, out.stderr
            assert out.stderr.startswith(f"latechunk {args[0]}: error: {model}: {message}"), (args, out.stderr)

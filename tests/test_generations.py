"""Generations of a table definition (issue 36) on real LanceDB: the log, promotion and rollback as
one commit each, cleaning, run tags, and what opens a generation (engine and segmenter versions)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path

import pyarrow as pa
import pytest

from latechunk_dagster import sink
from latechunk_dagster.core.chunking import FixedTokens, Sentences
from latechunk_dagster.core.results import ChunkerSettings
from latechunk_dagster.pipeline.config import granularity_configs, vector_config, vector_config_fields
from latechunk_dagster.sink import generation_log
from latechunk_dagster.sink import generations as gens
from latechunk_dagster.sink.database import LanceDBSettings

SETTINGS = ChunkerSettings(
    model_name="m",
    model_sha256="0" * 64,
    head="l2",
    opt_ins=(),
    dtype="float32",
    prefix="",
    window_length=256,
    window_overlap=32,
    allow_windows=True,
    embedding_dim=8,
    engine_version="0.32.0",
)


def _log_version(db: object, table: str) -> int:
    return db.open_table(gens.log_table_name(table)).version  # type: ignore[attr-defined]


def test_a_new_key_opens_a_generation_beside_the_current_and_promotion_is_one_commit(tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path))
    assert gens.writing_tables(db, "t", "rej", "A") == ("t", "rej", None)  # not under generations: as before
    assert gens.enable_generations(db, "t", "rej").generations == {}  # no rows yet: no generation
    assert gens.writing_tables(db, "t", "rej", "A") == ("t", "rej", 1)  # the first one, served at once
    assert gens.current_table(db, "t") == "t"
    v = _log_version(db, "t")
    assert gens.writing_tables(db, "t", "rej", "A") == ("t", "rej", 1)  # same key: same generation
    assert _log_version(db, "t") == v  # nothing committed
    assert gens.writing_tables(db, "t", "rej", "B") == ("t__g2", "rej__g2", 2)
    assert gens.current_table(db, "t") == "t"  # readers stay on generation 1 while 2 is built
    assert gens.built_table(db, "t") == ("t__g2", "rej__g2")
    v = _log_version(db, "t")
    assert gens.promote(db, "t").number == 2
    assert _log_version(db, "t") == v + 1 and gens.current_table(db, "t") == "t__g2"
    with pytest.raises(ValueError, match="current already"):
        gens.promote(db, "t", 2)
    assert gens.rollback(db, "t").number == 1
    assert _log_version(db, "t") == v + 2 and gens.current_table(db, "t") == "t"
    with pytest.raises(ValueError, match="no earlier generation"):
        gens.rollback(db, "t")
    assert gens.writing_tables(db, "t", "rej", "C") == ("t__g3", "rej__g3", 3)
    gens.promote(db, "t", 2)
    gens.promote(db, "t", 3)
    assert [gens.rollback(db, "t").number, gens.rollback(db, "t").number] == [2, 1]  # a stack, not a toggle
    with pytest.raises(ValueError, match="not under generations"):
        gens.promote(db, "other")


def test_enabling_records_the_stored_rows_as_generation_one(tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path))
    db.create_table("t", pa.table({"vector_config": ["cfg-a"], "x": [1]}))
    state = gens.enable_generations(db, "t", "rej")
    assert state.current is not None and state.current.number == 1
    assert state.current.key == gens.definition_key({"": "cfg-a"})  # hand-computed from the stored row
    assert gens.writing_tables(db, "t", "rej", gens.definition_key({"": "cfg-a"})) == ("t", "rej", 1)


def test_two_writers_opening_one_number_for_two_keys_get_two_generations() -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        {"seq": 0, "event": "open", "generation": 1, "key": "A", "table": "t", "rejected": "r", "at": at},
        {"seq": 1, "event": "promote", "generation": 1, "at": at},
        {"seq": 2, "event": "open", "generation": 2, "key": "B", "table": "t__g2", "rejected": "r__g2", "at": at},
        {"seq": 2, "event": "open", "generation": 2, "key": "C", "table": "t__g2", "rejected": "r__g2", "at": at},
    ]
    state = generation_log.state_of(rows)
    assert state.of_key("B") is not None and state.of_key("C") is None  # the first open owns number 2
    assert state.current is not None and state.current.number == 1


def test_clean_drops_generations_past_retention_and_keeps_user_tagged(tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path))
    gens.enable_generations(db, "t", "rej")
    for key in ("A", "B", "C"):
        name, rejected, _ = gens.writing_tables(db, "t", "rej", key)
        db.create_table(name, pa.table({"x": [1]}))
        db.create_table(rejected, pa.table({"x": [1]}))
    gens.promote(db, "t", 3)  # 1 served until now, 2 never served, 3 current
    gens.tag_commit(db.open_table("t"), 1, "run-1", "a")  # a run's lineage tag protects nothing
    db.open_table("t__g2").tags.create("keep-me", 1)  # a user's tag does
    assert gens.clean(db, "t") == []  # within the retention
    later = datetime.now(UTC) + timedelta(days=8)
    assert gens.clean(db, "t", now=later) == [1]
    assert set(db.list_tables().tables) >= {"t__g2", "rej__g2", "t__g3", "rej__g3"}
    assert not {"t", "rej"} & set(db.list_tables().tables)
    state = gens.read_state(db, "t")
    assert state is not None and state.generations[1].dropped and state.current.number == 3  # type: ignore[union-attr]


def test_a_run_tag_reads_back_the_version_it_names(tmp_path: Path) -> None:
    db = sink.connect(str(tmp_path))
    table = db.create_table("t", pa.table({"x": [1, 2]}))
    tag = gens.tag_commit(table, table.version, "0f1e-run/7", "shard a/b")
    assert tag.startswith("run-0f1e-run_7-") and tag == gens.tag_name("0f1e-run/7", "shard a/b")
    table.add(pa.table({"x": [3]}))
    assert table.count_rows() == 3
    table.checkout(tag)
    assert table.count_rows() == 2


def test_engine_and_segmenter_versions_open_a_generation() -> None:
    sentences, fixed = Sentences(max_tokens=32), FixedTokens(chunk_size=16)
    fields = vector_config_fields(SETTINGS, sentences)
    assert fields["segmenter_version"] == version("sentencex") and fields["engine_version"] == "0.32.0"
    assert "segmenter_version" not in vector_config_fields(SETTINGS, fixed)
    upgraded = replace(SETTINGS, engine_version="0.33.0")
    assert vector_config(upgraded, fixed) != vector_config(SETTINGS, fixed)
    key = gens.definition_key(granularity_configs(SETTINGS, {"small": fixed, "big": sentences}))
    assert key != gens.definition_key(granularity_configs(upgraded, {"small": fixed, "big": sentences}))
    assert key != gens.definition_key(granularity_configs(SETTINGS, {"small": fixed}))


def test_the_cli_lists_promotes_only_a_complete_generation_and_rolls_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from latechunk_dagster.app.cli import main

    db, uri = sink.connect(str(tmp_path)), str(tmp_path)
    db.create_table("kb", pa.table({"partition": ["a", "b"], "vector_config": ["cfg-1", "cfg-1"]}))
    assert main(["generations", "--uri", uri, "--table", "kb", "--enable"]) == 0
    name, _, n = gens.writing_tables(db, "kb", "rejected_documents", "new-key")
    db.create_table(name, pa.table({"partition": ["a"], "vector_config": ["cfg-2"]}))  # b not written yet
    capsys.readouterr()
    assert main(["promote", "--uri", uri, "--table", "kb"]) == 2
    assert "generation 2 of 'kb' lacks 1 partitions the current generation has (b)" in capsys.readouterr().err
    assert gens.current_table(db, "kb") == "kb"
    db.open_table(name).add(pa.table({"partition": ["b"], "vector_config": ["cfg-2"]}))
    assert main(["promote", "--uri", uri, "--table", "kb"]) == 0
    assert gens.current_table(db, "kb") == "kb__g2" and n == 2
    assert main(["generations", "--uri", uri, "--table", "kb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("\t")[:4] for line in lines if line[:1].isdigit()]
    assert rows == [
        ["1", "built", gens.definition_key({"": "cfg-1"}), "kb"],
        ["2", "current", "new-key", "kb__g2"],
    ]
    assert main(["rollback", "--uri", uri, "--table", "kb"]) == 0
    assert gens.current_table(db, "kb") == "kb"
    assert main(["rollback", "--uri", uri, "--table", "kb"]) == 2  # nothing earlier: one line, no traceback
    assert "no earlier generation" in capsys.readouterr().err


def test_a_shard_that_leaves_the_store_leaves_every_generation(tmp_path: Path) -> None:
    """A partition sync deletes a removed shard's rows from the definition's every live generation
    (the served one, the one being built, the one kept for rollback), not only from the configured
    names; it reads the stored partitions of all of them; other definitions are left alone."""
    db = sink.connect(str(tmp_path))
    gens.enable_generations(db, "t", "rej")
    for key in ("A", "B"):
        name, rejected, _ = gens.writing_tables(db, "t", "rej", key)
        db.create_table(name, pa.table({"partition": ["p1", "p2", "p2"], "x": [1, 2, 3]}))
        db.create_table(rejected, pa.table({"partition": ["p2"], "x": [4]}))
    db.create_table("other", pa.table({"partition": ["p2"], "x": [5]}))
    db.create_table("t__g2_new_shard_only", pa.table({"partition": ["p9"], "x": [6]}))  # not a generation's
    settings = LanceDBSettings(uri=str(tmp_path))
    assert gens.every_generation(db, ["other"]) == ["other"]
    assert gens.every_generation(db, ["t", "rej"]) == ["t", "rej", "t__g2", "rej__g2"]
    assert settings.stored_partitions(["t", "rej"]) == {"p1", "p2"}
    assert settings.drop_partitions(["t", "rej"], ["p2"]) == 6  # 2 + 1 in each generation, by hand
    for name, left in {"t": [1], "rej": [], "t__g2": [1], "rej__g2": [], "other": [5]}.items():
        assert db.open_table(name).to_arrow().column("x").to_pylist() == left, name


def test_the_retention_comes_from_the_setting_and_a_bad_value_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gens.RETENTION_ENV, raising=False)
    assert gens.retention_period() == timedelta(days=7)
    monkeypatch.setenv(gens.RETENTION_ENV, "0.5")
    assert gens.retention_period() == timedelta(hours=12)
    assert gens.retention_period(2) == timedelta(days=2)  # an explicit value wins
    for bad in ("-1", "soon", "inf"):
        monkeypatch.setenv(gens.RETENTION_ENV, bad)
        with pytest.raises(ValueError, match=f"{gens.RETENTION_ENV} must be a number of days >= 0, got '{bad}'"):
            gens.retention_period()


def test_promoting_from_the_cli_drops_generations_past_the_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Old generations leave when the next promotion runs (the CLI's, as the Dagster promote asset's
    and Airflow's promote task's): with a retention of 0 days, generation 1, served until the
    promotion of 2, is dropped by the promotion of 3; 2, just served, by the next one."""
    from latechunk_dagster.app.cli import main

    db = sink.connect(str(tmp_path))
    gens.enable_generations(db, "t", "rej")
    for key in ("A", "B", "C"):
        name, rejected, _ = gens.writing_tables(db, "t", "rej", key)
        db.create_table(name, pa.table({"partition": ["p"], "x": [1]}))
    monkeypatch.setenv(gens.RETENTION_ENV, "0")
    args = ["--uri", str(tmp_path), "--table", "t", "--force"]
    assert main(["promote", "2", *args]) == 0
    assert "dropped generations past the retention: [1]" in capsys.readouterr().out  # 3, being built, kept
    assert main(["promote", "3", *args]) == 0
    assert "dropped generations past the retention: [2]" in capsys.readouterr().out
    assert gens.current_table(db, "t") == "t__g3" and "t" not in db.list_tables().tables

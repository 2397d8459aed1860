"""Generations of a table definition (issue 36) on real LanceDB: the log, promotion and rollback as
one commit each, cleaning, run tags, and what opens a generation (engine and segmenter versions)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from latechunk_dagster import sink
from latechunk_dagster.core.chunking import FixedTokens, Sentences
from latechunk_dagster.core.results import ChunkerSettings
from latechunk_dagster.pipeline.config import granularity_configs, vector_config, vector_config_fields
from latechunk_dagster.sink import generation_log
from latechunk_dagster.sink import generations as gens
from latechunk_dagster.sink.database import LanceDBSettings
from latechunk_dagster.sink.generation_gates import reading_generation

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
    for key in ("A", "B", "C", "D"):
        name, rejected, _ = gens.writing_tables(db, "t", "rej", key)
        db.create_table(name, pa.table({"x": [1]}))
        db.create_table(rejected, pa.table({"x": [1]}))
    gens.promote(db, "t", 3, force=True)
    gens.promote(db, "t", 4, force=True)  # 1 served until 3, 2 never served, 3 just demoted, 4 current
    gens.tag_commit(db.open_table("t"), 1, "run-1", "a")  # a run's lineage tag protects nothing
    db.open_table("t__g2").tags.create("keep-me", 1)  # a user's tag does
    assert gens.clean(db, "t") == []  # within the retention
    later = datetime.now(UTC) + timedelta(days=8)
    assert gens.clean(db, "t", now=later) == [1]  # 3, demoted by the last promotion, is kept: rollback goes there
    assert set(db.list_tables().tables) >= {"t__g2", "rej__g2", "t__g3", "rej__g3", "t__g4"}
    assert not {"t", "rej"} & set(db.list_tables().tables)
    state = gens.read_state(db, "t")
    assert state is not None and state.generations[1].dropped and state.current.number == 4  # type: ignore[union-attr]
    assert gens.rollback(db, "t").number == 3


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


def test_promoting_from_the_cli_drops_generations_past_the_retention_but_the_one_just_demoted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Old generations leave when the next promotion runs (the CLI's, as the Dagster promote asset's
    and Airflow's promote task's). With a retention of 0 days (issue 47 kind 14) the generation a
    promotion demotes is kept, so rollback always has somewhere to go: generation 1 stays through
    the promotion of 2 and leaves with the promotion of 3; 2, just demoted, stays."""
    from latechunk_dagster.app.cli import main

    db = sink.connect(str(tmp_path))
    gens.enable_generations(db, "t", "rej")
    for key in ("A", "B", "C"):
        name, rejected, _ = gens.writing_tables(db, "t", "rej", key)
        db.create_table(name, pa.table({"partition": ["p"], "x": [1]}))
    monkeypatch.setenv(gens.RETENTION_ENV, "0")
    args = ["--uri", str(tmp_path), "--table", "t", "--force"]
    assert main(["promote", "2", *args]) == 0
    assert "dropped generations past the retention: none" in capsys.readouterr().out  # 1 demoted, 3 being built
    assert main(["promote", "3", *args]) == 0
    assert "dropped generations past the retention: [1]" in capsys.readouterr().out
    assert gens.current_table(db, "t") == "t__g3" and "t" not in db.list_tables().tables
    assert main(["rollback", "--uri", str(tmp_path), "--table", "t"]) == 0
    assert gens.current_table(db, "t") == "t__g2" and "t__g2" in db.list_tables().tables


def _chunk_rows(partitions: list[str], tag: str) -> pa.Table:
    """Rows with the columns a chunk table's indexes cover (text, doc_id, partition) and a vector_config."""
    n = len(partitions)
    return pa.table(
        {
            "partition": partitions,
            "doc_id": [f"{tag}{i}" for i in range(n)],
            "text": [f"{tag} words {i}" for i in range(n)],
            "vector_config": [f"cfg-{tag}"] * n,
        }
    )


def _kb(tmp_path: Path, first: list[str], later: dict[str, list[str]]) -> Any:
    """A database whose definition ``kb`` holds ``first``'s partitions in generation 1 (adopted, tag
    ``g1``) and, for each key of ``later``, a generation of its partitions (tag: the key)."""
    db = sink.connect(str(tmp_path))
    db.create_table("kb", _chunk_rows(first, "g1"))
    gens.enable_generations(db, "kb", "rej")
    for key, partitions in later.items():
        name, _, _ = gens.writing_tables(db, "kb", "rej", key)
        db.create_table(name, _chunk_rows(partitions, key))
    return db


def _opens(db: object, table: str) -> list[tuple[int, str]]:
    rows = db.open_table(gens.log_table_name(table)).to_arrow().to_pylist()  # type: ignore[attr-defined]
    return sorted((r["generation"], r["key"]) for r in rows if r["event"] == "open")


def test_two_writers_who_read_the_log_at_once_never_share_a_generation_number(tmp_path: Path) -> None:
    """Issue 47 kind 3, forced interleaving: writers of keys B and C both read the log while only
    generation 1 exists, and both decide to open generation 2. B's open lands; C's, committed after
    the same state, is refused (the place in the log is taken), and C, deciding again, opens 3."""
    db = sink.connect(str(tmp_path))
    gens.enable_generations(db, "t", "rej")
    assert gens.writing_tables(db, "t", "rej", "A") == ("t", "rej", 1)
    seen_by_b = gens.read_state(db, "t")
    seen_by_c = gens.read_state(sink.connect(str(tmp_path)), "t")  # another connection, same moment
    assert seen_by_b is not None and seen_by_c is not None and seen_by_b.next_seq == seen_by_c.next_seq == 2
    b = generation_log.log_row("open", 2, 0, key="B", table="t__g2", rejected="rej__g2")
    c = generation_log.log_row("open", 2, 0, key="C", table="t__g2", rejected="rej__g2")
    assert generation_log.try_event(db, "t", seen_by_b, b) is True
    assert generation_log.try_event(sink.connect(str(tmp_path)), "t", seen_by_c, c) is False
    assert _opens(db, "t") == [(1, "A"), (2, "B")]  # C's row was never written
    assert gens.writing_tables(db, "t", "rej", "C") == ("t__g3", "rej__g3", 3)
    assert gens.writing_tables(db, "t", "rej", "B") == ("t__g2", "rej__g2", 2)
    assert _opens(db, "t") == [(1, "A"), (2, "B"), (3, "C")]


def test_writers_of_two_keys_racing_in_threads_get_two_generations(tmp_path: Path) -> None:
    """Issue 47 kind 3, natural race: 12 trials of two threads opening a generation for keys B and C
    at once (a barrier), each on its own connection; the report's 2 of 12 shared numbers before."""
    import threading

    for trial in range(12):
        uri = str(tmp_path / f"db{trial}")
        gens.enable_generations(sink.connect(uri), "t", "rej")
        gens.writing_tables(sink.connect(uri), "t", "rej", "A")
        barrier, got = threading.Barrier(2), {}

        def write(key: str, uri: str = uri, barrier: threading.Barrier = barrier, got: dict = got) -> None:
            db = sink.connect(uri)
            barrier.wait()
            got[key] = gens.writing_tables(db, "t", "rej", key)[2]

        threads = [threading.Thread(target=write, args=(k,)) for k in ("B", "C")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(got.values()) == [2, 3], (trial, got)
        db = sink.connect(uri)
        assert _opens(db, "t") == sorted([(1, "A"), (got["B"], "B"), (got["C"], "C")]), trial
        seqs = db.open_table(gens.log_table_name("t")).to_arrow().column("seq").to_pylist()
        assert sorted(seqs) == list(range(len(seqs))), trial  # one row per place: a total order of commits


def test_promote_in_code_refuses_a_generation_missing_partitions_unless_forced(tmp_path: Path) -> None:
    """Issue 47 kind 7: the library call is gated, as the CLI: generation 2 lacks shard b."""
    db = _kb(tmp_path, ["a", "b"], {"new": ["a"]})
    with pytest.raises(ValueError, match=r"generation 2 of 'kb' lacks 1 partitions the current generation has \(b\)"):
        gens.promote(db, "kb")
    assert gens.current_table(db, "kb") == "kb"
    assert db.open_table("kb__g2").list_indices() == []  # refused before any index was built for it
    assert gens.promote(db, "kb", force=True).number == 2
    assert gens.current_table(db, "kb") == "kb__g2"


def test_promotion_and_rollback_index_the_generation_they_serve(tmp_path: Path) -> None:
    """Issue 51 item 1: a generation is indexed before the commit that serves it (full-text on
    text, BTREE doc_id, BITMAP partition), by promote and by rollback alike."""
    from latechunk_dagster.sink.queries import has_fts_index

    db = _kb(tmp_path, ["a"], {"new": ["a"]})  # generation 1 adopted unindexed
    lines: list[str] = []
    gens.promote(db, "kb", log_line=lines.append)
    indexed = {i.index_type: list(i.columns) for i in db.open_table("kb__g2").list_indices()}
    assert indexed == {"FTS": ["text"], "BTree": ["doc_id"], "Bitmap": ["partition"]}
    assert lines == ["indexed 'kb__g2' (generation 2) before serving it: it lacked text, doc_id, partition"]
    assert not has_fts_index(db.open_table("kb"))
    assert gens.rollback(db, "kb", log_line=lines.append).number == 1
    assert has_fts_index(db.open_table("kb")) and len(lines) == 2
    hits = db.open_table("kb").search("words", query_type="fts").limit(5).to_arrow()
    assert sorted(hits.column("doc_id").to_pylist()) == ["g10"]


def test_a_rollback_racing_a_promotion_fails_naming_the_one_that_landed(tmp_path: Path) -> None:
    """Issue 47 kind 13, forced interleaving: the rollback reads the log (2 current, 1 before it);
    while it indexes generation 1 (its log line is the moment) a promotion of 3 lands; the rollback
    commits nothing and says so, naming generation 3, which stays current."""
    db = _kb(tmp_path, ["a"], {"B": ["a"], "C": ["a"]})
    gens.promote(db, "kb", 2)
    version = db.open_table(gens.log_table_name("kb")).version
    with pytest.raises(ValueError, match="another promotion landed on 'kb' .* generation 3 is current now; nothing"):
        gens.rollback(db, "kb", log_line=lambda _: gens.promote(sink.connect(str(tmp_path)), "kb", 3))
    state = gens.read_state(db, "kb")
    assert state is not None and state.stack == (1, 2, 3)  # the promotion, and no rollback row
    assert [r["event"] for r in db.open_table(gens.log_table_name("kb")).to_arrow().to_pylist()].count("rollback") == 0
    assert db.open_table(gens.log_table_name("kb")).version > version
    assert gens.rollback(db, "kb").number == 2 and gens.current_table(db, "kb") == "kb__g2"  # uncontended: reports


def test_a_read_of_a_generation_dropped_meanwhile_names_it(tmp_path: Path) -> None:
    """Issue 47 kind 14: a search resolved generation 1, then two promotions and a clean at
    retention 0 dropped it; its read says so, naming the generation and what is current."""
    db = _kb(tmp_path, ["a"], {"B": ["a"], "C": ["a"]})
    resolved = gens.current_table(db, "kb")
    handle = db.open_table(resolved)
    gens.promote(db, "kb", 2)
    gens.promote(db, "kb", 3)
    assert gens.clean(db, "kb", retention=timedelta(0)) == [1]  # 2, just demoted, kept
    with pytest.raises(RuntimeError, match="Not found"):
        handle.to_arrow()  # what lance says by itself
    with pytest.raises(ValueError) as err, reading_generation(db, "kb", resolved):
        handle.to_arrow()
    assert str(err.value) == (
        "generation 1 of 'kb' (table 'kb') was dropped past the retention while it was read: "
        "generation 3 ('kb__g3') is current; search again"
    )
    handle = db.open_table("kb__g2")
    name, _, _ = gens.writing_tables(db, "kb", "rej", "D")
    db.create_table(name, _chunk_rows(["a"], "D"))
    gens.promote(db, "kb", 4)  # demotes 3: 2, demoted before it, leaves
    assert gens.clean(db, "kb", retention=timedelta(0)) == [2]
    with pytest.raises(ValueError, match=r"^generation 2 of 'kb' \(table 'kb__g2'\) was dropped"):
        with reading_generation(db, "kb__g2", "kb__g2"):  # a reader given the generation's own name
            handle.to_arrow()
    with pytest.raises(RuntimeError, match="boom"), reading_generation(db, "kb", "kb__g3"):
        raise RuntimeError("boom: not found")  # a table not dropped: the error as it was


def test_after_a_rollback_the_old_strategy_writes_the_adopted_generation_it_matches_by_rows(tmp_path: Path) -> None:
    """Issue 51 item 2: generation 1 was adopted from a table of converted documents by a run of
    another configuration (Y), so its logged key is the rows' own converted ``vector_config``, not
    ``X``'s key. After promoting Y's generation and rolling back, a run of X again writes generation
    1 (its rows' ``vector_config`` is what X gives a converted row), not a third generation."""
    from latechunk_dagster.sources.documents import converted_vector_config

    db = sink.connect(str(tmp_path))
    row = converted_vector_config("cfg-X", "pdf@1")
    db.create_table("kb", pa.table({"partition": ["a"], "vector_config": [row], "converter": ["pdf@1"]}))
    gens.enable_generations(db, "kb", "rej", run_configs={"": "cfg-Y"})
    assert gens.read_state(db, "kb").generations[1].key == gens.definition_key({"": row})  # type: ignore[union-attr]
    key_x, key_y = gens.definition_key({"": "cfg-X"}), gens.definition_key({"": "cfg-Y"})
    name, _, n = gens.writing_tables(db, "kb", "rej", key_y, run_configs={"": "cfg-Y"})
    db.create_table(name, pa.table({"partition": ["a"], "vector_config": [converted_vector_config("cfg-Y", "pdf@1")]}))
    gens.promote(db, "kb", n)
    assert gens.rollback(db, "kb").number == 1
    assert gens.writing_tables(db, "kb", "rej", key_x, run_configs={"": "cfg-X"}) == ("kb", "rej", 1)
    assert gens.writing_tables(db, "kb", "rej", key_y, run_configs={"": "cfg-Y"}) == ("kb__g2", "rej__g2", 2)
    assert sorted(gens.read_state(db, "kb").generations) == [1, 2]  # type: ignore[union-attr]  # no third one
    # a third generation opened for X before this rule (the report's g3): the served generation 1 still wins
    generation_log.append_event(db, "kb", "open", 3, key=key_x, table="kb__g3", rejected="rej__g3")
    assert gens.writing_tables(db, "kb", "rej", key_x, run_configs={"": "cfg-X"}) == ("kb", "rej", 1)


def test_a_rollback_and_a_promotion_racing_in_threads_report_what_the_log_says(tmp_path: Path) -> None:
    """Issue 47 kind 13, natural race: 8 trials of a rollback (from 2 to 1) and a promotion of 3 at
    once. Whichever lands first, the rollback either fails with "another promotion landed" and the
    log holds no rollback row, or it reports the generation the log makes current right after its
    row (replayed from the rows), and the promotion is in the log either way."""
    import threading

    for trial in range(8):
        db = _kb(tmp_path / f"t{trial}", ["a"], {"B": ["a"], "C": ["a"]})
        gens.promote(db, "kb", 2)
        gens.promote(db, "kb", 3)
        gens.rollback(db, "kb")  # every table indexed now: the race is the two commits alone
        barrier, out = threading.Barrier(2), {}

        def roll(barrier: threading.Barrier = barrier, out: dict = out, trial: int = trial) -> None:
            db = sink.connect(str(tmp_path / f"t{trial}"))
            barrier.wait()
            try:
                out["rollback"] = gens.rollback(db, "kb").number
            except ValueError as exc:
                out["rollback"] = str(exc)

        def promote(barrier: threading.Barrier = barrier, trial: int = trial) -> None:
            db = sink.connect(str(tmp_path / f"t{trial}"))
            barrier.wait()
            gens.promote(db, "kb", 3)

        threads = [threading.Thread(target=roll), threading.Thread(target=promote)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rows = db.open_table(gens.log_table_name("kb")).to_arrow().sort_by("seq").to_pylist()
        assert [r["event"] for r in rows].count("promote") == 4, trial  # 1 (adopted), 2, 3, and 3 again
        rollbacks = [i for i, r in enumerate(rows) if r["event"] == "rollback"]
        if isinstance(out["rollback"], str):
            assert "another promotion landed on 'kb'" in out["rollback"], trial
            assert len(rollbacks) == 1, trial  # the one before the race only
        else:
            after = generation_log.state_of(rows[: rollbacks[-1] + 1])
            assert after.current is not None and after.current.number == out["rollback"], (trial, out)


def test_a_log_written_before_compare_and_swap_is_read_in_commit_order_and_continued(tmp_path: Path) -> None:
    """A log of the earlier rule, where two writers both opened generation 2 under one ``seq`` (B
    committed first, C's clock earlier): B owns 2 by commit order, not by clock; C's next run opens
    3 at the next free place, and the log gains lance's primary-key mark."""
    db = sink.connect(str(tmp_path))
    old_schema = pa.schema([f.remove_metadata() for f in generation_log.LOG_SCHEMA])
    log = db.create_table(gens.log_table_name("kb"), schema=old_schema)
    late, early = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC)
    rows = [
        generation_log.log_row("open", 1, 0, key="A", table="kb", rejected="rej") | {"at": early},
        generation_log.log_row("promote", 1, 1) | {"at": early},
        generation_log.log_row("open", 2, 2, key="B", table="kb__g2", rejected="rej__g2") | {"at": late},
        generation_log.log_row("open", 2, 2, key="C", table="kb__g2", rejected="rej__g2") | {"at": early},
    ]
    for row in rows:  # one commit each, in this order
        log.add(pa.Table.from_pylist([row], old_schema))
    state = gens.read_state(db, "kb")
    assert state is not None and state.of_key("B").number == 2 and state.of_key("C") is None  # type: ignore[union-attr]
    assert state.next_seq == 3
    assert gens.writing_tables(db, "kb", "rej", "C") == ("kb__g3", "rej__g3", 3)
    marked = db.open_table(gens.log_table_name("kb")).schema.field("seq").metadata
    assert marked == {b"lance-schema:unenforced-primary-key": b"true"}

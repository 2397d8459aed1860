"""The model families users late-chunk with, each against an independent float64 reference.

Replicas (``tests/families.py``): BERT (mean; CLS with the opt-in), XLM-R (multilingual E5 with
``query: ``/``passage: ``; BGE-M3 CLS-pooled), NomicBert (rotary, SwiGLU, dynamic NTK, code shipped
with the model, ``search_document: ``), ModernBERT (global + local attention, byte-level BPE,
``search_document: ``) and a model with a linear Dense projection and a Matryoshka cut. For every
family and every strategy (FixedTokens, Sentences, a windowed long document) the chunk vectors must
equal ``head(mean(H[start:end]))`` computed in float64 from the reference states (transformers' own
model class; for NomicBert the forward in ``tests/families.py``), the char ranges must slice the
source text, and the worst deviation is printed (``pytest -s``). Both engines run every family: vLLM
and the transformers engine (issue 30), which must also agree with each other within 1e-6.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import AutoTokenizer

from latechunk_dagster import FixedTokens, LateChunker, ModelNotSupportedError, Sentences
from latechunk_dagster.core.errors import DocumentError
from tests import families as F
from tests.reference import reference_head, reference_states
from tests.tiny_models import build_tiny_bert

IDENTITY = "torch.nn.modules.linear.Identity"

ENGINE = {"dtype": "float32", "enforce_eager": True, "gpu_memory_utilization": 0.05}
OVERLAP = 12
TOLERANCE = 1e-5
#: the transformers engine's bound from the vLLM engine's vectors, and from the reference (issue 30)
LIGHT_TOLERANCE = 1e-6
#: ... from the reference for NomicBert: its own code (and vLLM's) computes the rotary angles in
#: float32, the reference in float64; measured 1.3e-6 from the reference for both engines
NOMIC_LIGHT_TOLERANCE = 2e-6
#: worst deviation per family, printed at the end of the module
WORST: dict[str, float] = {}


def long_text(n_sentences: int) -> str:
    """A document several windows long: entities named once and referred to later."""
    parts = []
    for i in range(n_sentences):
        parts.append(f"Plant {i} in Lyon has a pump. Its maintenance team repaired it in spring, said the engineers.")
    return " ".join(parts)


@dataclass
class Family:
    """One replica: how to build it, how to start it, its reference states."""

    name: str
    build: Callable[[Path, Path], Path]
    states: Callable[[Path, list[int]], np.ndarray] = reference_states
    kwargs: dict[str, Any] = field(default_factory=dict)
    long_sentences: int = 14
    dimensions: int | None = None
    #: the transformers engine's bound from the float64 reference (both engines compute in float32)
    light_tolerance: float = 1e-6


FAMILIES = [
    Family("bert-mean", lambda d, m: build_tiny_bert(d, m, seed=11)),
    Family(
        "bert-cls", lambda d, m: build_tiny_bert(d, m, pooling="cls", seed=12), kwargs={"allow_non_mean_pooling": True}
    ),
    Family("xlmr-e5", lambda d, m: F.build_xlmr(d, prompts={"query": "query: ", "document": "passage: "})),
    Family("xlmr-bge-m3", lambda d, m: F.build_xlmr(d, pooling="cls", seed=5), kwargs={"allow_non_mean_pooling": True}),
    Family(
        "nomic-bert",
        lambda d, m: F.build_nomic(
            d,
            m,
            prompts={"query": "search_query: ", "document": "search_document: "},
            n_positions=256,
            max_trained_positions=256,
        ),
        states=F.nomic_states,
        kwargs={"trust_remote_code": True},
        light_tolerance=NOMIC_LIGHT_TOLERANCE,
    ),
    Family(
        "nomic-bert-dynamic-ntk",
        lambda d, m: F.build_nomic(
            d,
            m,
            prompts={"document": "search_document: "},
            n_positions=1024,
            max_trained_positions=128,
            rotary_scaling_factor=2.0,
            seed=4,
        ),
        states=F.nomic_states,
        kwargs={"trust_remote_code": True},
        light_tolerance=NOMIC_LIGHT_TOLERANCE,
    ),
    Family(
        "modernbert",
        lambda d, m: F.build_modernbert(d, prompts={"query": "search_query: ", "document": "search_document: "}),
        long_sentences=10,
    ),
    Family(
        "dense-matryoshka",
        lambda d, m: build_tiny_bert(d, m, dense=[(64, 32, IDENTITY)], matryoshka=[16, 32], seed=13),
        dimensions=16,
    ),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory, minilm_dir) -> dict[str, Path]:
    return {f.name: f.build(tmp_path_factory.mktemp(f.name), minilm_dir) for f in FAMILIES}


def header_footer(model_dir: Path, prompt: str, text: str) -> tuple[list[int], int, int]:
    """Token ids of ``prompt + text`` by the model's own tokenizer, with the number of leading tokens
    that belong to no text (specials, tokens wholly inside the prompt) and of trailing specials."""
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    enc = tok(prompt + text, return_offsets_mapping=True, return_special_tokens_mask=True)
    ids, offs, special = enc["input_ids"], enc["offset_mapping"], enc["special_tokens_mask"]
    head = 0
    while head < len(ids) and (special[head] or offs[head][1] <= len(prompt)):
        head += 1
    foot = 0
    while foot < len(ids) and special[len(ids) - 1 - foot]:
        foot += 1
    return ids, head, foot


def check_document(fam: Family, model_dir: Path, chunker: LateChunker, text: str, doc) -> float:  # noqa: ANN001
    """Compare one chunked document with the float64 reference; return the worst deviation."""
    prompt = chunker.prefix
    ids, head, foot = header_footer(model_dir, prompt, text)
    assert doc.token_ids == ids, "one tokenization pass, the model's own tokenizer"
    h = F.windowed_states(lambda x: fam.states(model_dir, x), ids, head, foot, chunker.window_length, OVERLAP)
    means = np.stack([h[s:e].mean(axis=0) for s, e in (c.token_range for c in doc.chunks)])
    ref = reference_head(model_dir, means, fam.dimensions)
    assert doc.vectors.shape == ref.shape and doc.vectors.dtype == np.float32
    # tiling, and char ranges that slice the source text
    assert doc.chunks[0].token_range[0] == 0 and doc.chunks[-1].token_range[1] == len(ids)
    for a, b in zip(doc.chunks, doc.chunks[1:]):
        assert a.token_range[1] == b.token_range[0]
    covered = "".join(text[c.char_range[0] : c.char_range[1]] for c in doc.chunks if c.char_range)
    for c in doc.chunks:
        if c.char_range is not None:
            assert c.text == text[c.char_range[0] : c.char_range[1]]
    assert "".join(covered.split()) == "".join(text.split()), "every visible character in exactly one chunk"
    return float(np.abs(doc.vectors - ref).max())


def family_vectors(fam: Family, model_dir: Path, c: LateChunker, texts: list[str]) -> tuple[list[np.ndarray], float]:
    """Every vector a chunker makes of ``texts`` (both strategies, the windowed document included) and
    of a query, checked against the float64 reference; returns them with the worst deviation."""
    vectors, worst = [], 0.0
    for strategy in (FixedTokens(7), Sentences(max_tokens=24)):
        docs = c.chunk(texts, strategy)
        for text, doc in zip(texts, docs):
            worst = max(worst, check_document(fam, model_dir, c, text, doc))
            vectors.append(doc.vectors)
        assert docs[-1].windows > 1, "the long document is encoded in windows"
    assert set(c.opt_ins) == {
        *(["trust_remote_code"] if fam.kwargs.get("trust_remote_code") else []),
        *(["pooling=cls"] if fam.kwargs.get("allow_non_mean_pooling") else []),
    }
    if c.query_prefix:
        # queries: the model's query prompt, every token in the mean, then the head
        q = "Who repaired the pump?"
        ids, _, _ = header_footer(model_dir, c.query_prefix, q)
        h = fam.states(model_dir, ids)
        ref = reference_head(model_dir, h.mean(axis=0, keepdims=True), fam.dimensions)
        vectors.append(c.embed_queries([q]))
        worst = max(worst, float(np.abs(vectors[-1] - ref).max()))
    return vectors, worst


@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_family_matches_its_float64_reference(fam: Family, built: dict[str, Path]) -> None:
    """Both engines against the float64 reference, and against each other: the transformers engine
    (issue 30) within :data:`LIGHT_TOLERANCE` of the vLLM engine's vectors and ``fam.light_tolerance``
    of the reference."""
    model_dir = built[fam.name]
    texts = [*F.MULTILINGUAL, long_text(fam.long_sentences)]
    options: dict[str, Any] = {"dimensions": fam.dimensions, "window_overlap": OVERLAP, **fam.kwargs}
    with LateChunker(model_dir, **options, **ENGINE) as c:
        assert c.path == "spans"  # the default in process (issue 26): these vectors are the span path's
        vllm_vectors, worst = family_vectors(fam, model_dir, c, texts)
    with LateChunker(model_dir, engine="transformers", **options) as light:
        assert (light.path, light.settings.engine, light.dtype) == ("token_states", "transformers", "float32")
        light_vectors, light_worst = family_vectors(fam, model_dir, light, texts)
    between = max(float(np.abs(a - b).max()) for a, b in zip(vllm_vectors, light_vectors, strict=True))
    WORST[fam.name] = worst
    print(
        f"\n{fam.name}: worst deviation from the float64 reference {worst:.2e} (vLLM), {light_worst:.2e} "
        f"(transformers); between the engines {between:.2e}"
    )
    assert worst < TOLERANCE
    assert light_worst < fam.light_tolerance and between < LIGHT_TOLERANCE


def test_a_byte_level_prompt_token_belongs_to_the_first_chunk(built: dict[str, Path]) -> None:
    """ModernBERT's byte-level BPE merges the prompt's trailing space into the first word
    ("ĠBerlin" spans ``search_document: `` and the text): that token is a text token of chunk 0,
    its range clamped to start at 0, and every document is chunked."""
    model_dir = built["modernbert"]
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompt = "search_document: "
    straddling = 0
    for text in F.MULTILINGUAL:
        enc = tok(prompt + text, return_offsets_mapping=True)
        straddling += any(a < len(prompt) < b for a, b in enc["offset_mapping"])
    assert straddling == len(F.MULTILINGUAL), "the replica's tokenizer merges the prompt's space into every text"
    with LateChunker(model_dir, **ENGINE) as c:
        assert c.prefix == prompt
        docs = c.chunk(F.MULTILINGUAL, FixedTokens(6), errors="return")
        assert not [d for d in docs if isinstance(d, DocumentError)]
        for text, doc in zip(F.MULTILINGUAL, docs):
            tokens = c.tokenize(text)
            first = next(k for k, o in enumerate(tokens.offsets) if o is not None)
            assert tokens.offsets[first][0] == 0
            assert first < doc.chunks[0].token_range[1], "the straddling token is in the first chunk"
            assert doc.chunks[0].char_range[0] == 0
            assert text.startswith(doc.chunks[0].text)
        [bom_doc] = c.chunk(["\ufeffBerlin"], FixedTokens(6))
        assert bom_doc.chunks[0].char_range == (1, 7), "after a byte order mark the text starts at 1"


def test_code_shipped_with_a_model_needs_the_explicit_opt_in(built: dict[str, Path]) -> None:
    with pytest.raises(ModelNotSupportedError, match="trust_remote_code=True") as err:
        LateChunker(built["nomic-bert"], **ENGINE)
    assert "configuration_hf_nomic_bert.NomicBertConfig" in str(err.value)


def test_nomic_dynamic_ntk_is_served_at_its_trained_length(built: dict[str, Path]) -> None:
    """Dynamic NTK scaling changes the rotary base only for inputs longer than max_trained_positions
    (in Nomic's code, by the input's length): windows never exceed it, a longer max_model_len is
    refused by name, a shorter one becomes the window length of an engine served at the trained length."""
    model_dir = built["nomic-bert-dynamic-ntk"]
    with pytest.raises(ModelNotSupportedError, match=r"max_model_len=512 .*rotary_scaling_factor=2\.0"):
        LateChunker(model_dir, trust_remote_code=True, max_model_len=512, **ENGINE)
    with LateChunker(model_dir, trust_remote_code=True, max_model_len=64, window_overlap=OVERLAP, **ENGINE) as c:
        assert (c.max_model_len, c.window_length) == (128, 64)
        text = long_text(4)
        [doc] = c.chunk([text], FixedTokens(16))
        assert doc.windows > 1 and np.isfinite(doc.vectors).all()
        fam = next(f for f in FAMILIES if f.name == "nomic-bert-dynamic-ntk")
        assert check_document(fam, model_dir, c, text, doc) < TOLERANCE
    # the reference really scales beyond the trained length (so staying inside it matters)
    ids = header_footer(model_dir, "", long_text(12))[0][:200]
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["max_trained_positions"] < len(ids)
    plain = dict(cfg, rotary_scaling_factor=None)
    (model_dir / "config.json").write_text(json.dumps(plain))
    try:
        unscaled = F.nomic_states(model_dir, ids)
    finally:
        (model_dir / "config.json").write_text(json.dumps(cfg))
    assert np.abs(F.nomic_states(model_dir, ids) - unscaled).max() > 1e-3


def test_lengths_above_the_models_positions_are_refused_by_name(built: dict[str, Path]) -> None:
    # XLM-R: 130 position embeddings, ids start after the padding index 1: 128 usable positions
    with pytest.raises(ModelNotSupportedError, match=r"max_model_len=129 exceeds the model's 128 input tokens"):
        LateChunker(built["xlmr-e5"], max_model_len=129, **ENGINE)
    cfg = json.loads((built["xlmr-e5"] / "config.json").read_text())
    assert "position_embedding_type" not in cfg, "transformers 5 config: the documented default is filled"


def test_what_the_engine_cannot_run_is_refused_before_any_document(tmp_path: Path, minilm_dir: Path) -> None:
    # an architecture vLLM's registry does not have
    unknown = build_tiny_bert(tmp_path / "unknown", minilm_dir)
    cfg = json.loads((unknown / "config.json").read_text())
    (unknown / "config.json").write_text(json.dumps(dict(cfg, architectures=["ImaginaryEncoderModel"])))
    with pytest.raises(ModelNotSupportedError, match=r"cannot run the architecture \['ImaginaryEncoderModel'\]"):
        LateChunker(unknown, **ENGINE)
    # a causal embedding model (Qwen3-Embedding style): refused unless allow_causal
    causal = tmp_path / "qwen3-embedding"
    causal.mkdir()
    (causal / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64})
    )
    with pytest.raises(ModelNotSupportedError, match="causal .*allow_causal=True"):
        LateChunker(causal, **ENGINE)
    # a model directory copied without its weights: one sentence, before vLLM starts
    bare = Path(shutil.copytree(unknown, tmp_path / "no-weights", ignore=shutil.ignore_patterns("*.safetensors")))
    (bare / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelNotSupportedError, match=r"no-weights: no model weights in the directory"):
        LateChunker(bare, **ENGINE)


def test_the_opt_in_reaches_every_place_a_model_is_loaded(
    built: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The component YAML (engine resource fields), the lineage of the rows, and the CLI."""
    import dagster as dg
    from dagster.components.testing import create_defs_folder_sandbox

    from latechunk_dagster import sink
    from latechunk_dagster.app.cli import main as cli
    from latechunk_dagster.integration.component import LateChunkComponent
    from latechunk_dagster.integration.sensors import sync_partitions
    from latechunk_dagster.sources.files import DocumentStore

    model = built["nomic-bert"]
    store, db = tmp_path / "store", tmp_path / "lancedb"
    (store / "north").mkdir(parents=True)
    (store / "north" / "berlin.txt").write_text(F.MULTILINGUAL[4])
    (store / "north" / "lyon.txt").write_text(F.MULTILINGUAL[1])

    def run(trust: bool) -> Any:
        engine = {"model": str(model), **ENGINE, **({"trust_remote_code": True} if trust else {})}
        with create_defs_folder_sandbox() as sandbox:
            defs_path = sandbox.scaffold_component(
                component_cls=LateChunkComponent,
                defs_yaml_contents={
                    "type": "latechunk_dagster.integration.component.LateChunkComponent",
                    "attributes": {
                        "key_prefix": "nomic",
                        "table_name": "chunks_nomic",
                        "strategy": {"name": "fixed_tokens", "params": {"chunk_size": 16}},
                        "engine": engine,
                        "lancedb": {"uri": str(db)},
                        "store": {"path": str(store)},
                        "index": False,
                        "sensor": False,
                    },
                },
            )
            with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_component, defs):
                assets_def = defs.resolve_assets_def(dg.AssetKey(["nomic", "chunk_vectors"]))
                (tmp_path / f"home-{trust}").mkdir()
                with dg.instance_for_test(temp_dir=str(tmp_path / f"home-{trust}")) as instance:
                    sync_partitions(instance, DocumentStore.from_path(store), assets_def.partitions_def)
                    return defs.resolve_job_def("nomic_chunk_vectors_job").execute_in_process(
                        instance=instance, partition_key="north", raise_on_error=False
                    )

    refused = run(trust=False)
    assert not refused.success
    failure = next(e for e in refused.all_events if e.is_step_failure)
    assert "trust_remote_code=True" in str(failure.step_failure_data.error)
    result = run(trust=True)
    assert result.success and all(c.passed for c in result.get_asset_check_evaluations())
    rows = sink.connect(str(db)).open_table("chunks_nomic").to_arrow()
    assert set(rows.column("opt_ins").to_pylist()) == {"trust_remote_code"}
    args = ["search", "Who repairs the pumps?", "--uri", str(db), "--table", "chunks_nomic", "--model", str(model)]
    assert cli(args) == 2
    assert "trust_remote_code" in capsys.readouterr().err
    assert cli([*args, "--trust-remote-code", "--exact"]) == 0
    assert "berlin.txt" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("n_positions", "trained", "factor", "window"),
    [(8192, 8192, None, 8192), (8192, 2048, 2.0, 2048)],
    ids=["nomic-8192-one-window", "nomic-v1-dynamic-ntk-2048-windows"],
)
def test_long_windows(tmp_path: Path, minilm_dir: Path, n_positions: int, trained: int, factor, window: int) -> None:  # noqa: ANN001
    """Nomic's long contexts: a document of ~8,000 tokens in one 8,192-token window, and the same
    document in 2,048-token windows of a model trained at 2,048 with dynamic NTK scaling; both engines."""
    model = F.build_nomic(
        tmp_path / "nomic",
        minilm_dir,
        n_positions=n_positions,
        max_trained_positions=trained,
        rotary_scaling_factor=factor,
        seed=6,
    )
    fam = Family("nomic-long", lambda d, m: d, states=F.nomic_states, kwargs={"trust_remote_code": True})
    text = long_text(360)
    with LateChunker(model, trust_remote_code=True, window_overlap=OVERLAP, **ENGINE) as c:
        assert (c.max_model_len, c.window_length) == (window, window)
        [doc] = c.chunk([text], Sentences(max_tokens=256))
        assert 6000 < len(doc.token_ids) <= 8192
        assert doc.windows == (1 if window == 8192 else 4)
        worst = check_document(fam, model, c, text, doc)
    with LateChunker(model, engine="transformers", trust_remote_code=True, window_overlap=OVERLAP) as light:
        assert (light.max_model_len, light.window_length) == (window, window)
        [light_doc] = light.chunk([text], Sentences(max_tokens=256))
        light_worst = check_document(fam, model, light, text, light_doc)
    between = float(np.abs(doc.vectors - light_doc.vectors).max())
    print(
        f"\nnomic, {len(doc.token_ids)} tokens in windows of {window}: worst deviation {worst:.2e} (vLLM), "
        f"{light_worst:.2e} (transformers); between the engines {between:.2e}"
    )
    assert worst < TOLERANCE and light_worst < TOLERANCE and between < LIGHT_TOLERANCE


def test_non_finite_states_from_the_engine_are_rejected_per_document(tmp_path: Path, minilm_dir: Path) -> None:
    """A real engine that overflows: one token's embedding row is 3e38, so LayerNorm of any input that
    holds it is inf/NaN (as fp16 overflow or vLLM issue 52665's corrupted rotary cache make them).
    That document is rejected with its reason and never written; its neighbours are written."""
    import torch
    from safetensors.torch import load_file, save_file

    from latechunk_dagster import sink
    from latechunk_dagster.core.errors import NonFiniteVectorError
    from latechunk_dagster.pipeline.partition import materialize_partition
    from latechunk_dagster.sources.documents import Document

    model = build_tiny_bert(tmp_path / "overflow", minilm_dir, seed=21)
    poisoned = AutoTokenizer.from_pretrained(str(model)).convert_tokens_to_ids("volcano")
    weights = load_file(str(model / "model.safetensors"))
    key = next(k for k in weights if k.endswith("word_embeddings.weight"))
    weights[key][poisoned] = torch.full_like(weights[key][poisoned], 3e38)
    save_file(weights, str(model / "model.safetensors"))
    texts = {"calm": "The pump was repaired in spring.", "hot": "The volcano erupted.", "mild": "Owls hunt."}
    with LateChunker(model, **ENGINE) as c:
        results = c.chunk(list(texts.values()), FixedTokens(4), doc_ids=list(texts), errors="return")
        assert isinstance(results[1], NonFiniteVectorError) and results[1].doc_id == "hot"
        assert all(np.isfinite(r.vectors).all() for r in (results[0], results[2]))
        db = sink.connect(str(tmp_path / "db"))
        chunks = sink.open_or_create(db, sink.CHUNK_TABLE, sink.chunk_schema(c.embedding_dim))
        rejected = sink.open_or_create(db, sink.REJECTED_TABLE, sink.REJECTED_SCHEMA)
        report = materialize_partition(
            c,
            [Document.from_text(k, v) for k, v in texts.items()],
            "p",
            FixedTokens(4),
            chunk_table=chunks,
            rejected_table=rejected,
            run_id="r1",
            systemic_min_documents=100,
        )
    assert report.rejected == 1
    assert set(chunks.to_arrow().column("doc_id").to_pylist()) == {"calm", "mild"}
    [row] = rejected.to_arrow().to_pylist()
    assert row["doc_id"] == "hot" and row["reason"] == NonFiniteVectorError.reason

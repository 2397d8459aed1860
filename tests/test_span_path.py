"""The span path (issue 26): span sums computed inside vLLM's pooler, the default in process.

For every model family of ``tests/families.py`` (one in-process engine per family, as
``tests/test_model_families.py`` starts them), every strategy (fixed, sentences, paragraphs, Markdown,
caller char spans), one-window and windowed documents, no prompt / a prompt in the mean / a prompt
left out of it (``include_prompt=false``) and a Matryoshka cut:

* ``engine_path="spans"`` (the default) gives vectors within 1e-6 of ``head(mean(H[start:end]))``
  computed here in float64 from the same engine's token rows (each window encoded alone, the
  windowed reference of ``tests/families.py``), and within the family tolerance of the independent
  float64 model (transformers / the NomicBert forward of ``tests/families.py``);
* its token ranges, char ranges and heading paths are those of ``engine_path="token_states"``.

Also: bad spans are a ``SpanError`` of their document only; the engine's answer is checked
against the pieces asked for (``pair_rows``, with values); a Dagster materialization records
``engine_path == "spans"`` in its rows, and ``"token_states"`` when that path is chosen by name.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from transformers import AutoTokenizer

from latechunk_dagster import (
    CharSpans,
    FixedTokens,
    HeadNotSupportedError,
    LateChunker,
    MarkdownSections,
    Paragraphs,
    Sentences,
    Span,
    SpanError,
)
from latechunk_dagster.core.chunking.base import ChunkingStrategy
from latechunk_dagster.core.engines.vllm_local import pair_rows
from latechunk_dagster.core.errors import EngineAnswerError
from latechunk_dagster.core.results import ChunkedDocument
from latechunk_dagster.core.tokenization import Tokenization
from tests import families as F
from tests.reference import reference_head
from tests.test_model_families import ENGINE, FAMILIES, OVERLAP, TOLERANCE, Family, header_footer, long_text
from tests.tiny_models import build_tiny_bert

#: span path against the float64 mean of the same engine's rows (the issue's bound)
SPAN_TOLERANCE = 1e-6
#: the prompt a family without one of its own is given for the include_prompt=false run
PROMPT = "passage: "
BUDGET_STRATEGIES: list[ChunkingStrategy] = [
    FixedTokens(7),
    Sentences(max_tokens=24),
    Paragraphs(max_tokens=40),
    MarkdownSections(max_tokens=40),
]


def markdown_text(n_sections: int) -> str:
    """A Markdown document of ``n_sections`` headed sections, two paragraphs each (several windows)."""
    parts = []
    for i in range(n_sections):
        parts.append(
            f"# Plant {i}\n\nThe pump of plant {i} in Lyon was repaired in spring.\n\n"
            f"Its team checks the seals twice a year, said the engineers of plant {i}.\n"
        )
    return "\n".join(parts)


def char_spans_of(chunker: LateChunker, text: str, every: int) -> CharSpans:
    """Caller char spans for ``text``: a boundary at the first character of every ``every``-th text
    token (never inside a token), the last span running to the end of the text."""
    starts = [o[0] for o in chunker.tokenize(text).offsets if o is not None]
    cuts = sorted({s for s in starts[every::every] if 0 < s < len(text)})
    bounds = [0, *cuts, len(text)]
    return CharSpans(ranges=list(zip(bounds, bounds[1:])))


def st_prompt_length(model_dir: Path, prompt: str) -> int:
    """sentence-transformers' rule (``Transformer._get_prompt_length``): the prompt tokenized alone
    with special tokens, less a trailing special token: the first positions ``include_prompt=false``
    leaves out of the mean."""
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = list(tok(prompt, add_special_tokens=True)["input_ids"])
    if ids and ids[-1] in set(tok.all_special_ids):
        ids = ids[:-1]
    return len(ids)


def without_prompt_in_mean(model_dir: Path, out: Path) -> Path:
    """A copy of ``model_dir`` whose Pooling config says ``include_prompt: false``."""
    shutil.copytree(model_dir, out)
    pooling = out / "1_Pooling" / "config.json"
    cfg = json.loads(pooling.read_text())
    pooling.write_text(json.dumps({**cfg, "include_prompt": False}))
    return out


class References:
    """Windowed float64 token states of one model per text: from the chunker's engine (each window
    encoded alone) and from the family's independent float64 model. Cached across strategies."""

    def __init__(self, fam: Family, model_dir: Path, chunker: LateChunker) -> None:
        self.fam, self.model_dir, self.chunker = fam, model_dir, chunker
        self._cache: dict[tuple[str, str, str], np.ndarray] = {}

    def states(self, source: str, prompt: str, text: str) -> np.ndarray:
        key = (source, prompt, text)
        if key not in self._cache:
            ids, head, foot = header_footer(self.model_dir, prompt, text)
            rows: Callable[[list[int]], np.ndarray]
            if source == "engine":
                engine = self.chunker.engine
                assert engine is not None

                def rows(x: list[int]) -> np.ndarray:
                    return engine.token_states([x])[0].astype(np.float64)
            else:

                def rows(x: list[int]) -> np.ndarray:
                    return self.fam.states(self.model_dir, x)

            self._cache[key] = F.windowed_states(rows, ids, head, foot, self.chunker.window_length, OVERLAP)
        return self._cache[key]

    def vectors(self, source: str, chunker: LateChunker, text: str, doc: ChunkedDocument, skip: int) -> np.ndarray:
        """``head(mean(H[start:end]))`` in float64 per chunk of ``doc``, the first mean starting at ``skip``."""
        h = self.states(source, chunker.prefix, text)
        ranges = [c.token_range for c in doc.chunks]
        ranges[0] = (max(ranges[0][0], skip), ranges[0][1])
        means = np.stack([h[s:e].mean(axis=0) for s, e in ranges])
        if source == "model":
            return reference_head(self.model_dir, means, self.fam.dimensions)
        # the engine's rows already hold the linear projection (vLLM's token_embed applies a Dense per
        # token, which commutes with the mean): what is left of the head is the cut and the L2 norm
        modules = json.loads((self.model_dir / "modules.json").read_text())
        x = means[:, : self.fam.dimensions] if self.fam.dimensions else means
        if any(m["type"].endswith(".Normalize") for m in modules):
            x = x / np.linalg.norm(x, axis=1, keepdims=True)
        return x


def same_chunks(a: ChunkedDocument, b: ChunkedDocument) -> bool:
    return [(c.token_range, c.char_range, c.text, c.headings) for c in a.chunks] == [
        (c.token_range, c.char_range, c.text, c.headings) for c in b.chunks
    ]


def check_both_paths(
    refs: References,
    chunker: LateChunker,
    texts: list[str],
    strategy: ChunkingStrategy,
    skip: int,
) -> tuple[float, float, bool]:
    """Chunk ``texts`` on the default (span) path and on ``token_states``; compare with the references.

    Returns (worst span-path deviation from the engine-row float64 reference, worst from the
    independent model, whether some document took several windows)."""
    spans = chunker.chunk(texts, strategy)
    states = chunker.chunk(texts, strategy, engine_path="token_states")
    worst_rows = worst_model = 0.0
    for text, a, b in zip(texts, spans, states):
        assert (a.path, b.path) == ("spans", "token_states"), strategy.describe()
        assert a.token_ids == b.token_ids and a.windows == b.windows
        assert same_chunks(a, b), f"{strategy.describe()}: ranges differ between the paths"
        want = refs.vectors("engine", chunker, text, a, skip)
        assert a.vectors.dtype == np.float32 and a.vectors.shape == want.shape
        worst_rows = max(worst_rows, float(np.abs(a.vectors - want).max()))
        # the reference is that of the token-state path too (so it is the right one)
        assert np.abs(b.vectors - want).max() < SPAN_TOLERANCE
        worst_model = max(worst_model, float(np.abs(a.vectors - refs.vectors("model", chunker, text, a, skip)).max()))
    return worst_rows, worst_model, any(d.windows > 1 for d in spans)


@pytest.mark.slow  # an engine per family, as tests/test_model_families.py (conftest.SLOW_MODULES)
@pytest.mark.parametrize("fam", FAMILIES, ids=[f.name for f in FAMILIES])
def test_span_path_matches_float64_and_the_token_state_ranges(fam: Family, tmp_path: Path, minilm_dir: Path) -> None:
    model_dir = fam.build(tmp_path / fam.name, minilm_dir)
    no_prompt_dir = without_prompt_in_mean(model_dir, tmp_path / f"{fam.name}-include-prompt-false")
    texts = [*F.MULTILINGUAL, long_text(fam.long_sentences), markdown_text(10)]
    worst_rows = worst_model = 0.0
    with LateChunker(model_dir, dimensions=fam.dimensions, window_overlap=OVERLAP, **fam.kwargs, **ENGINE) as c:
        assert c.path == "spans", "the span path is the default in process"
        # include_prompt=false: the same engine (same weights), the Pooling config of the copy;
        # a family without a document prompt is given one, so the mean has a prompt to leave out
        c_np = LateChunker(
            no_prompt_dir,
            engine=c.engine,
            prefix=c.prefix or PROMPT,
            dimensions=fam.dimensions,
            window_overlap=OVERLAP,
            **fam.kwargs,
        )
        assert c_np.path == "spans" and c_np.card.include_prompt is False
        skip = st_prompt_length(model_dir, c_np.prefix)
        assert c_np.document_prompt_tokens == skip > 0
        refs = References(fam, model_dir, c)
        for chunker, first in ((c, 0), (c_np, skip)):
            windowed = False
            for strategy in BUDGET_STRATEGIES:
                rows, model, w = check_both_paths(refs, chunker, texts, strategy, first)
                worst_rows, worst_model, windowed = max(worst_rows, rows), max(worst_model, model), windowed or w
            for text in (F.MULTILINGUAL[4], texts[-2], texts[-1]):  # CharSpans: one call per document
                rows, model, w = check_both_paths(refs, chunker, [text], char_spans_of(chunker, text, 9), first)
                worst_rows, worst_model, windowed = max(worst_rows, rows), max(worst_model, model), windowed or w
            assert windowed, "some documents were encoded in several windows"
        c_np.engine = None  # the engine is c's; it closes it
    print(
        f"\n{fam.name}: span path within {worst_rows:.1e} of float64 means of the engine's rows, "
        f"{worst_model:.1e} of the float64 model"
    )
    assert worst_rows < SPAN_TOLERANCE
    assert worst_model < TOLERANCE


# -- the default in process, and bad spans per document (the module's MiniLM engine) ----------


@dataclass(frozen=True)
class _Spans(ChunkingStrategy):
    """A caller's strategy whose spans break the rules for the documents that ask for it."""

    name: ClassVar[str] = "test_spans"

    def spans(self, text: str, tokens: Tokenization) -> list[Span]:
        n = len(tokens)
        if text.startswith("gap"):
            return [Span(0, 2), Span(3, n)]
        if text.startswith("past"):
            return [Span(0, 2), Span(2, n + 5)]  # past the last token (and the window)
        if text.startswith("overlap"):
            return [Span(0, 3), Span(2, n)]
        if text.startswith("tuples"):
            return [(0, n)]  # type: ignore[list-item]
        return [Span(0, 2), Span(2, n)]


def test_the_default_in_process_is_the_span_path_and_bad_spans_refuse_one_document(chunker: LateChunker) -> None:
    assert chunker.path == "spans" and chunker.engine is not None and chunker.engine.supports_span_sums
    good = "Owls hunt at night. Their feathers make their flight almost silent."
    long = " ".join(f"Plant {i} in Lyon has a pump. Its team repaired it in spring." for i in range(60))
    texts = ["gap " + good, good, "past " + good, long, "overlap " + good, "tuples " + good]
    ids = ["gap", "good", "past", "long", "overlap", "tuples"]
    got = chunker.chunk(texts, _Spans(), doc_ids=ids, errors="return")
    refused = {r.doc_id: r for r in got if isinstance(r, SpanError)}
    assert set(refused) == {"gap", "past", "overlap", "tuples"}
    assert "test_spans" in str(refused["past"]) and "tile" in str(refused["past"])
    assert all(r.reason == "bad_spans" for r in refused.values())
    ok = [r for r in got if isinstance(r, ChunkedDocument)]
    assert [d.doc_id for d in ok] == ["good", "long"] and ok[1].windows > 1
    want = chunker.chunk([good, long], _Spans(), engine_path="token_states")
    for a, b in zip(ok, want):
        assert a.path == "spans" and same_chunks(a, b)
        assert np.abs(a.vectors - b.vectors).max() < SPAN_TOLERANCE


def test_a_non_linear_head_is_refused_on_the_span_path(tmp_path: Path, minilm_dir: Path) -> None:
    """The head is applied after the mean; a tanh projection does not commute with it, so the span
    path refuses it by name as the token-state path does (before any engine starts)."""
    tanh = build_tiny_bert(tmp_path / "tanh", minilm_dir, dense=[(64, 32, "torch.nn.modules.activation.Tanh")])
    for path in ("spans", "auto"):
        with pytest.raises(HeadNotSupportedError, match="non-linear"):
            LateChunker(tanh, engine_path=path, **ENGINE)  # type: ignore[arg-type]


# -- the engine's answer ----------------------------------------------------------------------


def test_pair_rows_takes_only_the_answer_to_the_pieces_asked() -> None:
    pieces = np.array([[0, 3, 0], [3, 4, 1], [6, 10, 1]], dtype=np.int64)  # rows 0-2, 3, 6-9
    hi = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], dtype=np.float32)
    lo = np.array([[1e-9, -2e-9], [0.0, 3e-9], [4e-9, 0.0]], dtype=np.float32)
    answer = np.concatenate([hi, lo, np.array([[3], [1], [4]], dtype=np.float32)], axis=1)  # [3, 2 * 2 + 1]
    got = pair_rows(answer, pieces, "vllm test")
    assert got.dtype == np.float32 and got.shape == (3, 4) and got.flags.c_contiguous
    assert np.array_equal(got, np.concatenate([hi, lo], axis=1))
    with pytest.raises(EngineAnswerError, match=r"vllm test answered 3 span sums with shape \(2, 5\)"):
        pair_rows(answer[:2], pieces, "vllm test")
    with pytest.raises(EngineAnswerError, match=r"shape \(3, 4\)"):  # even width: no count column
        pair_rows(answer[:, 1:], pieces, "vllm test")
    with pytest.raises(EngineAnswerError, match=r"shape \(0, 5\)"):  # the plugin's answer to bad ranges
        pair_rows(np.zeros((0, 5), np.float32), pieces, "vllm test")
    miscounted = answer.copy()
    miscounted[2, -1] = 5  # the sum of another range than rows 6-9
    with pytest.raises(EngineAnswerError, match=r"over \[3\.0, 1\.0, 5\.0\] rows, not \[3, 1, 4\]"):
        pair_rows(miscounted, pieces, "vllm test")
    with pytest.raises(EngineAnswerError, match=r"shape \(5,\)"):
        pair_rows(answer[0], pieces, "vllm test")


def test_the_pooler_sums_each_range_in_float64_and_refuses_bad_ranges() -> None:
    """:func:`span_sum_pairs` (run in vLLM's pooler) on rows whose float32 running sum is off."""
    import torch

    from latechunk_dagster.vllm_plugin import span_sum_pairs

    rows64 = np.random.default_rng(7).standard_normal((12, 3)) * np.array([1e4, 1.0, 1e-3])
    rows64[5] += 3e4  # a large row amid small ones: float32 accumulation loses the small ones
    rows = torch.tensor(rows64, dtype=torch.float32)
    exact = rows.double().numpy()
    spans = [0, 5, 5, 6, 8, 12]  # rows 6-7 belong to no range (another window owns them)
    out = span_sum_pairs(rows, spans).numpy()
    assert out.shape == (3, 2 * 3 + 1) and out.dtype == np.float32
    np.testing.assert_array_equal(out[:, -1], [5, 1, 4])
    want = np.stack([exact[0:5].sum(0), exact[5:6].sum(0), exact[8:12].sum(0)])
    got = out[:, :3].astype(np.float64) + out[:, 3:6]
    assert np.abs(got - want).max() <= 1e-15 * np.abs(exact).sum()
    assert np.abs(out[:, :3] - want).max() > 1e-6, "float32 alone loses what lo keeps"
    for bad in ([0, 5, 4, 8], [0, 5, 5, 5], [0, 13], [3, 1], [0, 5, 8], [-1, 2], []):
        assert span_sum_pairs(rows, bad).shape == (0, 7), bad


def test_the_pooler_sums_the_same_on_the_host_and_on_a_device() -> None:
    """Rows in host memory are summed with numpy (one thread: torch's ops open an OpenMP region per
    call, which stalls on a loaded CPU); an accelerator's with one ``index_add_``. Both branches, run
    here on CPU tensors, give the same answer, for float32 and bfloat16 rows (vLLM's head dtypes)."""
    import torch

    from latechunk_dagster.vllm_plugin import _cpu_sum_pairs, _device_sum_pairs, span_sum_pairs

    rows = torch.tensor(np.random.default_rng(3).standard_normal((300, 384)), dtype=torch.float32)
    bounds = torch.tensor([[0, 1], [1, 130], [130, 256], [260, 300]])  # rows 256-259 are another window's
    for x in (rows, rows.to(torch.bfloat16)):
        host, device = _cpu_sum_pairs(x, bounds), _device_sum_pairs(x, bounds)
        assert host.dtype == device.dtype == torch.float32 and host.shape == device.shape == (4, 2 * 384 + 1)
        exact = x.double().numpy()
        want = np.stack([exact[a:b].sum(0) for a, b in bounds.tolist()])
        for got in (host, device):
            pair = got[:, :384].double().numpy() + got[:, 384:768].double().numpy()
            assert np.abs(pair - want).max() < 1e-12
            np.testing.assert_array_equal(got[:, -1].numpy(), [1, 129, 126, 40])
        assert torch.equal(span_sum_pairs(x, bounds.ravel().tolist()), host)


# -- lineage: the rows record the path ---------------------------------------------------------


def test_a_materialization_records_the_engine_path_in_its_rows(chunker: LateChunker, tmp_path: Path) -> None:
    """A real Dagster run on the module's engine writes ``engine_path == "spans"`` in every row (and
    in the run's metadata); the same run on ``engine_path="token_states"`` (chosen by name, same
    engine) writes that, with the same chunks and vectors within 1e-6."""
    import dagster as dg

    from tests.conftest import SHARED_ENGINE
    from tests.test_pipeline import DOCS, make_defs, run_partitions, sync, table_rows, write_store

    store = write_store(tmp_path / "store", DOCS)
    by_name = LateChunker(chunker.card.path, engine=chunker.engine, engine_path="token_states")
    assert by_name.path == "token_states"
    rows, metadata = {}, {}
    try:
        for path, ch in (("spans", chunker), ("token_states", by_name)):
            SHARED_ENGINE["chunker"] = ch
            db, home = tmp_path / f"db-{path}", tmp_path / f"home-{path}"
            home.mkdir()
            with dg.instance_for_test(temp_dir=str(home)) as instance:
                sync(instance, store)
                result = run_partitions(make_defs(store, db), instance, "alpha", "gamma")
                assert result.success
                metadata[path] = [
                    m.event_specific_data.materialization.metadata for m in result.get_asset_materialization_events()
                ]
            rows[path] = table_rows(db)
    finally:
        SHARED_ENGINE["chunker"] = chunker
        by_name.engine = None  # the module's engine: the fixture closes it
    for path in ("spans", "token_states"):
        assert set(rows[path].column("engine_path").to_pylist()) == {path}
        assert {m["engine_path"].value for m in metadata[path]} == {path}
    a, b = rows["spans"], rows["token_states"]
    assert max(a.column("windows").to_pylist()) > 1, "the long document was windowed"
    for col in ("chunk_id", "doc_id", "token_start", "token_end", "char_start", "char_end", "headings"):
        assert a.column(col).to_pylist() == b.column(col).to_pylist(), col
    va, vb = (np.array(t.column("vector").to_pylist(), dtype=np.float64) for t in (a, b))
    assert np.abs(va - vb).max() < SPAN_TOLERANCE

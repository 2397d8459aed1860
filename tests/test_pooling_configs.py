"""Every setting of the sentence-transformers Pooling, Dense and Normalize modules: honoured or refused by name.

Copies of the shipped model (weights linked, configs rewritten) and tiny random BERTs stand in
for real models with those settings. The reference for an honoured setting is
sentence-transformers itself (``SentenceTransformer.encode``), an implementation independent
of this package.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from latechunk_dagster import LateChunker  # noqa: E402
from latechunk_dagster.core.chunking import FixedTokens  # noqa: E402
from latechunk_dagster.core.errors import ModelNotSupportedError, SpanError  # noqa: E402
from latechunk_dagster.core.model_card import check_late_chunking_allowed, read_model_card  # noqa: E402
from tests.conftest import TEST_ENGINE_ARGS  # noqa: E402
from tests.tiny_models import build_tiny_bert  # noqa: E402

PROMPTS = {"query": "query: ", "document": "passage: "}
DOC = (
    "Owls hunt at night. Their feathers have soft edges, so their flight is almost silent. "
    "Mice rarely hear them coming."
)


def minilm_copy(
    out: Path,
    minilm_dir: Path,
    *,
    pooling: dict[str, Any] | None = None,
    prompts: dict[str, str] | None = None,
    modules: list[dict[str, Any]] | None = None,
) -> Path:
    """The shipped model in ``out`` (weights linked) with its Pooling config / prompts / modules replaced."""
    out.mkdir(parents=True)
    for f in minilm_dir.iterdir():
        if f.is_file():
            (out / f.name).symlink_to(f) if f.suffix == ".safetensors" else shutil.copy(f, out / f.name)
    shutil.copytree(minilm_dir / "1_Pooling", out / "1_Pooling")
    if pooling is not None:
        (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    if prompts is not None:
        cfg = json.loads((out / "config_sentence_transformers.json").read_text())
        cfg["prompts"] = prompts
        (out / "config_sentence_transformers.json").write_text(json.dumps(cfg))
    if modules is not None:
        (out / "modules.json").write_text(json.dumps(modules))
    return out


def legacy(mode: str, **extra: Any) -> dict[str, Any]:
    """A pre-v5 Pooling config selecting ``mode`` with the boolean keys."""
    keys = {
        "cls": "pooling_mode_cls_token",
        "max": "pooling_mode_max_tokens",
        "mean": "pooling_mode_mean_tokens",
        "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
        "weightedmean": "pooling_mode_weightedmean_tokens",
        "lasttoken": "pooling_mode_lasttoken",
    }
    return {"word_embedding_dimension": 384, **{k: m == mode for m, k in keys.items()}, **extra}


def module(idx: int, kind: str, path: str) -> dict[str, Any]:
    return {"idx": idx, "name": str(idx), "path": path, "type": f"sentence_transformers.models.{kind}"}


ST_MODULES = [module(0, "Transformer", ""), module(1, "Pooling", "1_Pooling"), module(2, "Normalize", "2_Normalize")]


def card_check(path: Path, *, opt_in: bool = False) -> tuple[str, ...]:
    card = read_model_card(path)
    return check_late_chunking_allowed(card, allow_causal=False, allow_non_mean_pooling=opt_in)


# -- Pooling modes ---------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["cls", "max", "weightedmean", "lasttoken"])
@pytest.mark.parametrize("style", ["legacy", "pooling_mode"])
def test_non_mean_pooling_is_refused_by_name(tmp_path: Path, minilm_dir: Path, mode: str, style: str) -> None:
    cfg = legacy(mode) if style == "legacy" else {"embedding_dimension": 384, "pooling_mode": mode}
    d = minilm_copy(tmp_path / "m", minilm_dir, pooling=cfg)
    with pytest.raises(ModelNotSupportedError, match=rf"pooling is '{mode}' \(Pooling pooling_mode\)"):
        card_check(d)
    assert card_check(d, opt_in=True) == (f"pooling={mode}",)  # contract section 4: opt-in, recorded


def test_mean_sqrt_len_is_honoured_when_normalized_else_refused(tmp_path: Path, minilm_dir: Path) -> None:
    """sum/sqrt(n) has the mean's direction: after Normalize the vectors are the same."""
    d = minilm_copy(tmp_path / "n", minilm_dir, pooling=legacy("mean_sqrt_len_tokens"))
    assert card_check(d) == ()
    d2 = minilm_copy(
        tmp_path / "u", minilm_dir, pooling=legacy("mean_sqrt_len_tokens"), modules=ST_MODULES[:2]
    )  # no Normalize: the length factor would change the vector
    with pytest.raises(ModelNotSupportedError, match="'mean_sqrt_len_tokens'"):
        card_check(d2)


def test_concatenated_modes_are_refused_even_with_the_opt_in(tmp_path: Path, minilm_dir: Path) -> None:
    d = minilm_copy(tmp_path / "m", minilm_dir, pooling={"embedding_dimension": 384, "pooling_mode": ["mean", "max"]})
    with pytest.raises(ModelNotSupportedError, match=r"concatenates pooling_mode \['max', 'mean'\]|'mean', 'max'"):
        card_check(d, opt_in=True)


@pytest.mark.parametrize(
    ("cfg", "named"),
    [
        (legacy("mean", pooling_mode_foo_tokens=True), "pooling_mode_foo_tokens"),
        ({"embedding_dimension": 384, "pooling_mode": "median"}, "median"),
        ({"embedding_dimension": 768, "pooling_mode": "mean"}, "embedding_dimension=768"),
        (legacy("mean", include_prompt="no"), "include_prompt"),
    ],
)
def test_unknown_pooling_settings_are_refused(tmp_path: Path, minilm_dir: Path, cfg: dict, named: str) -> None:
    d = minilm_copy(tmp_path / "m", minilm_dir, pooling=cfg)
    with pytest.raises(ModelNotSupportedError, match=named):
        read_model_card(d)


# -- Normalize, Dense and module order -------------------------------------------------------
def test_normalize_on_another_feature_is_refused(tmp_path: Path, minilm_dir: Path) -> None:
    d = minilm_copy(tmp_path / "m", minilm_dir)
    (d / "2_Normalize").mkdir()
    (d / "2_Normalize" / "config.json").write_text(json.dumps({"module_input_name": "token_embeddings"}))
    with pytest.raises(ModelNotSupportedError, match="module_input_name='token_embeddings'"):
        read_model_card(d)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"use_residual": True}, "use_residual=True"),
        ({"module_output_name": "token_embeddings"}, "module_output_name='token_embeddings'"),
        ({"activation_function": "my_pkg.Swish"}, "activation_function='my_pkg.Swish'"),
        ({"init_weight_scale": 2}, "init_weight_scale"),
    ],
)
def test_dense_settings_are_refused_by_name(tmp_path: Path, minilm_dir: Path, change: dict, named: str) -> None:
    d = build_tiny_bert(tmp_path / "t", minilm_dir, dense=[(64, 32, "torch.nn.modules.linear.Identity")])
    cfg = json.loads((d / "2_Dense" / "config.json").read_text())
    (d / "2_Dense" / "config.json").write_text(json.dumps({**cfg, **change}))
    with pytest.raises(ModelNotSupportedError, match=named.replace("(", r"\(")):
        read_model_card(d)


def test_dense_activations_are_read(tmp_path: Path, minilm_dir: Path) -> None:
    """Identity is affine (any path); Tanh is kept and refused on the token-state path (test_heads)."""
    ident = build_tiny_bert(tmp_path / "i", minilm_dir, dense=[(64, 32, "torch.nn.modules.linear.Identity")])
    tanh = build_tiny_bert(tmp_path / "t", minilm_dir, dense=[(64, 32, "torch.nn.modules.activation.Tanh")])
    assert read_model_card(ident).head.linear_projection
    assert not read_model_card(tanh).head.linear_projection
    assert "Tanh" in read_model_card(tanh).head.describe()


def test_other_modules_and_orders_are_refused(tmp_path: Path, minilm_dir: Path) -> None:
    d = minilm_copy(
        tmp_path / "l", minilm_dir, modules=[*ST_MODULES[:2], module(2, "LayerNorm", "2_LayerNorm"), ST_MODULES[2]]
    )
    with pytest.raises(ModelNotSupportedError, match="LayerNorm"):
        read_model_card(d)
    t = build_tiny_bert(tmp_path / "t", minilm_dir, dense=[(64, 32, "torch.nn.modules.linear.Identity")])
    mods = json.loads((t / "modules.json").read_text())
    (t / "modules.json").write_text(json.dumps([mods[0], mods[1], mods[3], mods[2]]))  # Normalize before Dense
    with pytest.raises(ModelNotSupportedError, match="module order"):
        read_model_card(t)


# -- include_prompt=false: honoured, against sentence-transformers ----------------------------
@pytest.fixture(scope="module")
def no_prompt_model(tmp_path_factory: pytest.TempPathFactory, minilm_dir: Path) -> Path:
    return minilm_copy(
        tmp_path_factory.mktemp("ip") / "m", minilm_dir, pooling=legacy("mean", include_prompt=False), prompts=PROMPTS
    )


def test_include_prompt_false_matches_sentence_transformers(no_prompt_model: Path) -> None:
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(no_prompt_model), device="cpu")
    want_q = st.encode(["q"], prompt_name="query", convert_to_numpy=True)
    want_doc = st.encode([DOC], prompt_name="document", convert_to_numpy=True)
    st[1].include_prompt = True  # what the vectors would be if the setting were ignored
    ignored_q = st.encode(["q"], prompt_name="query", convert_to_numpy=True)
    ignored_doc = st.encode([DOC], prompt_name="document", convert_to_numpy=True)
    assert np.abs(want_q - ignored_q).max() > 1e-2 and np.abs(want_doc - ignored_doc).max() > 1e-3

    with LateChunker(no_prompt_model, **TEST_ENGINE_ARGS) as chunker:
        assert chunker.card.include_prompt is False
        assert (chunker.query_prompt_tokens, chunker.document_prompt_tokens) == (3, 3)  # [CLS] query/passage :
        assert chunker.path == "spans"  # the span path honours include_prompt=false too
        got_q = chunker.embed_queries(["q"])
        [doc] = chunker.chunk([DOC], FixedTokens(chunk_size=10_000))
        assert len(doc.chunks) == 1 and doc.chunks[0].token_range[0] == 0  # the chunk still owns the prompt
        np.testing.assert_allclose(got_q, want_q, atol=1e-5, rtol=0)
        np.testing.assert_allclose(doc.vectors, want_doc, atol=1e-5, rtol=0)
        # A first chunk of only prompt tokens has nothing to average: refused, naming the setting.
        [bad] = chunker.chunk([DOC], FixedTokens(chunk_size=3), errors="return")
        assert isinstance(bad, SpanError) and "include_prompt=false" in str(bad)
        with pytest.raises(ModelNotSupportedError, match="include_prompt=false"):
            chunker.chunk([DOC], FixedTokens(chunk_size=8), engine_path="native")

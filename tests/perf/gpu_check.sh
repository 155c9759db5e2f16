#!/usr/bin/env bash
# Issue 8's GPU check, for a lent GPU machine (the lead runs it; it must finish in under 5 minutes):
#   1. the CUDA tests (pytest -m gpu), fp32 and bf16;
#   2. `zoo bench` of the GPT-2-small shape in bf16;
#   3. the peer comparison (tests/perf/compare.py) in bf16 with the reduced (--quick) set, its
#      torch.compile section on gpt_tiny and gpt2 last (the report is rewritten after each section).
# Results land in $OUT (the device tool's output folder) or /tmp/zoo_gpu_out.  Usage:
#   bash tests/perf/gpu_check.sh
set -u
cd "$(dirname "$0")/../.."
OUTDIR="${OUT:-/tmp/zoo_gpu_out}"
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
PY="${PYTHON:-python3}"
start=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
# the image has torch, transformers, pluggy, safetensors, pyyaml, click, pytest; install zoo itself
# offline (no dependencies fetched), unless it is importable already
$PY -c "import zoo.plugins" 2>/dev/null || \
  $PY -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
$PY -c "import torch, zoo; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'zoo', zoo.__version__)"

echo "== 1. CUDA tests"
timeout 150 $PY -m pytest -q -m gpu tests -p no:cacheprovider 2>&1 | tee "$OUTDIR/gpu_tests.txt" | tail -15

echo "== 2. zoo bench (GPT-2 small shape, bf16)"
timeout 90 $PY -m zoo.cli bench gpt2 --device cuda --dtype bfloat16 --batch 4 --seq-len 512 \
  --train-batch 8 --new-tokens 128 -r 10 2>&1 | tee "$OUTDIR/bench_gpt2.txt"

echo "== 3. peer comparison (bf16, reduced set)"
left=$(( 285 - ($(date +%s) - start) ))
if [ "$left" -gt 30 ]; then
  timeout "$left" $PY tests/perf/compare.py --device cuda --dtype bfloat16 --quick \
    --sections forward,train,generate,load,memory,compile --presets gpt_tiny,gpt2 \
    --out "$OUTDIR/gpu_results.md" 2>&1 | tail -80
else
  echo "skipped: only ${left}s left"
fi
echo "done in $(( $(date +%s) - start ))s; files in $OUTDIR"

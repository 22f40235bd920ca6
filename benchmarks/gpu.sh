#!/usr/bin/env bash
# Issue 27 on the GPU machine, in one command (see benchmarks/gpu.py and docs/benchmarks.md):
#   bash benchmarks/gpu.sh [gpu.py options]
# Nothing to install: gpu.py and the rewritten scripts need torch (there already) and the
# repository's runtime/, put on PYTHONPATH here. Results go to $OUT (else ./gpu-out):
# gpu_table.md, gpu.json, timings.jsonl and this run's log.txt.
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/runtime:$PWD${PYTHONPATH:+:$PYTHONPATH}"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv || true
  python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)'
  python3 benchmarks/gpu.py --out "$out" "$@"; } 2>&1 | tee "$out/log.txt"

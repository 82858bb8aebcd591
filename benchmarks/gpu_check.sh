#!/usr/bin/env bash
# The checks that need a CUDA device, in one run: the tests that skip without one, then
# benchmarks/gpu.py. Logs and the benchmark's report go to $OUT (as the device tool sets it)
# or benchmarks/results/gpu. Exit status: 2 without a CUDA device, 1 if a check failed.
# Usage: bash benchmarks/gpu_check.sh [python]   (default python3, from the repository root)
set -uo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
out=${OUT:-benchmarks/results/gpu}
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

"$py" -c 'import sys, torch
if not torch.cuda.is_available():
    sys.exit("gpu_check: no CUDA device here, nothing run")
print("torch", torch.__version__, "on", torch.cuda.get_device_name())' || exit 2
mkdir -p "$out"

status=0
# fdl's hardware detection against the real driver (nvidia-smi, NVML)
"$py" -m fdl diagnose > "$out/diagnose.txt" 2>&1 || status=1
"$py" -m fdl diagnose --json > "$out/diagnose.json" 2>> "$out/diagnose.txt" || status=1
cat "$out/diagnose.txt"
# -rs lists each skip: on a GPU machine none of these should skip for want of CUDA
"$py" -m pytest -p no:cacheprovider -q -rs -o addopts="--import-mode=importlib" \
  tests/test_cuda_graph.py tests/test_cuda_paths.py tests/data/test_memory.py tests/test_device_and_amp.py \
  tests/graph/test_inline.py tests/graph/test_inline_transformer.py 2>&1 | tee "$out/tests.log" || status=1
"$py" benchmarks/gpu.py --out "$out" 2>&1 | tee "$out/gpu_benchmark.log" || status=1
exit $status

#!/usr/bin/env bash
# Run gpu-gate's GPU tests, the GPU demo and the benchmarks on a machine with an NVIDIA GPU.
# Usage: bench/run_gpu_suite.sh OUT_DIR   (logs and JUnit go there; a summary table is printed last)
# The whole of tests/gpu takes about 18 min on one H100 (GPU_TESTS_LIMIT, in seconds, bounds it;
# GPU_TEST_TIMEOUT bounds each test).
set -u
cd "$(dirname "$0")/.."
out=${1:-gpu-results}
mkdir -p "$out"
py=${PYTHON:-python3}
: > "$out/summary.txt"

# STEPS picks some of: doctor gpu-tests demo-gpu bench-equivalence bench-sanitizer bench-cache bench-multigpu
steps=" ${STEPS:-doctor gpu-tests demo-gpu bench-equivalence bench-sanitizer bench-cache} "

step() {
  local name=$1 limit=$2
  shift 2
  [[ $steps == *" $name "* ]] || return 0
  local start=$SECONDS
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-20s rc=%-4s %5ss\n' "$name" "$rc" "$((SECONDS - start))" | tee -a "$out/summary.txt"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
step doctor 120 "$py" -m gpu_gate.cli doctor
# Each test file in its own pytest, each test bounded (pytest-timeout, where installed): a test that
# hangs fails with its traceback and the files after it still run. After each file, processes the
# tests left behind (a sandbox or a sanitizer's launcher holding GPU memory makes the doctor refuse
# the GPU for every later gate) are listed and killed: every bwrap and sanitizer launcher on the
# machine, so run this suite on a machine of its own.
gpu_tests() {
  local per_test=() rc=0 f
  "$py" -c "import pytest_timeout" 2>/dev/null && per_test=(--timeout "${GPU_TEST_TIMEOUT:-300}")
  for f in ${GPU_TESTS:-tests/gpu/test_*.py}; do
    echo "=== $f"
    "$py" -m pytest -q -p no:cacheprovider "$f" -rs "${per_test[@]}" --durations 5 \
      --junitxml "$out/$(basename "$f" .py).xml" || [[ $? == 5 ]] || rc=1
    local left
    left=$(pgrep -a -f 'bwrap|TreeLauncherSubreaper|compute-sanitizer')
    if [[ -n $left ]]; then
      echo "left behind by $f:"; echo "$left"
      pkill -9 -f TreeLauncherSubreaper; pkill -9 -x bwrap; rc=1
    fi
  done
  return $rc
}
export -f gpu_tests; export out py GPU_TESTS GPU_TEST_TIMEOUT
step gpu-tests "${GPU_TESTS_LIMIT:-1800}" bash -c gpu_tests
step demo-gpu 300 "$py" -m gpu_gate.cli demo --gpu
step bench-equivalence 240 "$py" bench/bench_equivalence.py
step bench-sanitizer 300 "$py" bench/bench_sanitizer.py
step bench-cache 120 "$py" bench/bench_cache.py
# Not in the default STEPS: on a machine with several GPUs, STEPS=bench-multigpu runs the 64-job plan
# on every GPU, then on one (MULTIGPU_RUNS=all or one picks a single run when time is short).
step bench-multigpu "${MULTIGPU_LIMIT:-580}" "$py" bench/bench_multigpu.py --runs "${MULTIGPU_RUNS:-all,one}"

echo
echo "== GPU =="; cat "$out/gpu.txt"
if [[ -f $out/gpu-tests.log ]]; then
  echo "== gpu tests =="; grep -E "^=== |passed|failed|error|left behind" "$out/gpu-tests.log"
  grep -E "^(FAILED|ERROR)" "$out/gpu-tests.log" | head -30
fi
[[ -f $out/demo-gpu.log ]] && { echo "== demo =="; grep -A3 "demo verdicts" "$out/demo-gpu.log"; }
for b in bench-equivalence bench-sanitizer bench-cache bench-multigpu; do
  [[ -f $out/$b.log ]] && { echo "== $b =="; tail -12 "$out/$b.log"; }
done
echo "== summary =="; cat "$out/summary.txt"

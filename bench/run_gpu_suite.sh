#!/usr/bin/env bash
# Run gpu-gate's GPU tests, the GPU demo and the benchmarks on a machine with an NVIDIA GPU.
# Usage: bench/run_gpu_suite.sh OUT_DIR   (logs and JUnit go there; a summary table is printed last)
# The whole of tests/gpu takes about 18 min on one H100 (GPU_TESTS_LIMIT, in seconds, bounds it).
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
step gpu-tests "${GPU_TESTS_LIMIT:-1500}" "$py" -m pytest -q -p no:cacheprovider ${GPU_TESTS:-tests/gpu} -rs \
  --durations 15 --junitxml "$out/gpu-tests.xml"
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
  echo "== gpu tests =="; grep -E "passed|failed|error" "$out/gpu-tests.log" | tail -3
  grep -E "^(FAILED|ERROR)" "$out/gpu-tests.log" | head -30
fi
[[ -f $out/demo-gpu.log ]] && { echo "== demo =="; grep -A3 "demo verdicts" "$out/demo-gpu.log"; }
for b in bench-equivalence bench-sanitizer bench-cache bench-multigpu; do
  [[ -f $out/$b.log ]] && { echo "== $b =="; tail -12 "$out/$b.log"; }
done
echo "== summary =="; cat "$out/summary.txt"

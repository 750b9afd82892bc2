#!/usr/bin/env bash
# The speed check on a real kernel: Liger-Kernel's RMSNorm, gated as two pull requests against the same base:
# one that runs the backward on an eighth of the SMs ("fewer dW partial sums": slower), and one that changes the
# code without changing what it does (a value converted to the type it has: no change in time). A change to a
# comment alone selects no spec, so it is not timed. Needs a GPU, and
# liger_kernel importable (its installed package is copied into a scratch repository, as a checkout would
# hold it). Usage: bench/speed_example.sh OUT_DIR  (each PR's report under OUT_DIR/<name>/, a table last)
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "${1:-speed-example}" && cd "${1:-speed-example}" && pwd)
py=${PYTHON:-python3}
# LIGER_SRC: the liger_kernel package directory to copy (default: the importable one; keep it off the
# gate's own PYTHONPATH, or the workers import that copy instead of the repository's)
src=${LIGER_SRC:-$("$py" -c "import liger_kernel, os; print(os.path.dirname(liger_kernel.__file__))")} || exit 2
shapes=${SPEED_SHAPES:-"{rows: 4096, hidden: 4096}"}

run_pr() {  # name sed-expression
  local name=$1 edit=$2 repo
  repo=$(mktemp -d)/liger
  mkdir -p "$repo/src" "$repo/gate"
  cp -r "$src" "$repo/src/liger_kernel"
  cp "$here/liger_specs/rms_norm_gate.py" "$repo/gate/"
  cat > "$repo/.gpu-gate.yml" <<YML
version: 1
kernels:
  include: ["src/liger_kernel/ops/**/*.py"]
specs: ["gate/**/*_gate.py"]
python_path: [src]
checks:
  equivalence: {cases: 8, growth: false}
  speed: {level: required, shapes: [$shapes]}
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
YML
  (cd "$repo" && git init -q && git add -A && git -c user.name=gate -c user.email=gate@example.invalid commit -qm base \
    && sed -i "$edit" src/liger_kernel/ops/rms_norm.py && git diff --stat \
    && git -c user.name=gate -c user.email=gate@example.invalid commit -qam "$name")
  local start=$SECONDS
  (cd "$repo" && "$py" -m gpu_gate check --base HEAD~1 --head HEAD \
    --spec 'gate/rms_norm_gate.py::rms_norm_llama_gate' --out "$out/$name") > "$out/$name.log" 2>&1
  local rc=$?
  printf '%-14s rc=%s %4ss  ' "$name" "$rc" "$((SECONDS - start))" | tee -a "$out/summary.txt"
  grep -m1 -E "^(- )?\*\*?speed|slower|times the base|speed-up|slow-down" "$out/$name/report.md" 2>/dev/null \
    | cut -c1-300 | tee -a "$out/summary.txt" || echo "(no speed line)" | tee -a "$out/summary.txt"
}

: > "$out/summary.txt"
run_pr fewer_programs 's/^\(\s*sm_count = torch.cuda.get_device_properties(X.device).multi_processor_count\)$/\1 \/\/ 8  # fewer dW partials/'
run_pr same_work 's/^\(\s*\)BLOCK_SIZE, num_warps = calculate_settings(n_cols)$/&\n\1n_cols = int(n_cols)/'
echo; cat "$out/summary.txt"

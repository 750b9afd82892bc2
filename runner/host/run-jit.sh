#!/usr/bin/env bash
# Run one job with the just-in-time configuration that gpu-gate-register.service minted, then
# exit; systemd registers a new runner and starts this again for the next job. Runs in
# gpu-gate-runner.service, which holds no GitHub App key: only the JIT configuration, as the
# systemd credential "jitconfig".
set -euo pipefail

RUNNER_DIR="${RUNNER_DIR:-/var/lib/gpu-runner/actions-runner}"
JIT_CREDENTIAL="${CREDENTIALS_DIRECTORY:-/nonexistent}/jitconfig"

log() { printf 'run-jit: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

main() {
  [[ -r "$JIT_CREDENTIAL" ]] || die "no JIT configuration at ${JIT_CREDENTIAL} (LoadCredential=jitconfig:... in the unit)"
  [[ -x "${RUNNER_DIR}/run.sh" ]] || die "no Actions runner in ${RUNNER_DIR} (unpack actions-runner-linux-x64 there)"
  # The previous job's checkout and tools must not leak into this one.
  rm -rf "${RUNNER_DIR:?}/_work"
  local jit
  jit=$(<"$JIT_CREDENTIAL")
  cd "$RUNNER_DIR"
  log "starting the ephemeral runner; waiting for one job"
  exec ./run.sh --jitconfig "$jit"
}

main "$@"

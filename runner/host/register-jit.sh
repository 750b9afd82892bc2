#!/usr/bin/env bash
# Register one ephemeral GitHub Actions runner: ask GitHub for a just-in-time runner
# configuration and write it where the runner unit loads it from. Run by the one-shot unit
# gpu-gate-register.service, as its own user, before every start of gpu-gate-runner.service.
#
# Authentication: a GitHub App (permission "Self-hosted runners: read and write" on the
# organisation). The App's private key comes from systemd's credential store of this unit
# only; the JWT and the one-hour installation token it yields live in shell variables,
# never on disk. The job never runs here: the runner unit gets the JIT configuration and
# nothing else, so no job can read the key, mint tokens or register runners.
set -euo pipefail

: "${GITHUB_ORG:?set GITHUB_ORG in /etc/gpu-gate/runner.env}"
: "${GITHUB_APP_ID:?set GITHUB_APP_ID (the App ID or client ID) in /etc/gpu-gate/runner.env}"
: "${GITHUB_APP_INSTALLATION_ID:?set GITHUB_APP_INSTALLATION_ID in /etc/gpu-gate/runner.env}"
RUNNER_GROUP_ID="${RUNNER_GROUP_ID:-1}"
RUNNER_LABELS="${RUNNER_LABELS:-self-hosted,linux,x64,gpu}"
GITHUB_API="${GITHUB_API:-https://api.github.com}"
KEY_FILE="${GITHUB_APP_KEY_FILE:-${CREDENTIALS_DIRECTORY:-/nonexistent}/github-app-key}"
# Where the runner unit loads the configuration from (LoadCredential=jitconfig:...).
JIT_FILE="${JIT_FILE:-${RUNTIME_DIRECTORY:-/run/gpu-gate-register}/jitconfig}"

log() { printf 'register-jit: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

b64url() { openssl base64 -A | tr '+/' '-_' | tr -d '='; }

app_jwt() {
  local now header payload unsigned signature
  now=$(date +%s)
  header=$(printf '{"alg":"RS256","typ":"JWT"}' | b64url)
  # Backdated a minute against clock skew; GitHub accepts at most ten minutes.
  payload=$(printf '{"iat":%d,"exp":%d,"iss":"%s"}' "$((now - 60))" "$((now + 540))" "$GITHUB_APP_ID" | b64url)
  unsigned="${header}.${payload}"
  signature=$(printf '%s' "$unsigned" | openssl dgst -sha256 -sign "$KEY_FILE" -binary | b64url)
  printf '%s.%s' "$unsigned" "$signature"
}

github() {
  local method=$1 path=$2 token=$3 body=${4:-}
  curl --fail-with-body --silent --show-error --max-time 30 -X "$method" \
    -H "Accept: application/vnd.github+json" \
    -H "X-GitHub-Api-Version: 2022-11-28" \
    -H "Authorization: Bearer ${token}" \
    ${body:+--data "$body"} \
    "${GITHUB_API}${path}"
}

installation_token() {
  github POST "/app/installations/${GITHUB_APP_INSTALLATION_ID}/access_tokens" "$(app_jwt)" | jq -er '.token'
}

jit_config() {
  local token=$1 name body
  name="gpu-$(hostname -s)-$(date +%s)-${RANDOM}"
  body=$(jq -cn --arg name "$name" --argjson group "$RUNNER_GROUP_ID" --arg labels "$RUNNER_LABELS" \
    '{name: $name, runner_group_id: $group, labels: ($labels | split(",")), work_folder: "_work"}')
  github POST "/orgs/${GITHUB_ORG}/actions/runners/generate-jitconfig" "$token" "$body" | jq -er '.encoded_jit_config'
}

main() {
  [[ -r "$KEY_FILE" ]] || die "cannot read the GitHub App key at ${KEY_FILE} (LoadCredential=github-app-key:... in gpu-gate-register.service)"

  local token jit
  token=$(installation_token) || die "could not get an installation token for App ${GITHUB_APP_ID}"
  jit=$(jit_config "$token") || die "could not generate a JIT runner config for org ${GITHUB_ORG}"
  unset token
  # Only the JIT configuration leaves this unit: a file of its own user, mode 0600, that
  # systemd hands to the runner unit as a credential; the runner unit's start removes it.
  (umask 077 && printf '%s' "$jit" > "${JIT_FILE}.tmp") && mv -f "${JIT_FILE}.tmp" "$JIT_FILE"
  log "registered an ephemeral runner (labels ${RUNNER_LABELS}); its configuration is in ${JIT_FILE}"
}

main "$@"

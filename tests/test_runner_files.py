"""The runner provisioning files parse and say what the README promises."""
from __future__ import annotations

import configparser
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

RUNNER = Path(__file__).resolve().parent.parent / "runner"


def load_yaml(name: str) -> dict[str, Any]:
    data = yaml.safe_load((RUNNER / name).read_text())
    assert isinstance(data, dict)
    return data


def dockerfile() -> str:
    return (RUNNER / "Dockerfile").read_text()


def unit(name: str = "gpu-gate-runner.service") -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((RUNNER / "host" / name).read_text())
    return parser


def unit_values(key: str, name: str = "gpu-gate-runner.service") -> list[str]:
    """All values of a repeatable systemd key (configparser keeps only the last)."""
    text = (RUNNER / "host" / name).read_text()
    return re.findall(rf"^{re.escape(key)}=(.*)$", text, re.M)


# --- ARC ------------------------------------------------------------------------------------


def test_arc_values_have_the_scale_set_keys() -> None:
    v = load_yaml("arc/values.yaml")
    assert v["githubConfigUrl"].startswith("https://github.com/")
    assert v["runnerScaleSetName"] == "gpu-gate-h100"
    assert 0 <= v["minRunners"] <= v["maxRunners"]
    assert v["runnerGroup"]


def test_arc_secret_is_a_reference_never_an_inline_token() -> None:
    v = load_yaml("arc/values.yaml")
    assert isinstance(v["githubConfigSecret"], str), "must name a pre-created secret"
    text = (RUNNER / "arc" / "values.yaml").read_text()
    assert not re.search(r"^\s*github_token\s*:", text, re.M)
    assert not re.search(r"gh[pousr]_[A-Za-z0-9]{20,}", text)


def test_arc_runner_container_gets_one_gpu_on_a_gpu_node() -> None:
    spec = load_yaml("arc/values.yaml")["template"]["spec"]
    runner = spec["containers"][0]
    assert runner["name"] == "runner"
    assert runner["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert runner["command"] == ["/home/runner/run.sh"]
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"]["nvidia.com/gpu.present"] == "true"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert runner["securityContext"]["allowPrivilegeEscalation"] is False


def test_arc_values_run_jobs_in_the_gpu_pod_and_document_kubernetes_mode() -> None:
    v = load_yaml("arc/values.yaml")
    # In kubernetes mode the job pod would not get the runner container's GPU.
    assert "containerMode" not in v
    text = (RUNNER / "arc" / "values.yaml").read_text()
    assert "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE" in text
    assert "job-pod-template.yaml" in text


def test_no_pod_mounts_a_service_account_token() -> None:
    """A job in a pod with the default service account token can talk to the cluster's API."""
    values = load_yaml("arc/values.yaml")
    assert values["template"]["spec"]["automountServiceAccountToken"] is False
    template = load_yaml("arc/job-pod-template.yaml")
    assert template["spec"]["automountServiceAccountToken"] is False


def test_job_pod_template_puts_the_gpu_on_the_job_container() -> None:
    t = load_yaml("arc/job-pod-template.yaml")
    assert t["kind"] == "PodTemplate"
    job = [c for c in t["spec"]["containers"] if c["name"] == "$job"]
    assert job and job[0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert t["spec"]["runtimeClassName"] == "nvidia"


# --- Dockerfile -----------------------------------------------------------------------------


def test_dockerfile_is_multi_stage_on_a_pinned_cuda_13_devel_base() -> None:
    text = dockerfile()
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", text, re.M | re.I)
    assert [name for _, name in stages] == ["base", "python", "actions-runner", "runner"]
    base = re.search(r"^ARG CUDA_IMAGE=(\S+)", text, re.M)
    assert base and re.fullmatch(r"nvidia/cuda:13\.0\.\d+-devel-ubuntu24\.04", base.group(1))
    assert "@sha256:" in text  # how to pin by digest is explained


def test_dockerfile_requires_compute_sanitizer() -> None:
    text = dockerfile()
    assert "cuda-sanitizer-13-0" in text
    assert re.search(r"compute-sanitizer --version", text)


def test_dockerfile_installs_the_gpu_stack() -> None:
    text = dockerfile()
    assert "python3.12 -m venv" in text
    assert "download.pytorch.org/whl/cu130" in text
    for pkg in ("cupy-cuda13x", "nvidia-ml-py", "triton"):
        assert pkg in text
    assert '[gpu,triton]"' in text


def test_dockerfile_copies_everything_a_build_of_gpu_gate_reads() -> None:
    """pyproject.toml names LICENSE and NOTICE and setup.py copies action.yml: a build without them fails."""
    from build_helpers import SOURCES

    copied = {name for line in re.findall(r"^COPY (?!--from)(.+) /src/gpu-gate/$", dockerfile(), re.M)
              for name in line.split()}
    assert set(SOURCES) <= copied, set(SOURCES) - copied
    assert "COPY gpu_gate /src/gpu-gate/gpu_gate" in dockerfile()


def test_dockerfile_verifies_the_runner_tarball() -> None:
    text = dockerfile()
    version = re.search(r"^ARG RUNNER_VERSION=(\d+\.\d+\.\d+)$", text, re.M)
    digest = re.search(r"^ARG RUNNER_SHA256=([0-9a-f]{64})$", text, re.M)
    assert version and digest
    assert "actions/runner/releases/download/v${RUNNER_VERSION}" in text
    assert re.search(r'echo "\$\{RUNNER_SHA256\}  runner\.tar\.gz" \| sha256sum -c -', text)


def test_dockerfile_runs_as_a_non_root_user_with_a_doctor_healthcheck() -> None:
    text = dockerfile()
    assert re.search(r"useradd .*--uid 1001 .* runner$", text, re.M)
    users = re.findall(r"^USER\s+(\S+)", text, re.M)
    assert users and users[-1] == "runner"
    assert re.search(r'^\s*CMD \["gpu-gate", "doctor"\]', text, re.M)
    assert re.search(r"^HEALTHCHECK ", text, re.M)


# --- host mode ------------------------------------------------------------------------------


def test_systemd_unit_restarts_one_job_runner_as_a_dedicated_user() -> None:
    u = unit()
    svc = u["Service"]
    assert svc["Restart"] == "always"
    assert svc["User"] == "gpu-runner"
    assert svc["ExecStart"].endswith("/run-jit.sh")
    assert svc["PrivateTmp"] == "yes" and svc["NoNewPrivileges"] == "yes"
    assert u["Install"]["WantedBy"] == "multi-user.target"


def test_the_runner_unit_gets_the_jit_configuration_and_never_the_app_key() -> None:
    """A job runs in the runner unit: with the App key there, it could mint tokens and register runners."""
    u = unit()
    assert unit_values("LoadCredential") == ["jitconfig:/run/gpu-gate-register/jitconfig"]
    assert "github-app-key" not in (RUNNER / "host" / "gpu-gate-runner.service").read_text()
    assert u["Unit"]["Requires"] == "gpu-gate-register.service"
    assert "gpu-gate-register.service" in unit_values("After")
    assert "+/bin/rm -f /run/gpu-gate-register/jitconfig" in unit_values("ExecStartPre")


def test_the_registration_unit_is_one_shot_as_another_user_and_holds_the_key() -> None:
    svc = unit("gpu-gate-register.service")["Service"]
    assert svc["Type"] == "oneshot" and "RemainAfterExit" not in svc
    assert svc["User"] == "gpu-gate-register" != unit()["Service"]["User"]
    assert svc["LoadCredential"].startswith("github-app-key:")
    assert svc["ExecStart"].endswith("/register-jit.sh")
    assert svc["RuntimeDirectory"] == "gpu-gate-register" and svc["RuntimeDirectoryPreserve"] == "yes"
    assert svc["PrivateDevices"] == "yes", "registration needs no GPU"


def test_systemd_unit_hardening_keeps_the_nvidia_devices() -> None:
    svc = unit()["Service"]
    assert svc["DevicePolicy"] == "closed"
    assert svc["PrivateDevices"] == "no"
    allowed = {v.split()[0] for v in unit_values("DeviceAllow")}
    assert {"/dev/nvidiactl", "/dev/nvidia-uvm", "char-nvidia-frontend"} <= allowed
    assert "MemoryDenyWriteExecute" not in svc


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", ["gpu-gate-runner.service", "gpu-gate-register.service"])
def test_systemd_analyze_knows_every_directive(name: str) -> None:
    res = subprocess.run(["systemd-analyze", "verify", str(RUNNER / "host" / name)], capture_output=True, text=True)
    # The only complaint allowed is that the script is not installed on this machine.
    complaints = [line for line in res.stderr.splitlines() if "is not executable" not in line and line.strip()]
    assert complaints == []


SCRIPTS = [RUNNER / "host" / "register-jit.sh", RUNNER / "host" / "run-jit.sh"]


def script() -> Path:
    return RUNNER / "host" / "register-jit.sh"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_host_scripts_are_strict_bash(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_register_script_uses_a_jit_config_and_never_a_stored_token() -> None:
    text = script().read_text()
    assert "/orgs/${GITHUB_ORG}/actions/runners/generate-jitconfig" in text
    assert "/app/installations/${GITHUB_APP_INSTALLATION_ID}/access_tokens" in text
    assert "run.sh" not in text and "exec " not in text, "no job ever runs where the key is"
    assert "config.sh" not in text  # no long-lived registration
    # The installation token is never written to a file; the JIT configuration only to JIT_FILE.
    assert not re.search(r"token[^\n]*>\s*[\"$/\w]", text, re.I)
    assert re.findall(r"(?:jit|token)[^\n]*>(?!&)\s*(\S+)", text, re.I) == ['"${JIT_FILE}.tmp")']


def test_run_script_runs_one_job_with_the_jit_credential() -> None:
    text = (RUNNER / "host" / "run-jit.sh").read_text()
    assert 'exec ./run.sh --jitconfig "$jit"' in text and "github-app-key" not in text


def test_register_script_refuses_without_the_app_key(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "GITHUB_ORG": "acme", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2",
           "GITHUB_APP_KEY_FILE": str(tmp_path / "missing.pem")}
    res = subprocess.run(["bash", str(script())], capture_output=True, text=True, env=env, timeout=30)
    assert res.returncode == 1
    assert "cannot read the GitHub App key" in res.stderr


@pytest.mark.skipif(not all(shutil.which(t) for t in ("openssl", "jq", "curl")), reason="needs openssl, jq, curl")
def test_registration_then_run_hands_over_the_jit_configuration_only(tmp_path: Path) -> None:
    """register-jit.sh against a local stand-in for GitHub's two endpoints, with a real RSA key; then
    run-jit.sh with that file as its credential and a stand-in run.sh that writes down what it got."""
    import http.server
    import json
    import threading

    key = tmp_path / "app.pem"
    subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
    seen: list[tuple[str, str]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
            seen.append((self.path, self.headers.get("Authorization", "")))
            answer = ({"token": "ghs_installation"} if self.path.endswith("/access_tokens")
                      else {"encoded_jit_config": "JIT-" + json.loads(body)["name"]})
            data = json.dumps(answer).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        run_dir = tmp_path / "register"
        run_dir.mkdir()
        env = {"PATH": "/usr/bin:/bin", "GITHUB_ORG": "acme", "GITHUB_APP_ID": "1", "GITHUB_APP_INSTALLATION_ID": "2",
               "GITHUB_APP_KEY_FILE": str(key), "RUNTIME_DIRECTORY": str(run_dir),
               "GITHUB_API": f"http://127.0.0.1:{server.server_address[1]}"}
        res = subprocess.run(["bash", str(script())], capture_output=True, text=True, env=env, timeout=60)
    finally:
        server.shutdown()
    assert res.returncode == 0, res.stderr
    assert [p for p, _ in seen] == ["/app/installations/2/access_tokens", "/orgs/acme/actions/runners/generate-jitconfig"]
    assert seen[1][1] == "Bearer ghs_installation"
    jit = (run_dir / "jitconfig").read_text()
    assert jit.startswith("JIT-gpu-") and (run_dir / "jitconfig").stat().st_mode & 0o077 == 0

    runner_dir, creds = tmp_path / "actions-runner", tmp_path / "creds"
    runner_dir.mkdir()
    creds.mkdir()
    (creds / "jitconfig").write_text(jit)
    (runner_dir / "_work").mkdir()
    (runner_dir / "run.sh").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > args.txt\nenv > env.txt\n')
    (runner_dir / "run.sh").chmod(0o755)
    res = subprocess.run(["bash", str(RUNNER / "host" / "run-jit.sh")], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin", "RUNNER_DIR": str(runner_dir), "CREDENTIALS_DIRECTORY": str(creds)})
    assert res.returncode == 0, res.stderr
    assert (runner_dir / "args.txt").read_text().split() == ["--jitconfig", jit]
    assert not (runner_dir / "_work").exists(), "the previous job's work folder is gone"
    assert "BEGIN" not in (runner_dir / "env.txt").read_text() and str(key) not in (runner_dir / "env.txt").read_text()


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_host_scripts_pass_shellcheck(path: Path) -> None:
    res = subprocess.run(["shellcheck", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout


def test_readme_covers_every_file_and_the_security_rules() -> None:
    text = (RUNNER / "README.md").read_text()
    for name in ("Dockerfile", "arc/values.yaml", "arc/job-pod-template.yaml", "host/gpu-gate-runner.service",
                 "host/gpu-gate-register.service", "host/register-jit.sh", "host/run-jit.sh"):
        assert f"`{name}`" in text, name
    for rule in ("Ephemeral runners only", "No secrets on the runner", "Runner groups limited",
                 "Fork pull requests run only after approval", "Never `pull_request_target`"):
        assert rule in text, rule
    assert "ACTIONS_RUNNER_CONTAINER_HOOK_TEMPLATE" in text
    assert "restore-keys" in text and "hashFiles" in text
    # The runner version documented for host mode is the one the image verifies.
    version = re.search(r"^ARG RUNNER_VERSION=(\S+)$", dockerfile(), re.M)
    digest = re.search(r"^ARG RUNNER_SHA256=(\S+)$", dockerfile(), re.M)
    assert version and digest
    assert f"RUNNER_VERSION={version.group(1)}" in text and f"RUNNER_SHA256={digest.group(1)}" in text

"""The ``setup`` commands' sandbox (gpu_gate.github.setup_sandbox), attacked as a pull request's build would.

Each attack runs a real setup command in a real git repository under real bubblewrap, and must fail;
its legitimate twin must pass. Each attack is also run with ``--sandbox off``, where it succeeds: that
shows the attack is real, and the sandbox is what stops it. The runner's interpreter is a venv made
here (it sees this venv's packages through a .pth file) and gpu-gate is copied beside it, as the
action's install step does, so that the attacks that succeed unsandboxed write only temporary copies.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from gpu_gate import cli
from gpu_gate.commands.check import worker_python
from gpu_gate.executor import argv, sandbox
from gpu_gate.errors import GateError
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import Status
from gpu_gate.github import install, setup_sandbox
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.pythonpath import python_path

ROOT = Path(__file__).resolve().parents[2]
BWRAP, WHY_NOT = setup_sandbox.probe_bwrap()
needs_bwrap = pytest.mark.skipif(BWRAP is None, reason=f"no sandbox for setup here: {WHY_NOT}")
PINNED = {"GIT_AUTHOR_NAME": "Gate Tester", "GIT_AUTHOR_EMAIL": "tester@example.com",
          "GIT_COMMITTER_NAME": "Gate Tester", "GIT_COMMITTER_EMAIL": "tester@example.com"}
TOKEN = "ghs_setup_canary_" + os.urandom(4).hex()
# pip offline: no index, no build isolation (setuptools comes from the runner's packages), no deps.
PIP_INSTALL = "python -m pip install --no-index --no-deps --no-build-isolation --disable-pip-version-check -e ."
PYPROJECT = """[build-system]
requires = ["setuptools"]
build-backend = "setuptools.build_meta"

[project]
name = "tinypkg"
version = "0.1"

[tool.setuptools]
package-dir = {"" = "src"}
packages = ["tinypkg"]
"""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True,
                          env={**os.environ, **PINNED}).stdout.strip()


class Runner:
    """A runner's interpreter (a venv that sees this venv's packages) and gpu-gate copied for it."""

    def __init__(self, root: Path) -> None:
        env_dir = root / "runner-python"
        venv.EnvBuilder(with_pip=False).create(env_dir)
        self.python = str(env_dir / "bin" / "python")
        self.site = Path(subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        capture_output=True, text=True, check=True).stdout.strip())
        (self.site / "runner-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        self.gate_site = root / "gpu-gate" / "site"
        install.copy_package(ROOT, self.gate_site)
        self.package = self.gate_site / "gpu_gate"


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    return Runner(tmp_path)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """A real git repository: a tiny src-layout package, committed; a result cache beside it, as
    actions/cache restores one."""
    repo = tmp_path / "ws"
    (repo / "src" / "tinypkg").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (repo / "src" / "tinypkg" / "__init__.py").write_text("X = 1\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tinypkg")
    cache = repo / ".gpu-gate" / "cache" / "ab"
    cache.mkdir(parents=True)
    (cache / "ab12.json").write_text('{"result": "passed"}\n')
    return repo


def setup(runner: Runner, ws: Path, script: str, *, mode: str = "required", venv_dir: Path | None = None,
          env: dict[str, str] | None = None, python: str | None = None,
          cache_home: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The action's setup step: the module, run by the runner's interpreter, on ``script``."""
    venv_dir = venv_dir or ws.parent / "setup-venv"
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "GITHUB_OUTPUT")}
    full = {**base, "PYTHONPATH": str(runner.gate_site), "HOME": str(ws.parent / "home"),
            "GITHUB_TOKEN": TOKEN, "ACTIONS_RUNTIME_TOKEN": TOKEN, "PLAIN_SETTING": "kept",
            "GITHUB_OUTPUT": str(ws.parent / "outputs"), **(env or {})}
    argv = [python or runner.python, "-P", "-m", "gpu_gate.github.setup_sandbox", "--venv", str(venv_dir),
            "--readonly", ".gpu-gate/cache", "--readonly", "gpu-gate-report", "--sandbox", mode,
            *(["--cache-home", str(cache_home)] if cache_home else []), "--", "bash", "-euo", "pipefail", "-c", script]
    return subprocess.run(argv, cwd=ws, env=full, capture_output=True, text=True, timeout=300)


def log(res: subprocess.CompletedProcess[str]) -> str:
    return res.stdout + res.stderr


# --- .git ---------------------------------------------------------------------------------------------


@needs_bwrap
def test_setup_cannot_rewrite_git_and_can_read_it(runner: Runner, ws: Path) -> None:
    head = git(ws, "rev-parse", "HEAD")
    attack = "echo 0000000000000000000000000000000000000000 > .git/refs/heads/main"
    res = setup(runner, ws, attack)
    assert res.returncode != 0 and "Read-only file system" in log(res), log(res)
    res = setup(runner, ws, "echo 'ref: refs/heads/evil' > .git/HEAD")
    assert res.returncode != 0, log(res)
    res = setup(runner, ws, "mv .git .git-aside")
    assert res.returncode != 0, log(res)
    assert git(ws, "rev-parse", "HEAD") == head and (ws / ".git").is_dir()
    # the twin: a build that reads git (setuptools-scm, a version from `git describe`)
    twin = setup(runner, ws, 'test "$(git rev-parse HEAD)" = ' + head)
    assert twin.returncode == 0, log(twin)


def test_unsandboxed_the_git_attack_succeeds(runner: Runner, ws: Path) -> None:
    res = setup(runner, ws, "echo 0000000000000000000000000000000000000000 > .git/refs/heads/main", mode="off")
    assert res.returncode == 0, log(res)
    assert "::warning title=gpu-gate::setup runs WITHOUT a sandbox" in res.stdout
    assert (ws / ".git" / "refs" / "heads" / "main").read_text().startswith("0000")


# --- the result cache and the report directory ----------------------------------------------------------


@needs_bwrap
def test_setup_cannot_plant_a_cache_entry_and_can_read_the_cache(runner: Runner, ws: Path) -> None:
    entry = ws / ".gpu-gate" / "cache" / "ab" / "ab12.json"
    res = setup(runner, ws, "echo '{\"result\": \"forged\"}' > .gpu-gate/cache/ab/cd34.json")
    assert res.returncode != 0 and not (entry.parent / "cd34.json").exists(), log(res)
    res = setup(runner, ws, "echo forged > .gpu-gate/cache/ab/ab12.json")
    assert res.returncode != 0 and "forged" not in entry.read_text(), log(res)
    assert setup(runner, ws, "cat .gpu-gate/cache/ab/ab12.json").returncode == 0, "reading it is fine"


@needs_bwrap
def test_setup_cannot_put_a_new_cache_in_place_of_the_protected_one(runner: Runner, ws: Path) -> None:
    """The cache's parent is writable: moving it aside and making a new cache there works inside the
    sandbox, so the step checks afterwards that the protected paths are the very ones they were."""
    swap = "mv .gpu-gate .aside && mkdir -p .gpu-gate/cache/ab && echo forged > .gpu-gate/cache/ab/cd34.json"
    res = setup(runner, ws, swap)
    assert res.returncode == 1, log(res)
    assert "::error title=gpu-gate::setup changed what gpu-gate trusts: " in res.stdout
    assert "/.gpu-gate/cache was replaced" in res.stdout
    assert not (ws.parent / "outputs").exists() or "worker-python" not in (ws.parent / "outputs").read_text()
    # a report directory that did not exist must not exist afterwards either
    res = setup(runner, ws, "mkdir -p gpu-gate-report && echo '{}' > gpu-gate-report/results.json")
    assert res.returncode == 1 and "gpu-gate-report was created" in res.stdout, log(res)


def test_unsandboxed_the_cache_attack_succeeds(runner: Runner, ws: Path) -> None:
    res = setup(runner, ws, "echo forged > .gpu-gate/cache/ab/cd34.json", mode="off")
    assert res.returncode == 0 and (ws / ".gpu-gate" / "cache" / "ab" / "cd34.json").exists(), log(res)


# --- a runner that keeps state between jobs: setup's caches stay with the job ------------------------


@needs_bwrap
def test_with_a_cache_of_the_jobs_own_setup_leaves_nothing_in_the_runners_home(runner: Runner, ws: Path) -> None:
    """setup-cache: job. A later job on a persistent runner installs from ~/.cache/pip: a pull request
    that plants a wheel there reaches it. With the job's own cache directory, ~/.cache is read-only
    to setup, and pip, torch and the rest put their caches where the job's temporary files go."""
    home_cache = ws.parent / "home" / ".cache"
    home_cache.mkdir(parents=True)
    job_cache = ws.parent / "runner-temp" / "gpu-gate-setup-cache"
    attack = "mkdir -p ~/.cache/pip/wheels && echo planted > ~/.cache/pip/wheels/tinypkg-9.9-py3-none-any.whl"
    res = setup(runner, ws, attack, cache_home=job_cache)
    # refused where the home is on a read-only mount; under /tmp (as here) it lands in the sandbox's
    # private /tmp and is gone with it: either way, nothing reaches the runner's ~/.cache
    assert not (home_cache / "pip").exists(), log(res)
    assert res.returncode == 0 or "Read-only file system" in log(res), log(res)
    twin = setup(runner, ws, 'mkdir -p "$XDG_CACHE_HOME/pip" && echo cached > "$XDG_CACHE_HOME/pip/entry"',
                 cache_home=job_cache)
    assert twin.returncode == 0 and (job_cache / "pip" / "entry").read_text() == "cached\n", log(twin)
    assert f"writable {ws}, " in twin.stdout and str(job_cache) in twin.stdout


@needs_bwrap
def test_by_default_setup_writes_the_runners_cache_as_before(runner: Runner, ws: Path) -> None:
    """The attack above, with the default (setup-cache: runner): it reaches ~/.cache. Fine on an
    ephemeral runner, whose home goes with the job; this is what `job` is for."""
    res = setup(runner, ws, "mkdir -p ~/.cache/pip/wheels && echo planted > ~/.cache/pip/wheels/t.whl")
    assert res.returncode == 0 and (ws.parent / "home" / ".cache" / "pip" / "wheels" / "t.whl").exists(), log(res)


# --- gpu-gate's own code and the runner's interpreter --------------------------------------------------


@needs_bwrap
def test_setup_cannot_write_gpu_gates_package_or_the_runners_site_packages(runner: Runner, ws: Path) -> None:
    harness = runner.package / "judge" / "job.py"
    before = harness.read_text()
    res = setup(runner, ws, f"echo 'import os' >> {harness}")
    assert res.returncode != 0 and harness.read_text() == before, log(res)
    res = setup(runner, ws, f"echo 'print(\"owned\")' > {runner.site / 'sitecustomize.py'}")
    assert res.returncode != 0 and not (runner.site / "sitecustomize.py").exists(), log(res)
    res = setup(runner, ws, f"echo 'import os' > {runner.site / 'zz-evil.pth'}")
    assert res.returncode != 0 and not (runner.site / "zz-evil.pth").exists(), log(res)
    # the twin: reading gpu-gate and importing from the runner's packages works (torch, pip)
    twin = setup(runner, ws, "python -c 'import gpu_gate, torch, pip'")
    assert twin.returncode == 0, log(twin)


def test_unsandboxed_the_site_packages_attack_succeeds(runner: Runner, ws: Path) -> None:
    res = setup(runner, ws, f"echo 'import os' >> {runner.package / 'judge' / 'job.py'}; "
                            f"echo 'X = 1' > {runner.site / 'sitecustomize.py'}", mode="off")
    assert res.returncode == 0 and (runner.site / "sitecustomize.py").exists(), log(res)
    assert (runner.package / "judge" / "job.py").read_text().endswith("import os\n")


# --- the environment and the processes ------------------------------------------------------------------


@needs_bwrap
def test_setup_sees_no_token_anywhere_and_keeps_plain_settings(runner: Runner, ws: Path) -> None:
    search = (f"if grep -rqs {TOKEN} /proc/[0-9]*/environ || env | grep -q {TOKEN}; then echo FOUND; fi; "
              'echo "plain=$PLAIN_SETTING files=${GITHUB_OUTPUT:-}"')
    res = setup(runner, ws, search)
    assert res.returncode == 0, log(res)
    assert "FOUND" not in res.stdout and "plain=kept files=\n" in res.stdout, res.stdout
    (warning,) = [ln for ln in res.stdout.splitlines() if ln.startswith("::warning title=gpu-gate::removed ")]
    assert "ACTIONS_RUNTIME_TOKEN" in warning and "GITHUB_TOKEN" in warning and TOKEN not in res.stdout


@needs_bwrap
def test_nothing_setup_started_outlives_it(runner: Runner, ws: Path) -> None:
    marker = "gg-leftover-" + os.urandom(4).hex()
    script = f"(exec -a {marker} sleep 300) > /dev/null 2>&1 &\necho started"
    res = setup(runner, ws, script)
    assert res.returncode == 0 and "started" in res.stdout, log(res)
    assert not _pids_named(marker), "a process of setup outlived the step"
    off = setup(runner, ws, script, mode="off")  # the contrast: unsandboxed, it lives on
    left = _pids_named(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert off.returncode == 0 and left, log(off)


def _pids_named(marker: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker in Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"):
                out.append(int(entry))
        except OSError:
            continue
    return out


# --- the legitimate setup: install, build -----------------------------------------------------------


@needs_bwrap
def test_pip_install_e_goes_into_the_setup_venv_and_build_outputs_land_in_the_workspace(
        runner: Runner, ws: Path, tmp_path: Path) -> None:
    script = (f"{PIP_INSTALL}\n"
              "mkdir -p build && echo built > build/out.txt && echo 'Y = 2' > src/tinypkg/_generated.py\n"
              'pip --version > build/pip.txt\n'
              'python -c "import sys; print(sys.prefix)" > build/prefix.txt')
    res = setup(runner, ws, script)
    assert res.returncode == 0, log(res)
    assert "Successfully installed tinypkg-0.1" in res.stdout
    assert res.stdout.splitlines()[-1].startswith("setup done (sandboxed)")
    venv_dir = tmp_path / "setup-venv"
    assert (ws / "build" / "out.txt").read_text() == "built\n" and (ws / "src" / "tinypkg" / "_generated.py").exists()
    assert (ws / "build" / "prefix.txt").read_text().strip() == str(venv_dir), "python is the setup venv's"
    assert "pip " in (ws / "build" / "pip.txt").read_text(), "a bare pip works too (the venv's shim)"
    assert (tmp_path / "outputs").read_text() == f"worker-python={venv_dir / 'bin' / 'python'}\n"
    probe = "import tinypkg, torch; print(tinypkg.X)"
    worker = subprocess.run([str(venv_dir / "bin" / "python"), "-I", "-c", probe], cwd=tmp_path,
                            capture_output=True, text=True)
    assert worker.stdout.strip() == "1", worker.stderr
    judge = subprocess.run([runner.python, "-I", "-c", probe], cwd=tmp_path, capture_output=True, text=True)
    assert "No module named 'tinypkg'" in judge.stderr, "the runner's interpreter does not see it"
    # a second setup step reuses the venv
    again = setup(runner, ws, "python -c 'import tinypkg'")
    assert again.returncode == 0, log(again)


# --- failing closed -----------------------------------------------------------------------------------


@pytest.fixture
def broken_bwrap(tmp_path: Path) -> dict[str, str]:
    """PATH with a bwrap that cannot start a sandbox (as under a kernel that refuses user namespaces)."""
    bindir = tmp_path / "fake-bin"
    bindir.mkdir()
    fake = bindir / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}


def test_setup_fails_closed_where_bubblewrap_cannot_run(runner: Runner, ws: Path, broken_bwrap: dict[str, str]) -> None:
    res = setup(runner, ws, "touch ran-anyway", env=broken_bwrap)
    assert res.returncode == 2 and not (ws / "ran-anyway").exists(), log(res)
    (line,) = [ln for ln in res.stdout.splitlines() if ln.startswith("::error")]
    assert line.startswith("::error title=gpu-gate::setup cannot run in a sandbox: bwrap cannot start a sandbox "
                           "here (bwrap: setting up uid map: Permission denied)"), line
    assert "setup-sandbox: auto" in line, "the message says how to allow an unsandboxed setup"


def test_auto_runs_setup_unsandboxed_where_bubblewrap_cannot_run_and_says_so(
        runner: Runner, ws: Path, broken_bwrap: dict[str, str]) -> None:
    res = setup(runner, ws, "touch ran", mode="auto", env=broken_bwrap)
    assert res.returncode == 0 and (ws / "ran").exists(), log(res)
    assert "::warning title=gpu-gate::setup runs WITHOUT a sandbox (bwrap cannot start a sandbox here" in res.stdout
    assert "setup done (unsandboxed)" in res.stdout


def test_a_failing_setup_command_fails_the_step_with_its_exit_code(runner: Runner, ws: Path) -> None:
    res = setup(runner, ws, "exit 7", mode="required" if BWRAP else "off")
    assert res.returncode == 7 and "::error title=gpu-gate::setup failed (exit code 7)" in res.stdout, log(res)


def test_the_bwrap_command_line_nests_read_only_paths_inside_writable_ones(tmp_path: Path) -> None:
    ws, venv_dir = tmp_path / "ws", tmp_path / "venv"
    (ws / ".git").mkdir(parents=True)
    (ws / "out").mkdir()
    lay = setup_sandbox.layout(ws, venv_dir, [ws / "out", ws / "missing"], tmp_path / "home" / ".cache")
    argv = setup_sandbox.bwrap_argv("bwrap", lay, ["make"])
    pairs = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i] in ("--bind", "--ro-bind")]
    real = ws.resolve()
    assert pairs.index(("--bind", str(real))) < pairs.index(("--ro-bind", str(real / ".git")))
    assert ("--ro-bind", str(real / "out")) in pairs and str(real / "missing") not in argv
    assert ("--ro-bind", str(sandbox.gate_package_dir())) in pairs
    assert "--unshare-net" not in argv and "--unshare-pid" in argv and argv[-2:] == ["--", "make"]


# --- the workers run with the setup venv; the judge does not ------------------------------------------


def test_worker_python_is_the_workers_interpreter_never_the_judges(tmp_path: Path) -> None:
    opts = ExecOptions(repo_root=tmp_path, gpus=(), worker_python=tmp_path / "venv" / "bin" / "python")
    assert argv.worker_argv(opts, tmp_path / "context.json", role="candidate", fd=3)[:2] == \
        [str(tmp_path / "venv" / "bin" / "python"), "-I"]
    assert argv.judge_argv(opts, tmp_path / "in.json", tmp_path / "out.json")[0] == sys.executable
    # the reference computes the truth: gpu-gate's own interpreter, as the judge
    assert argv.worker_argv(opts, tmp_path / "context.json", role="reference", fd=3)[0] == sys.executable
    # the base's code, whose results decide what is debt and whose kernels are kept: never a venv the
    # pull request's setup built (a .pth planted there would run in it)
    assert argv.worker_argv(opts, tmp_path / "context.json", role="base", fd=3)[0] == sys.executable
    box = sandbox.Available("bwrap", "bwrap", "test")
    layout = argv._layout(opts, None, tmp_path / "jobs" / "w", box)
    assert (tmp_path / "venv").resolve() in layout.readonly


def test_worker_python_is_checked_without_running_it(tmp_path: Path) -> None:
    with pytest.raises(GateError, match="no executable file there"):
        worker_python(str(tmp_path / "nope" / "bin" / "python"))
    lone = tmp_path / "lone" / "bin" / "python"
    lone.parent.mkdir(parents=True)
    lone.write_text("#!/bin/sh\ntouch ran\n")
    lone.chmod(0o755)
    with pytest.raises(GateError, match="not the interpreter of a virtual environment"):
        worker_python(str(lone))
    (lone.parent.parent / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.9.1\n")
    with pytest.raises(GateError, match="its venv is Python 3.9"):
        worker_python(str(lone))
    (lone.parent.parent / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion = {sys.version.split()[0]}\n")
    assert worker_python(str(lone)) == lone and not Path("ran").exists()
    assert cli.main(["check", "--repo", str(tmp_path), "--worker-python", str(tmp_path / "nope")]) == 2


SPEC = """\
import gpu_gate as gg
import tinypkg


@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2)
def tiny(x):
    return x * 2 * tinypkg.X
"""


def tiny_job(ws: Path) -> Job:
    """The equivalence job a plan makes for the spec: its sys.path from the pyproject.toml, as gpu-gate
    reads it (src/ first), so that the reference finds the package's sources to stand in for."""
    return Job(id="equivalence:gate/tiny_gate.py::tiny", check="equivalence", level="required", kernels=(),
               spec=SpecRef("gate/tiny_gate.py", "tiny"), options={"cases": 2, "growth": False, "shrink": False},
               python_path=python_path((ws / "pyproject.toml").read_bytes(), None))


@needs_bwrap
def test_a_spec_imports_what_setup_installed_through_the_worker_python(ws: Path, tmp_path: Path) -> None:
    """End to end: setup (sandboxed, run by this interpreter) installs the package into its venv; the
    sandboxed workers import it with that venv's python; without it they cannot (the package insists on
    its installation, the record pip writes: its sources alone on sys.path, with the name and version
    the worker answers for a tree's pyproject.toml, do not import)."""
    runner = Runner.__new__(Runner)  # this interpreter, gpu-gate as installed here
    runner.gate_site = sandbox.gate_package_dir().parent
    (ws / "src" / "tinypkg" / "__init__.py").write_text(
        "from importlib.metadata import distribution\n\n"
        "if not distribution('tinypkg').read_text('INSTALLER'):\n"
        "    raise ImportError('tinypkg is not installed')\n"
        "X = 1\n")
    res = setup(runner, ws, PIP_INSTALL, python=sys.executable)
    assert res.returncode == 0, log(res)
    (ws / "gate").mkdir()
    (ws / "gate" / "tiny_gate.py").write_text(SPEC)
    job = tiny_job(ws)
    box = sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap")
    common = {"repo_root": ws, "gpus": (), "timeout_s": 180, "sandbox": box, "hide": (ws / ".gpu-gate" / "cache",)}
    (with_venv,) = execute([job], ExecOptions(**common, worker_python=tmp_path / "setup-venv" / "bin" / "python"))
    assert with_venv.status is Status.PASSED, (with_venv.reason, [f.message for f in with_venv.findings])
    (without,) = execute([job], ExecOptions(**common))
    assert without.status is not Status.PASSED
    assert "tinypkg" in " ".join([without.reason or "", *(f.message for f in without.findings)])


# A .pth file setup plants in its venv runs in every process of that venv. Planted here: 2 becomes 3
# in every multiplication, so a kernel that multiplies by 3 where the reference says 2 would match a
# reference computed in the venv.
PLANTED = ("import torch; torch.Tensor.__mul__ = lambda a, b, _m=torch.Tensor.__mul__: _m(a, 3 if "
           "isinstance(b, int) and b == 2 else b)\n")
TRIPLES = SPEC.replace("return x * 2 * tinypkg.X", "return x * 3 * tinypkg.X")


@needs_bwrap
@pytest.mark.parametrize("planted", [True, False], ids=["planted-pth", "twin"])
def test_the_reference_never_runs_in_the_setup_venv(ws: Path, tmp_path: Path, planted: bool) -> None:
    """The attack: setup plants a .pth in its venv that rewrites torch for every process started
    with the venv's python. The workers that run the code under review use that python; the
    reference does not, so the wrong kernel still fails. The twin: without the .pth, the same setup
    and the correct kernel pass."""
    runner = Runner.__new__(Runner)
    runner.gate_site = sandbox.gate_package_dir().parent
    plant = f" && printf %s {shlex.quote(PLANTED)} > \"$(python -c 'import site; print(site.getsitepackages()[0])')/zz_planted.pth\""
    res = setup(runner, ws, PIP_INSTALL + (plant if planted else ""), python=sys.executable)
    assert res.returncode == 0, log(res)
    venv_python = tmp_path / "setup-venv" / "bin" / "python"
    probe = subprocess.run([str(venv_python), "-I", "-c", "import torch; print((torch.ones(1) * 2).item())"],
                           capture_output=True, text=True)
    assert probe.stdout.strip() == ("3.0" if planted else "2.0"), probe.stderr  # the .pth does run in the venv
    (ws / "gate").mkdir()
    (ws / "gate" / "tiny_gate.py").write_text(TRIPLES if planted else SPEC)
    job = tiny_job(ws)
    box = sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap")
    opts = ExecOptions(repo_root=ws, gpus=(), timeout_s=180, sandbox=box, hide=(ws / ".gpu-gate" / "cache",),
                       worker_python=venv_python)
    (result,) = execute([job], opts)
    if planted:
        assert result.status is Status.FAILED, (result.reason, [f.message for f in result.findings])
        assert any(f.kind == "mismatch" for f in result.findings), [f.message for f in result.findings]
    else:
        assert result.status is Status.PASSED, (result.reason, [f.message for f in result.findings])


# --- a result cache that only the policy names is never read in a workflow ----------------------
# The setup step protects the cache directory the workflow gives (cache-dir, or .gpu-gate/cache with
# cache: "true"). A directory that only the base policy names (cache: {dir: .ggc}) is writable by
# setup, which could plant passing entries there; the check then runs with --no-cache.


def _cache_settings(tmp_path: Path, cache: str, cache_dir: str) -> str:
    import yaml

    step = next(s for s in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"] if s.get("id") == "cache")
    out = tmp_path / "github_output"
    out.write_text("")
    env = {**os.environ, "GG_PY": sys.executable, "GG_MODE": "check", "GG_CACHE": cache, "GG_CACHE_DIR": cache_dir,
           "GG_EXTRA_ARGS": "", "GITHUB_OUTPUT": str(out)}
    subprocess.run(["bash", "-c", step["run"]], env=env, check=True)
    text = out.read_text()
    return text.split("extra-args<<GPU_GATE_EOF\n", 1)[1].split("GPU_GATE_EOF", 1)[0].strip()


def test_without_a_cache_directory_the_action_checks_with_no_cache(tmp_path: Path) -> None:
    assert _cache_settings(tmp_path, "false", "") == "--no-cache"


def test_a_cache_directory_the_workflow_gives_is_used(tmp_path: Path) -> None:
    """The twins: the directory the setup step protects is the one the check uses."""
    assert _cache_settings(tmp_path, "true", "") == "--cache-dir .gpu-gate/cache"
    assert _cache_settings(tmp_path, "false", "gg cache") == "--cache-dir 'gg cache'"


def test_the_reusable_workflow_checks_with_no_cache_without_its_directory() -> None:
    import yaml

    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "gate.yml").read_text())["jobs"]
    run = next(s["run"] for j in jobs.values() for s in j.get("steps", []) if "gpu_gate.cli check" in s.get("run", ""))
    assert 'cache=(--no-cache)' in run and 'cache=(--cache-dir "$GG_CACHE_DIR")' in run and '"${cache[@]}"' in run
    setup = next(s["run"] for j in jobs.values() for s in j.get("steps", []) if "setup_sandbox" in s.get("run", ""))
    assert '--readonly "${GG_CACHE_DIR:-.gpu-gate/cache}"' in setup

"""The minimal view (issue 39, part 2): a probe run in a job's bubblewrap sandbox finds none of what a
kernel could read and raise into a report (the checkout's .git with its token, /etc/shadow, the homes,
/run/credentials, the runner's other checkouts), and finds what a worker needs to run."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_gate import proc
from gpu_gate.executor import argv, sandbox, view
from gpu_gate.executor.options import ExecOptions

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")

PROBE = "import json, os, sys; print(json.dumps({p: os.path.lexists(p) for p in sys.argv[1:]}))"
TOKEN = "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3NlY3JldA=="


def _probe(tmp_path: Path, paths: list[str], python: str = sys.executable, code: str = PROBE) -> proc.ProcResult:
    """``code`` run by ``python`` in a job's sandbox over a checkout in ``tmp_path`` (whose .git holds a token)."""
    work = tmp_path / "_work"
    repo = work / "proj" / "proj"
    (repo / ".git").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "config").write_text(f'[http "https://github.com/"]\n\textraheader = {TOKEN}\n')
    (repo / "kernels.py").write_text("SCALE = 2\n")
    (work / "other" / "other" / ".git").mkdir(parents=True, exist_ok=True)  # another checkout of the runner
    jobdir = tmp_path / "jobs" / "w"
    jobdir.mkdir(parents=True, exist_ok=True)
    avail = sandbox.Available("bwrap", shutil.which("bwrap"), "bwrap")
    layout = argv._layout(ExecOptions(repo_root=repo, gpus=(), work_root=tmp_path / "jobs"), None, jobdir, avail)
    with tempfile.TemporaryFile() as count:
        full = sandbox.wrap(avail, layout, [python, "-I", "-c", code, *paths], count.fileno())
        return proc.run(full, cwd=repo, timeout=120, pass_fds=(count.fileno(),))


@pytest.fixture(autouse=True)
def _minimal_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are of the minimal view (on by default; see gpu_gate.executor.view)."""
    monkeypatch.setenv(view.SWITCH, "1")


def test_the_minimal_view_is_on_unless_the_runner_switches_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(view.SWITCH)
    assert ["--ro-bind", "/", "/"] != sandbox._bwrap_base()[:3] and "/usr" in sandbox._bwrap_base()
    monkeypatch.setenv(view.SWITCH, "0")
    assert sandbox._bwrap_base()[:3] == ["--ro-bind", "/", "/"]
    monkeypatch.setenv(view.SWITCH, "1")
    assert ["--ro-bind", "/", "/"] != sandbox._bwrap_base()[:3]


def test_a_probe_in_the_sandbox_finds_none_of_the_secrets_a_kernel_could_raise(tmp_path: Path) -> None:
    repo = tmp_path / "_work" / "proj" / "proj"
    hidden = ["/root", "/home", "/run", "/run/credentials", "/etc/shadow", "/etc/gshadow", "/var", "/mnt",
              str(repo / ".git" / "config"), str(tmp_path / "_work" / "other"), "/etc/ssh", "/etc/sudoers"]
    shown = [str(repo / "kernels.py"), sys.executable, "/etc/passwd", "/etc/ld.so.cache", "/usr/bin",
             "/tmp", "/proc/self", "/dev/null"]
    # a Python installed under a home (pyenv) is shown, and nothing else of that home
    python_homes = {str(p) for p in sandbox.python_install_paths() if str(p).startswith(("/root/", "/home/"))}
    hidden = [p for p in hidden if not any(h.startswith(p + "/") for h in python_homes)]
    hidden += ["/root/.bashrc", "/root/.gitconfig", "/root/.ssh", "/root/.config", "/root/.docker"]
    r = _probe(tmp_path, hidden + shown)
    assert r.ok, r.describe()
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert [p for p in hidden if seen[p]] == []
    assert [p for p in shown if not seen[p]] == []
    listing = "import json, os; print(json.dumps({d: sorted(os.listdir(d)) for d in ('/root', '/home') if os.path.isdir(d)}))"
    r = _probe(tmp_path, [], code=listing)
    for home, names in json.loads(r.stdout.strip().splitlines()[-1]).items():
        allowed = {h[len(home) + 1:].split("/")[0] for h in python_homes if h.startswith(home + "/")}
        assert set(names) <= allowed, (home, names)


def test_a_kernel_that_raises_the_checkouts_token_raises_nothing_of_it(tmp_path: Path) -> None:
    code = ("import sys\n"
            "try:\n"
            "    print(open(sys.argv[1]).read())\n"
            "except OSError as exc:\n"
            "    print(type(exc).__name__)\n")
    repo = tmp_path / "_work" / "proj" / "proj"
    r = _probe(tmp_path, [str(repo / ".git" / "config")], code=code)
    assert r.ok, r.describe()
    assert "FileNotFoundError" in r.stdout and TOKEN not in r.stdout + r.stderr


def test_python_torch_and_the_c_compiler_work_in_the_minimal_view(tmp_path: Path) -> None:
    code = ("import subprocess, sys, sysconfig\n"
            "import torch\n"
            "print(torch.ones(3).sum().item())\n"
            "cc = subprocess.run(['cc', '--version'], capture_output=True, text=True)\n"
            "print('cc', cc.returncode)\n"
            "print('ldconfig', subprocess.run(['/sbin/ldconfig', '-p'], capture_output=True).returncode)\n")
    r = _probe(tmp_path, [], code=code)
    assert r.ok, r.describe()
    assert "3.0" in r.stdout and "cc 0" in r.stdout and "ldconfig 0" in r.stdout, r.stdout


def _toolset(tmp_path: Path) -> Path:
    """A C compiler installed outside /usr, as a runner's image may have one (a toolset under /opt):
    ``bin/gcc`` a link to ``libexec/gcc-wrapper``, which runs the system's compiler."""
    root = tmp_path / "opt" / "toolset"
    (root / "bin").mkdir(parents=True)
    (root / "libexec").mkdir()
    wrapper = root / "libexec" / "gcc-wrapper"
    wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('gcc') or '/usr/bin/gcc'} \"$@\"\n")
    wrapper.chmod(0o755)
    (root / "bin" / "gcc").symlink_to("../libexec/gcc-wrapper")
    (tmp_path / "opt" / "private").mkdir()
    (tmp_path / "opt" / "private" / "token").write_text("secret\n")
    return root


COMPILE = ("import os, subprocess, sys, tempfile\n"
           "src = os.path.join(tempfile.mkdtemp(), 'k.c')\n"
           "open(src, 'w').write('int launch(void) { return 3; }\\n')\n"
           "try:\n"
           "    r = subprocess.run([os.environ['CC'], src, '-shared', '-fPIC', '-o', src + '.so'],\n"
           "                       capture_output=True, text=True)\n"
           "    print('built', r.returncode, r.stderr[-300:])\n"
           "except OSError as exc:\n"
           "    print('error', type(exc).__name__)\n"
           "print('private', os.path.lexists(sys.argv[1]))\n")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_a_compiler_named_by_cc_outside_usr_is_in_the_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton builds its launcher with ``$CC`` where set: a compiler outside /usr that the view did
    not show made every Triton job fail to build (FileNotFoundError), an honest change red. The
    compiler's installation is shown; the rest of the directory it sits in is not."""
    root = _toolset(tmp_path)
    monkeypatch.setenv("CC", str(root / "bin" / "gcc"))
    r = _probe(tmp_path, [str(tmp_path / "opt" / "private" / "token")], code=COMPILE)
    assert r.ok, r.describe()
    assert "built 0" in r.stdout and "private False" in r.stdout, r.stdout


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_the_first_gcc_on_path_outside_usr_is_in_the_view(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ``$CC``, Triton takes the first ``gcc`` on ``PATH``: the worker finds the same one."""
    root = _toolset(tmp_path)
    monkeypatch.setenv("PATH", f"{root / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    monkeypatch.delenv("CC", raising=False)
    code = COMPILE.replace("os.environ['CC']", "__import__('shutil').which('gcc')") + \
        "print('which', __import__('shutil').which('gcc'))\n"
    r = _probe(tmp_path, [str(tmp_path / "opt" / "private" / "token")], code=code)
    assert r.ok, r.describe()
    assert "built 0" in r.stdout and f"which {root / 'bin' / 'gcc'}" in r.stdout, r.stdout
    assert "private False" in r.stdout, r.stdout


def test_without_a_compiler_outside_usr_nothing_more_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "gcc")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("LD_LIBRARY_PATH", raising=False)
    assert view.compiler_dirs() == [] and view.driver_dirs() == []


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no C compiler")
def test_a_compiler_in_a_home_shows_itself_not_the_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``~/.local/bin/gcc`` (a user-level install or wrapper): its prefix is ``~/.local``, and showing the
    whole installation showed the home's ``.local`` with whatever keys and tokens live there. The
    program and the compiler's own directories are shown; ``~/.local/share/keyrings`` and ``~/.ssh``
    are not, and the compiler still builds."""
    home = tmp_path / "home" / "runner"
    local = home / ".local"
    (local / "bin").mkdir(parents=True)
    (local / "lib" / "gcc").mkdir(parents=True)
    wrapper = local / "bin" / "gcc"  # a wrapper script, as user-level installs write them
    wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('gcc') or '/usr/bin/gcc'} \"$@\"\n")
    wrapper.chmod(0o755)
    (local / "share" / "keyrings").mkdir(parents=True)
    (local / "share" / "keyrings" / "login.keyring").write_text("secret\n")
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CC", str(local / "bin" / "gcc"))
    shown = [str(p) for p in view.compiler_dirs()]
    assert str(local) not in shown and str(home) not in shown, shown
    assert str(local / "lib" / "gcc") in shown, shown
    code = COMPILE + "print('ssh', os.path.lexists(sys.argv[2]))\n"
    r = _probe(tmp_path, [str(local / "share" / "keyrings" / "login.keyring"), str(home / ".ssh" / "id_ed25519")],
               code=code)
    assert r.ok, r.describe()
    assert "built 0" in r.stdout and "private False" in r.stdout and "ssh False" in r.stdout, r.stdout


def test_a_compiler_deeper_in_a_home_shows_its_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler installed deeper in a home (a runner's tool cache, a conda) is an installation of its
    own: shown whole, as under /opt."""
    home = tmp_path / "home" / "runner"
    prefix = home / "actions-runner" / "_work" / "_tool" / "gcc" / "13" / "x64"
    (prefix / "bin").mkdir(parents=True)
    gcc = prefix / "bin" / "gcc"
    gcc.write_text("#!/bin/sh\nexit 0\n")
    gcc.chmod(0o755)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CC", str(gcc))
    assert prefix in view.compiler_dirs(), view.compiler_dirs()

"""The action's install step: gpu-gate for the interpreter that has the runner's torch, from the action's checkout."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from gpu_gate.github import install

ROOT = Path(__file__).resolve().parents[2]


def runner_python(tmp_path: Path, with_packages: bool) -> str:
    """A runner's interpreter, as a venv: with this venv's packages (torch, pydantic, ...) through a
    .pth file but without gpu-gate (the editable install's own .pth is not followed), or bare."""
    env_dir = tmp_path / "runner-venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = str(env_dir / "bin" / "python")
    if with_packages:
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        Path(site, "runner-stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def imports(python: str, pythonpath: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | ({"PYTHONPATH": pythonpath} if pythonpath else {})
    return subprocess.run([python, "-P", "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_an_interpreter_with_torch_but_no_gpu_gate_gets_it_from_the_checkout(tmp_path: Path) -> None:
    python = runner_python(tmp_path, with_packages=True)
    assert imports(python, "", "import gpu_gate").returncode != 0, "the runner's python must lack gpu-gate"
    assert imports(python, "", "import torch, pydantic").returncode == 0, "and have torch and the dependencies"
    out = install.install(python, ROOT, tmp_path / "gg")
    assert out["python"] == python and out["pythonpath"] == str(tmp_path / "gg" / "site")
    res = imports(python, out["pythonpath"], "import gpu_gate, torch; print(gpu_gate.__file__, torch.__file__)")
    assert res.returncode == 0, res.stderr
    gg_file, torch_file = res.stdout.split()
    assert gg_file.startswith(str(tmp_path / "gg" / "site")) and "torch" in torch_file
    assert not (tmp_path / "gg" / "deps").exists(), "nothing to fetch: the interpreter has the dependencies"
    path = json.loads(out["sys-path"])
    assert path[0] == out["pythonpath"] and sysconfig.get_paths()["purelib"] in path


def test_an_interpreter_that_already_has_this_version_is_used_as_it_is(tmp_path: Path) -> None:
    out = install.install(sys.executable, ROOT, tmp_path / "gg")
    assert out["pythonpath"] == "" and not (tmp_path / "gg").exists()


def test_missing_dependencies_are_named_by_requirement(tmp_path: Path) -> None:
    python = runner_python(tmp_path, with_packages=False)
    reqs = install.requirements(ROOT)
    assert install.missing(python, reqs) == reqs
    assert {install._name(r) for r in reqs} <= set(install.MODULES), "every dependency needs its module name"


def test_an_old_python_is_one_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "python3.9"
    fake.write_text("#!/bin/sh\necho 'Unknown option: -P' >&2\nexit 2\n")
    fake.chmod(0o755)
    with pytest.raises(SystemExit, match="is not Python 3.11 or newer"):
        install.install(str(fake), ROOT, tmp_path / "gg")


def test_without_a_checkout_the_installed_gpu_gate_is_used_or_the_error_says_what_to_pass(tmp_path: Path) -> None:
    out = install.install(sys.executable, None, tmp_path / "gg")
    assert out["pythonpath"] == "" and json.loads(out["sys-path"])
    with pytest.raises(SystemExit, match="pass gpu-gate-ref"):
        install.install(runner_python(tmp_path, with_packages=True), None, tmp_path / "gg")


# --- a pinned wheel or sdist (the action's package and package-sha256 inputs) ----------------------

import hashlib  # noqa: E402
import http.server  # noqa: E402
import io  # noqa: E402
import tarfile  # noqa: E402
import threading  # noqa: E402
import zipfile  # noqa: E402

from build_helpers import wheel_and_sdist  # noqa: E402


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A wheel and an sdist of this checkout."""
    return wheel_and_sdist(tmp_path_factory.mktemp("artifacts"))


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_a_pinned_artifact_is_what_the_interpreter_runs(kind: str, artifacts: tuple[Path, Path], tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = artifacts[0] if kind == "wheel" else artifacts[1]
    python = runner_python(tmp_path, with_packages=True)
    workspace = path.parent
    out = install.install(python, ROOT, tmp_path / "gg", (path.name, digest(path)), workspace)
    said = capsys.readouterr().out
    assert f"{path.name}: SHA-256 {digest(path)} as pinned" in said
    assert f"gpu-gate {install.action_version(ROOT)} from {path.name}, for {python}" in said
    res = imports(python, out["pythonpath"], "import gpu_gate.cli, gpu_gate; print(gpu_gate.__file__)")
    assert res.returncode == 0 and res.stdout.startswith(str(tmp_path / "gg" / "site")), res.stderr


def test_even_an_interpreter_with_gpu_gate_runs_the_pinned_artifact(artifacts: tuple[Path, Path],
                                                                    tmp_path: Path) -> None:
    wheel = artifacts[0]
    out = install.install(sys.executable, ROOT, tmp_path / "gg", (str(wheel), digest(wheel)))
    assert out["pythonpath"] == str(tmp_path / "gg" / "site")


def test_a_wrong_checksum_installs_nothing_and_says_so(artifacts: tuple[Path, Path], tmp_path: Path) -> None:
    wheel = artifacts[0]
    wrong = "0" * 64
    with pytest.raises(SystemExit) as err:
        install.install(sys.executable, ROOT, tmp_path / "gg", (str(wheel), wrong))
    assert str(err.value) == (f"::error title=gpu-gate::{wheel.name}: its SHA-256 is {digest(wheel)}, not the {wrong} "
                              "that package-sha256 pins; nothing was installed (the file changed or is not the one you "
                              "pinned: take both from the same release)")
    assert not (tmp_path / "gg").exists()
    with pytest.raises(SystemExit, match="is not a SHA-256 .64 hex digits."):
        install.install(sys.executable, ROOT, tmp_path / "gg", (str(wheel), "sha256:" + digest(wheel)))


def test_a_package_without_a_checksum_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="package and package-sha256 go together"):
        install.main([sys.executable, str(ROOT), str(tmp_path / "gg"), "--package", "dist/x.whl", "--sha256", ""])
    assert not (tmp_path / "gg").exists()


def test_a_package_of_another_version_is_refused(tmp_path: Path) -> None:
    wheel, _ = wheel_and_sdist(tmp_path / "other", version="0.0.9")
    with pytest.raises(SystemExit, match=r"the package is gpu-gate 0\.0\.9, the action is .*same release"):
        install.install(sys.executable, ROOT, tmp_path / "gg", (str(wheel), digest(wheel)))


def test_a_package_from_a_url(artifacts: tuple[Path, Path], tmp_path: Path) -> None:
    wheel = artifacts[0]
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(wheel.parent), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}"
        out = install.install(sys.executable, ROOT, tmp_path / "gg", (url, digest(wheel)))
        assert (Path(out["pythonpath"]) / "gpu_gate" / "__init__.py").is_file()
        with pytest.raises(SystemExit, match="could not download package .*missing.whl"):
            install.install(sys.executable, ROOT, tmp_path / "gg2", (url.replace(wheel.name, "missing.whl"), "a" * 64))
    finally:
        server.shutdown()


def test_an_archive_that_writes_outside_the_package_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in (("gpu-kernel-gate-0.1.0/gpu_gate/__init__.py", b'__version__ = "0.1.0"\n'),
                           ("gpu-kernel-gate-0.1.0/gpu_gate/../../../escaped.py", b"x = 1\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    sdist = tmp_path / "gpu_kernel_gate-0.1.0.tar.gz"
    sdist.write_bytes(buf.getvalue())
    with pytest.raises(SystemExit, match="refusing the archive member"):
        install.install(sys.executable, ROOT, tmp_path / "gg", (str(sdist), digest(sdist)))
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path / "gg" / "escaped.py").exists()
    zipped = tmp_path / "not_gpu_gate-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(zipped, "w") as z:
        z.writestr("other/__init__.py", "")
    with pytest.raises(SystemExit, match="holds no gpu_gate package"):
        install.install(sys.executable, ROOT, tmp_path / "gg", (str(zipped), digest(zipped)))

"""`gpu-gate vendor DIR`: the action copied into a repository, exactly what it runs, with a manifest."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_helpers import ROOT, build, source_tree
from gpu_gate import __version__
from gpu_gate.github import install
from conftest_git import GitRepo

DEST = ".github/actions/gpu-gate"


def gate(*args: str, cwd: Path, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run([sys.executable, "-P", "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=300)


def tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def expected_files() -> set[str]:
    package = {f"gpu_gate/{p}" for p in tree(ROOT / "gpu_gate")
               if "__pycache__" not in p and not p.startswith(("demo_repo/", "_action/")) and not p.endswith(".pyc")}
    return {"action.yml", "pyproject.toml", "LICENSE", "NOTICE", "VENDORED.json"} | package


def test_vendor_copies_exactly_what_the_action_runs_and_prints_the_step(make_repo) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    res = gate("vendor", DEST, cwd=r.path)
    assert res.returncode == 0, res.stderr
    dest = r.path / DEST
    got = tree(dest)
    assert set(got) == expected_files()
    for rel in ("action.yml", "LICENSE", "gpu_gate/github/install.py", "gpu_gate/cli.py"):
        source = ROOT / rel
        assert got[rel] == hashlib.sha256(source.read_bytes()).hexdigest(), rel
    manifest = json.loads((dest / "VENDORED.json").read_text())
    assert manifest["gpu_gate"] == __version__ and manifest["source"].startswith("a checkout of gpu-gate")
    assert manifest["files"] == {k: v for k, v in got.items() if k != "VENDORED.json"}
    assert f"uses: $/{DEST}  # gpu-gate {__version__}, vendored" in res.stdout
    assert "persist-credentials: false" in res.stdout and "fetch-depth: 0" in res.stdout
    assert "kernels.exclude" not in res.stdout + res.stderr, "the default policy leaves .github/ out of the kernels"


def test_the_vendored_copy_installs_for_a_runners_interpreter(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    assert gate("vendor", DEST, cwd=r.path).returncode == 0
    out = install.install(sys.executable, r.path / DEST, tmp_path / "gg")
    assert out["pythonpath"] == "", "this interpreter already has gpu-gate of the copy's version"
    from test_github_install import imports, runner_python

    python = runner_python(tmp_path, with_packages=True)
    out = install.install(python, r.path / DEST, tmp_path / "gg2")
    res = imports(python, out["pythonpath"], "import gpu_gate.cli, gpu_gate; print(gpu_gate.__file__)")
    assert res.returncode == 0 and res.stdout.startswith(str(tmp_path / "gg2" / "site")), res.stderr


def test_check_finds_every_change_to_the_copy_and_passes_it_untouched(make_repo) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    assert gate("vendor", DEST, cwd=r.path).returncode == 0
    ok = gate("vendor", "--check", DEST, cwd=r.path)
    assert ok.returncode == 0 and ok.stdout.strip() == f"{DEST}: gpu-gate {__version__}, intact"
    dest = r.path / DEST
    with (dest / "gpu_gate" / "verdict.py").open("a") as f:
        f.write("\nPASS_EVERYTHING = True\n")
    (dest / "gpu_gate" / "planted.py").write_text("print('hi')\n")
    (dest / "NOTICE").unlink()
    (dest / "gpu_gate" / "__pycache__").mkdir(exist_ok=True)
    (dest / "gpu_gate" / "__pycache__" / "cli.cpython-311.pyc").write_bytes(b"bytecode is not the copy")
    bad = gate("vendor", "--check", DEST, cwd=r.path)
    assert bad.returncode == 1
    assert bad.stderr.splitlines() == [f"{DEST}: changed: gpu_gate/verdict.py", f"{DEST}: missing: NOTICE",
                                       f"{DEST}: added: gpu_gate/planted.py"]
    assert bad.stdout.strip() == f"{DEST}: gpu-gate {__version__}, 3 file(s) differ from the vendored copy"


def test_vendoring_again_replaces_the_copy_and_a_foreign_directory_is_refused(make_repo) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {"README.md": "x\n", "tools/mine/keep.txt": "mine\n"})
    assert gate("vendor", DEST, cwd=r.path).returncode == 0
    stale = r.path / DEST / "gpu_gate" / "gone_in_this_release.py"
    stale.write_text("x = 1\n")
    assert gate("vendor", DEST, cwd=r.path).returncode == 0
    assert not stale.exists() and gate("vendor", "--check", DEST, cwd=r.path).returncode == 0
    refused = gate("vendor", "tools/mine", cwd=r.path)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == ("gpu-gate: error: tools/mine: not empty, and not a copy that `gpu-gate vendor` "
                                      "made (no VENDORED.json) (choose a new directory, e.g. .github/actions/gpu-gate)")
    assert (r.path / "tools/mine/keep.txt").read_text() == "mine\n"


def test_an_update_of_the_copy_is_no_kernel_change_under_the_default_policy(make_repo) -> None:  # type: ignore[no-untyped-def]
    """gpu-gate's own modules drive Triton and hold CUDA strings: under .github/ they are not the user's kernels."""
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    assert gate("vendor", DEST, cwd=r.path).returncode == 0
    r.commit("vendor gpu-gate", {})
    r.branch("update")
    for path in (r.path / DEST / "gpu_gate").rglob("*.py"):
        path.write_text(path.read_text() + "# a newer release\n")
    r.commit("update gpu-gate", {})
    res = gate("list-kernels", "--base", "main", "--head", "update", cwd=r.path)
    assert res.returncode == 0 and "no kernel changes" in res.stdout, res.stdout + res.stderr


def test_a_policy_that_reaches_into_the_copy_is_told_what_to_exclude(make_repo) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {".gpu-gate.yml": 'version: 1\nkernels: {include: ["**/*.py"], exclude: []}\n'})
    res = gate("vendor", "tools/gpu-gate", cwd=r.path)
    assert res.returncode == 0
    assert 'add "tools/gpu-gate/**" to kernels.exclude in .gpu-gate.yml' in res.stderr, res.stderr


def test_vendor_works_from_an_installed_wheel(tmp_path: Path, make_repo) -> None:  # type: ignore[no-untyped-def]
    wheel = build("wheel", source_tree(tmp_path / "src"), tmp_path / "dist")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    from_wheel = gate("vendor", "from-wheel", cwd=r.path, pythonpath=str(site))
    assert from_wheel.returncode == 0, from_wheel.stderr
    assert f"from the installed wheel of gpu-gate {__version__}" in from_wheel.stdout
    assert gate("vendor", "from-checkout", cwd=r.path).returncode == 0
    a, b = tree(r.path / "from-wheel"), tree(r.path / "from-checkout")
    a.pop("VENDORED.json"), b.pop("VENDORED.json")
    assert a == b, set(a) ^ set(b)


def test_a_copy_inside_the_package_it_copies_is_refused(tmp_path: Path) -> None:
    from gpu_gate.errors import GateError
    from gpu_gate.commands.vendor import Source, vendor

    package = tmp_path / "gpu_gate"
    package.mkdir()
    (package / "__init__.py").write_text("")
    with pytest.raises(GateError, match="inside the gpu_gate package it would copy"):
        vendor(package / "copy", Source(tmp_path, package, "a test"))
    assert not (package / "copy").exists()


def test_a_gpu_gate_without_its_action_files_says_where_to_vendor_from(tmp_path: Path) -> None:
    from gpu_gate.errors import GateError
    from gpu_gate.commands.vendor import find_source

    lone = tmp_path / "site" / "gpu_gate"
    lone.mkdir(parents=True)
    with pytest.raises(GateError, match="carries no action.yml to vendor"):
        find_source(lone)

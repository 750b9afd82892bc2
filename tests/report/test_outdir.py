"""Reports are written safely: a pull request that commits links where gpu-gate writes cannot make the
gate overwrite a file elsewhere, and a tracked path under the output or cache directory blocks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_gate.report import outdir
from test_cli import GOOD_SPEC, KERNEL, POLICY, gate


def _pr(make_repo, files: dict[str, str], links: dict[str, Path]):  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "README.md": "x\n"})
    r.branch("feature")
    for rel, target in links.items():
        (r.path / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, r.path / rel)
    r.commit("pr", {"csrc/double.cu": KERNEL, "gate/double_gate.py": GOOD_SPEC, **files})
    return r


def test_a_committed_link_at_a_report_path_writes_nothing_elsewhere(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    victim = tmp_path / "victim" / "usercustomize.pth"
    victim.parent.mkdir()
    r = _pr(make_repo, {}, {".gpu-gate/out/report.md": victim, ".gpu-gate/out/results.json": victim})
    p = gate("check", "--base", "main", cwd=r.path)
    assert not victim.exists(), victim.read_text()[:200]
    assert p.returncode == 1 and "tracked-output" in (r.path / ".gpu-gate" / "out" / "results.json").read_text()
    assert "the repository tracks .gpu-gate/out/report.md" in p.stdout + p.stderr
    assert not (r.path / ".gpu-gate" / "out" / "report.md").is_symlink()


def test_a_committed_link_as_the_report_directory_is_refused_and_the_reports_go_elsewhere(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    elsewhere = tmp_path / "dotfiles"
    elsewhere.mkdir()
    r = _pr(make_repo, {}, {".gpu-gate": elsewhere})
    p = gate("check", "--base", "main", cwd=r.path)
    assert list(elsewhere.iterdir()) == []
    assert "refused the report directory" in p.stderr and p.returncode == 1
    moved = Path(p.stderr.split("the reports are in ")[1].split()[0])
    assert (moved / "report.md").is_file() and "tracked-output" in (moved / "results.json").read_text()


def test_the_honest_twin_ignores_the_report_directory_and_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _pr(make_repo, {".gitignore": ".gpu-gate/\n"}, {})
    (r.path / ".gpu-gate" / "out").mkdir(parents=True)
    (r.path / ".gpu-gate" / "out" / "report.md").write_text("last run's report\n")  # a report of an earlier run
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "last run" not in (r.path / ".gpu-gate" / "out" / "report.md").read_text()


def test_writing_replaces_a_link_and_never_follows_it(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    (tmp_path / "out").mkdir()
    os.symlink(target, tmp_path / "out" / "report.md")
    outdir.write_text(tmp_path / "out" / "report.md", "new")
    assert target.read_text() == "keep" and (tmp_path / "out" / "report.md").read_text() == "new"
    with pytest.raises(outdir.UnsafeDirectory):
        os.symlink(tmp_path / "out", tmp_path / "linked")
        outdir.prepare(tmp_path / "linked" / "deeper", tmp_path)

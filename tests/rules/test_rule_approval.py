"""A maintainer's `/gpu-gate approve-rules <head sha>` lets the approvable rule findings through, in the
report that publishes; nothing else does (the author's own comment, even with write permission; a
member without write permission; an older commit's approval; the GPU-run approval `/gpu-gate approve`).
Real git repository, real check, the fake GitHub."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from github_server import FakeGitHub
from test_cli import gate
from test_pairing import KERNEL, NEW_KEYWORD, SPEC, _legacy_repo, _repo


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def _report(r, tmp_path: Path, gh: FakeGitHub, head: str, name: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    event = tmp_path / f"{name}.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {
        "number": 7, "user": {"login": "author"}, "head": {"sha": head, "repo": {"full_name": "o/r"}},
        "base": {"sha": r.git("rev-parse", "main"), "repo": {"full_name": "o/r"}}}}))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r",
           "GITHUB_EVENT_PATH": str(event), "GITHUB_SHA": head, "GITHUB_TOKEN": gh.token,
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_WORKFLOW": "gpu", "GITHUB_JOB": "gate"}
    p = gate("report", ".gpu-gate/out/results.json", "--out", f"reports-{name}", "--github", cwd=r.path, env=env)
    return p.returncode, p.stdout + p.stderr


@pytest.fixture
def judged(make_repo, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A checked pull request whose only blocking finding is approvable: a new spec over a kernel the
    base had."""
    r = _legacy_repo(make_repo)
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    return r, r.git("rev-parse", "feature")


def test_only_a_maintainers_approval_of_the_judged_commit_lets_a_new_spec_through(  # type: ignore[no-untyped-def]
        judged, tmp_path: Path, gh: FakeGitHub) -> None:
    r, head = judged
    gh.set_permission("author", "write")  # the author can push to the repository: not approve its own rules
    gh.set_permission("reader", "read")  # a member of the organisation who cannot push here
    gh.set_permission("maintainer", "write")
    code, text = _report(r, tmp_path, gh, head, "none")
    assert code == 1 and "/gpu-gate approve-rules" in text, text
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "author", "MEMBER")  # the author's own
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "reader", "MEMBER")  # no write permission
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "passer-by", "CONTRIBUTOR")
    gh.add_comment(7, f"/gpu-gate approve-rules {'0' * 40}", "maintainer", "MEMBER")  # another commit
    gh.add_comment(7, f"/gpu-gate approve {head}", "maintainer", "MEMBER")  # may run on a GPU: not its rules
    code, text = _report(r, tmp_path, gh, head, "others")
    assert code == 1, text
    assert "approved for" not in text, text
    gh.add_comment(7, f"read the new spec.\n/gpu-gate approve-rules {head}", "maintainer", "MEMBER")
    code, text = _report(r, tmp_path, gh, head, "approved")
    assert code == 0, text
    assert f"[approved for {head[:12]} by maintainer]" in text
    assert "spec legacy_gate is new, and judges lib/legacy.py, which the base had" in text
    assert not gh.violations, gh.violations
    asked = {c.path.rsplit("/", 2)[-2] for c in gh.calls("repos/get-collaborator-permission-level")}
    assert asked == {"author", "reader", "maintainer"} - {"author"}  # the author is never asked about


def test_an_approval_whose_permission_cannot_be_read_lets_nothing_through(  # type: ignore[no-untyped-def]
        judged, tmp_path: Path, gh: FakeGitHub) -> None:
    r, head = judged
    gh.set_permission("maintainer", "write")
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "maintainer", "OWNER")
    gh.inject("repos/get-collaborator-permission-level", "forbidden", times=10)
    code, text = _report(r, tmp_path, gh, head, "unreadable")
    assert code == 1, text
    assert "no approval of the rule changes is taken into account" in text


def test_a_maintainers_approval_lets_a_spec_signature_change_through(  # type: ignore[no-untyped-def]
        make_repo, tmp_path: Path, gh: FakeGitHub) -> None:
    """The head's spec does more than adapt its call to a new signature (it fixes the output up after
    the call): the job judged by it fails as spec-signature-changed until a maintainer approves."""
    r = _repo(make_repo)
    spec = SPEC.replace("    return scale(x)\n", "    y = scale(x, block=64)\n    y.mul_(1.0)\n    return y\n")
    r.commit("block size", {"lib/scale.py": KERNEL.replace("def scale(x, alpha=2.0):", NEW_KEYWORD),
                            "gate/scale_gate.py": spec})
    head = r.git("rev-parse", "feature")
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == 1 and "spec-signature-changed" in p.stdout + p.stderr, p.stdout + p.stderr
    gh.set_permission("maintainer", "admin")
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "maintainer", "OWNER")
    code, text = _report(r, tmp_path, gh, head, "approved")
    assert code == 0, text
    assert f"[approved for {head[:12]} by maintainer]" in text
    assert "the head's spec changes more than the call to the kernel" in text

"""gpu_gate.git against real repositories built in tmp_path."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpu_gate import git
from gpu_gate.errors import GitError
from gpu_gate.git import FileChange
from conftest_git import GitRepo, git_env, make_repo, repo  # noqa: F401  (fixtures)


def by_path(changes: list[FileChange]) -> dict[str, FileChange]:
    return {c.path: c for c in changes}


def test_repo_root_from_a_subdirectory(repo: GitRepo) -> None:
    sub = repo.path / "a" / "b"
    sub.mkdir(parents=True)
    assert git.repo_root(sub) == repo.path.resolve()


def test_not_a_repository_names_the_path_and_the_fix(tmp_path: Path, git_env: None) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(GitError) as err:
        git.repo_root(plain)
    assert str(err.value) == (
        f"not a git repository: {plain} (run gpu-gate inside a git checkout, or pass --repo)")


def test_unknown_ref_suggests_fetching_it(repo: GitRepo) -> None:
    with pytest.raises(GitError) as err:
        git.resolve(repo.path, "release/9")
    assert str(err.value) == (
        "unknown git ref: release/9 (run `git fetch origin release/9` first, "
        "or pass --base/--head with a ref that exists)")


def test_unknown_base_in_changed_files(repo: GitRepo) -> None:
    with pytest.raises(GitError, match=r"^unknown git ref: origin/main "):
        git.changed_files(repo.path, "origin/main", "HEAD")


def test_rename_delete_modify_add(repo: GitRepo) -> None:
    body = "".join(f"line {i}\n" for i in range(50))
    repo.commit("base", {"csrc/old.cu": body, "csrc/gone.cu": "x\n", "csrc/edit.cu": "a\n"})
    repo.branch("feature")
    repo.git("mv", "csrc/old.cu", "csrc/new.cu")
    (repo.path / "csrc/gone.cu").unlink()
    repo.commit("work", {"csrc/edit.cu": "b\n", "csrc/added.cuh": "y\n"})
    changes = by_path(git.changed_files(repo.path, "main", "HEAD"))
    assert changes == {
        "csrc/new.cu": FileChange("csrc/new.cu", "renamed", old_path="csrc/old.cu"),
        "csrc/gone.cu": FileChange("csrc/gone.cu", "deleted"),
        "csrc/edit.cu": FileChange("csrc/edit.cu", "modified"),
        "csrc/added.cuh": FileChange("csrc/added.cuh", "added"),
    }


def test_binary_files_are_flagged(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("bin", {"data/blob.bin": bytes(range(256)) * 4, "text.txt": "t\n"})
    changes = by_path(git.changed_files(repo.path, "main", "HEAD"))
    assert changes["data/blob.bin"].binary is True
    assert changes["text.txt"].binary is False


def test_binary_rename_is_flagged_at_its_new_path(repo: GitRepo) -> None:
    repo.commit("bin", {"a.bin": bytes(range(256)) * 8})
    repo.branch("feature")
    repo.git("mv", "a.bin", "b.bin")
    repo.commit("mv")
    [change] = git.changed_files(repo.path, "main", "HEAD")
    assert change == FileChange("b.bin", "renamed", old_path="a.bin", binary=True)


def test_awkward_file_names_survive(repo: GitRepo) -> None:
    names = ["with space.cu", "ünïcødé/kernel.cuh", "new\nline.py", "tab\there.cu", 'quote"d.cu']
    repo.branch("feature")
    repo.commit("odd", {n: "x\n" for n in names})
    assert sorted(c.path for c in git.changed_files(repo.path, "main", "HEAD")) == sorted(names)
    assert set(names) <= set(git.list_files(repo.path, "HEAD"))
    assert git.show(repo.path, "HEAD", "new\nline.py") == b"x\n"


def test_three_dot_ignores_changes_made_on_base_after_branching(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("feature work", {"mine.cu": "1\n"})
    repo.checkout("main")
    repo.commit("main moves on", {"theirs.cu": "2\n"})
    repo.checkout("feature")
    assert [c.path for c in git.changed_files(repo.path, "main", "feature")] == ["mine.cu"]
    # The two-dot diff (what three-dot must not be) would show the base's file as deleted.
    two_dot = by_path(git.diff(repo.path, git.resolve(repo.path, "main"), git.resolve(repo.path, "feature")))
    assert two_dot["theirs.cu"].status == "deleted"


def test_empty_diff(repo: GitRepo) -> None:
    repo.branch("feature")
    assert git.changed_files(repo.path, "main", "HEAD") == []


def test_detached_head_works(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("k", {"k.cu": "k\n"})
    repo.git("checkout", "-q", "--detach", "HEAD")
    assert git.is_detached(repo.path) is True
    assert [c.path for c in git.changed_files(repo.path, "main", "HEAD")] == ["k.cu"]


def test_on_a_branch_is_not_detached(repo: GitRepo) -> None:
    assert git.is_detached(repo.path) is False


def test_no_merge_base_is_a_clear_error(repo: GitRepo) -> None:
    repo.git("checkout", "-q", "--orphan", "island")
    repo.git("rm", "-rq", "--cached", ".")
    repo.commit("unrelated", {"other.txt": "o\n"})
    with pytest.raises(GitError) as err:
        git.changed_files(repo.path, "main", "island")
    assert str(err.value) == (
        "main and island have no common history (no merge base) "
        "(pass --base with a branch or commit that the head was built on)")


def _origin_with_diverged_branches(make_repo) -> tuple[GitRepo, str]:  # type: ignore[no-untyped-def]
    origin = make_repo("origin")
    for i in range(5):
        origin.commit(f"main {i}", {f"m{i}.txt": f"{i}\n"})
    fork_point = origin.git("rev-parse", "HEAD")
    origin.branch("feature")
    for i in range(3):
        origin.commit(f"feature {i}", {f"f{i}.cu": f"{i}\n"})
    origin.checkout("main")
    for i in range(3):
        origin.commit(f"main later {i}", {f"later{i}.txt": f"{i}\n"})
    return origin, fork_point


def _shallow_clone(origin: GitRepo, dest: Path) -> GitRepo:
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{origin.path}",
                    str(dest)], check=True)
    clone = GitRepo(dest)
    clone.git("fetch", "-q", "--depth", "1", "origin", "main:refs/remotes/origin/main")
    assert clone.git("rev-parse", "--is-shallow-repository") == "true"
    return clone


def test_shallow_clone_is_deepened_to_find_the_merge_base(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    origin, fork_point = _origin_with_diverged_branches(make_repo)
    clone = _shallow_clone(origin, tmp_path / "clone")
    assert git.merge_base(clone.path, "origin/main", "HEAD") == fork_point
    assert sorted(c.path for c in git.changed_files(clone.path, "origin/main", "HEAD")) == ["f0.cu", "f1.cu", "f2.cu"]


def test_shallow_checkout_fetches_a_missing_base_then_deepens(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    origin, fork_point = _origin_with_diverged_branches(make_repo)
    main_sha = origin.git("rev-parse", "main")
    subprocess.run(["git", "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{origin.path}",
                    str(tmp_path / "ci")], check=True)
    ci = GitRepo(tmp_path / "ci")
    assert subprocess.run(["git", "cat-file", "-e", main_sha], cwd=ci.path).returncode != 0
    assert git.merge_base(ci.path, main_sha, "HEAD") == fork_point
    assert git.merge_base(ci.path, "origin/main", "HEAD") == fork_point


def test_unknown_remote_branch_suggests_the_branch_name(repo: GitRepo) -> None:
    with pytest.raises(GitError) as err:
        git.resolve(repo.path, "origin/dev")
    assert str(err.value) == (
        "unknown git ref: origin/dev (run `git fetch origin dev` first, "
        "or pass --base/--head with a ref that exists)")


def test_shallow_clone_without_remote_says_to_fetch_full_history(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    origin, _ = _origin_with_diverged_branches(make_repo)
    clone = _shallow_clone(origin, tmp_path / "clone")
    clone.git("remote", "remove", "origin")
    clone.git("update-ref", "refs/heads/base", clone.git("rev-parse", "FETCH_HEAD"))
    with pytest.raises(GitError) as err:
        git.merge_base(clone.path, "base", "HEAD")
    assert str(err.value) == (
        "cannot find the merge base of base and HEAD: this is a shallow clone "
        "(set `fetch-depth: 0` on actions/checkout, or run `git fetch --unshallow`)")


def test_ten_thousand_changed_files(repo: GitRepo) -> None:
    repo.branch("feature")
    for i in range(10_000):
        repo.write(f"d{i % 50}/file {i}.cu", f"// {i}\n")
    repo.commit("many")
    start = time.monotonic()
    changes = git.changed_files(repo.path, "main", "HEAD")
    elapsed = time.monotonic() - start
    assert len(changes) == 10_000
    assert {c.status for c in changes} == {"added"}
    assert "d7/file 7.cu" in by_path(changes)
    assert elapsed < 5.0


def test_read_blobs_reads_many_files_in_one_call(repo: GitRepo) -> None:
    repo.commit("files", {f"f{i}.py": f"x = {i}\n" for i in range(300)} | {"b.bin": b"\0\n\xff" * 100})
    snap = git.Snapshot(repo.path, "HEAD")
    contents = snap.read_many([f"f{i}.py" for i in range(300)] + ["b.bin", "missing.py"])
    assert contents["f123.py"] == b"x = 123\n"
    assert contents["b.bin"] == b"\0\n\xff" * 100
    assert "missing.py" not in contents


def test_worktree_listing_includes_untracked_but_not_ignored(repo: GitRepo) -> None:
    repo.commit("ignore", {".gitignore": "build/\n"})
    repo.write("new_spec.py", "x = 1\n")
    repo.write("build/out.py", "x = 2\n")
    files = git.list_files(repo.path, None)
    assert "new_spec.py" in files and "README.md" in files
    assert "build/out.py" not in files


def _event(tmp_path: Path, payload: dict[str, object], name: str) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(payload))
    return {"GITHUB_EVENT_PATH": str(path), "GITHUB_EVENT_NAME": name}


def test_event_refs_pull_request(tmp_path: Path) -> None:
    env = _event(tmp_path, {"pull_request": {"base": {"sha": "b" * 40}, "head": {"sha": "h" * 40}}}, "pull_request")
    assert git.github_event_refs(env) == ("b" * 40, "h" * 40)


def test_event_refs_push(tmp_path: Path) -> None:
    env = _event(tmp_path, {"before": "1" * 40, "after": "2" * 40}, "push")
    assert git.github_event_refs(env) == ("1" * 40, "2" * 40)


def test_event_refs_push_of_a_new_branch_has_no_base(tmp_path: Path) -> None:
    env = _event(tmp_path, {"before": "0" * 40, "after": "2" * 40}, "push")
    assert git.github_event_refs(env) is None


def test_event_refs_outside_actions() -> None:
    assert git.github_event_refs({}) is None
    assert git.github_event_refs({"GITHUB_EVENT_PATH": os.devnull}) is None


def test_changed_lines_are_the_head_side_of_each_hunk(repo: GitRepo) -> None:
    body = "".join(f"line {i}\n" for i in range(1, 21))
    repo.commit("base", {"k/a.py": body, "k/same.py": "x\n"})
    repo.branch("feature")
    lines = body.splitlines(keepends=True)
    lines[4] = "rewritten 5\n"  # line 5 rewritten
    del lines[10]  # old line 11 deleted: the hunk sits after line 10
    lines[14:14] = ["new a\n", "new b\n"]  # two lines added as lines 15 and 16
    repo.commit("work", {"k/a.py": "".join(lines), "k/added.py": "1\n2\n3\n"})
    base = git.merge_base(repo.path, "main", "HEAD")
    want = {"k/a.py": [(5, 5), (10, 10), (15, 16)], "k/added.py": [(1, 3)]}
    assert git.changed_lines(repo.path, base, "HEAD", ["k/a.py", "k/same.py", "k/added.py"]) == want
    # against the work tree: an untracked file is all changed
    (repo.path / "k" / "loose.py").write_text("a\nb\n")
    got = git.changed_lines(repo.path, base, None, ["k/a.py", "k/loose.py"])
    assert got == {"k/a.py": want["k/a.py"], "k/loose.py": [(1, 2)]}
    assert git.changed_lines(repo.path, base, "HEAD", []) == {}


def test_answers_about_commits_are_kept_and_the_work_tree_is_read_afresh(repo: GitRepo,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A commit named by its full id never changes: its tree and its diffs are read once per
    process. A branch, a short id or the work tree may change under the run, and are asked again."""
    first = git.resolve(repo.path, "HEAD")
    repo.commit("second", {"b.txt": "b\n"})
    second = git.resolve(repo.path, "HEAD")
    calls: list[list[str]] = []
    real = git._capture_now

    def counted(r, args, input):  # type: ignore[no-untyped-def]
        calls.append(list(args))
        return real(r, args, input)

    monkeypatch.setattr(git, "_capture_now", counted)
    for _ in range(2):
        assert "b.txt" in git.list_tree(repo.path, second)
        assert [c.path for c in git.diff(repo.path, first, second)] == ["b.txt"]
    assert sum(c[0] == "ls-tree" for c in calls) == 1 and sum(c[0] == "diff" for c in calls) == 2
    calls.clear()
    for _ in range(2):
        git.list_tree(repo.path, "HEAD")
        git.list_tree(repo.path, second[:12])
    assert sum(c[0] == "ls-tree" for c in calls) == 4
    calls.clear()
    (repo.path / "b.txt").write_text("edited\n")
    assert [c.path for c in git.diff(repo.path, second, None)] == ["b.txt"]
    (repo.path / "c.txt").write_text("new\n")
    assert sorted(c.path for c in git.diff(repo.path, second, None)) == ["b.txt", "c.txt"]
    assert sum(c[0] == "diff" for c in calls) == 4
    # blobs are content-addressed: read once
    oid = git.list_tree(repo.path, second)["b.txt"]
    calls.clear()
    assert git.read_blobs(repo.path, [oid]) == {oid: b"b\n"} == git.read_blobs(repo.path, [oid])
    assert sum(c[0] == "cat-file" for c in calls) == 1

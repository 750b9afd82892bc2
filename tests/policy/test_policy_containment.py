"""Policy files stay in the repository: `extends:` and symbolic links cannot read a file outside it,
and the error never shows what is there. YAML that the reader refuses is a path:line:col error."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest_git import GitRepo
from gpu_gate.errors import PolicyError
from gpu_gate.policy import load_policy, validate_policy_file
from test_cli import gate

SECRET = "s3cr3t-token-value"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside" / "secret.yml"
    path.parent.mkdir()
    path.write_text(f"{SECRET}: 1\n")
    return path


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo" / "proj"
    root.mkdir(parents=True)
    (root / ".git").mkdir()
    return root


@pytest.mark.parametrize("target", ["/etc/passwd", "{outside}", "../outside/secret.yml", "sub/../../x.yml",
                                    "~/secret.yml", "C:/secret.yml"])
def test_extends_outside_the_repository_is_one_line_that_shows_nothing(tmp_path: Path, outside: Path,
                                                                      target: str) -> None:
    root = _repo(tmp_path)
    value = target.format(outside=outside)
    (root / ".gpu-gate.yml").write_text(f"version: 1\nextends: {json.dumps(value)}\n")
    with pytest.raises(PolicyError) as err:
        load_policy(root)
    text = str(err.value)
    assert text.startswith(".gpu-gate.yml:2:10: extends: ") and "is outside the repository" in text
    assert len(text.splitlines()) == 1
    assert SECRET not in text and "root:" not in text


def test_the_cli_says_it_in_one_line(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": "version: 1\nextends: /etc/passwd\n"})
    line = (".gpu-gate.yml:2:10: extends: '/etc/passwd' is outside the repository (policy files must live in the "
            "repository: give a preset name or a path inside it)")
    p = gate("validate-policy", cwd=r.path)
    assert (p.returncode, p.stderr.strip()) == (2, line)
    p = gate("list-kernels", "--base", "main", cwd=r.path)
    assert (p.returncode, p.stderr.strip()) == (2, f"gpu-gate: error: {line}")


def test_a_symlink_out_of_the_repository_is_refused(tmp_path: Path, outside: Path) -> None:
    root = _repo(tmp_path)
    (root / "ci").mkdir()
    os.symlink(outside, root / "ci" / "base.yml")
    (root / ".gpu-gate.yml").write_text("version: 1\nextends: ci/base.yml\n")
    with pytest.raises(PolicyError) as err:
        load_policy(root)
    assert str(err.value).startswith("ci/base.yml: is a symbolic link to a file outside the repository")
    assert SECRET not in str(err.value)
    os.remove(root / ".gpu-gate.yml")
    os.symlink(outside, root / ".gpu-gate.yml")
    code, lines = validate_policy_file(root / ".gpu-gate.yml", strict=False)
    assert code == 2 and len(lines) == 1 and SECRET not in lines[0]


def test_paths_inside_the_repository_and_links_within_it_work(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    (root / "ci").mkdir()
    (root / "shared.yml").write_text("version: 1\nuncovered: warn\n")
    (root / "ci" / "gate.yml").write_text("version: 1\nextends: ../shared.yml\nrefusals: fail\n")
    loaded = load_policy(root, root / "ci" / "gate.yml")
    assert (loaded.policy.uncovered, loaded.policy.refusals) == ("warn", "fail")
    os.symlink("shared.yml", root / ".gpu-gate.yml")
    assert load_policy(root).policy.uncovered == "warn"


def test_the_base_revision_resolves_extends_inside_itself(make_repo) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {".gpu-gate.yml": "version: 1\nextends: ci/base.yml\n",
                                    "ci/base.yml": "version: 1\nextends: strict\nuncovered: fail\n",
                                    "csrc/k.cu": "__global__ void k() {}\n"})
    r.branch("feature")
    r.commit("relax the file the policy extends", {"ci/base.yml": "version: 1\nuncovered: ignore\n",
                                                   "csrc/k.cu": "__global__ void k() { return; }\n"})
    p = gate("plan", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["policy_source"].startswith(".gpu-gate.yml at base ")
    kinds = {f["kind"]: f["message"] for f in plan["findings"]}
    assert "uncovered" in kinds  # the base's chain (ci/base.yml at the base) is in force
    assert "uncovered: fail -> ignore" in kinds["rules-weakened"]


def test_a_symlink_out_of_the_tree_at_the_base_revision_is_refused(make_repo, outside: Path) -> None:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("proj", {"README.md": "x\n"})
    os.symlink(str(outside), r.path / ".gpu-gate.yml")
    r.commit("a policy that points outside")
    r.branch("feature")
    r.commit("change", {"csrc/k.cu": "__global__ void k() {}\n"})
    p = gate("plan", "--base", "main", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.strip().startswith("gpu-gate: error: .gpu-gate.yml: the target of this symbolic link is outside "
                                       "the repository"), p.stderr
    assert SECRET not in p.stdout + p.stderr


@pytest.mark.parametrize("text, at, code", [
    ("version: 1\nuncovered: fa\x07il\n", ".gpu-gate.yml:2:14:", "U+0007"),
    ("version: 1\x00\n", ".gpu-gate.yml:1:11:", "U+0000"),
    ("version: 1\nchecks:\n  memcheck: \x1b[31moff\n", ".gpu-gate.yml:3:13:", "U+001B"),
])
def test_characters_yaml_refuses_are_an_error_at_their_place(make_repo, text: str, at: str, code: str) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": text})
    p = gate("validate-policy", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.startswith(f"{at} invalid YAML: character {code} is not allowed"), p.stderr
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_an_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ["version: 1", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    lines.append("kernels: {include: *a8}")
    path = _repo(tmp_path) / ".gpu-gate.yml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(PolicyError) as err:
        load_policy(path.parent)
    assert str(err.value) == (".gpu-gate.yml:1:1: the policy expands to more than 100000 values through its aliases "
                              "(write the settings out; a policy needs no more than a few aliases)")


def test_deep_nesting_is_an_error_not_a_recursion_traceback(tmp_path: Path) -> None:
    path = _repo(tmp_path) / ".gpu-gate.yml"
    path.write_text("version: 1\nspecs: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(PolicyError) as err:
        load_policy(path.parent)
    assert str(err.value).startswith(".gpu-gate.yml:") and len(str(err.value).splitlines()) == 1


def test_a_key_with_a_line_break_character_stays_one_line(tmp_path: Path) -> None:
    # Found by the fuzz test: '\x85' and '\x1e' are line breaks to str.splitlines().
    path = _repo(tmp_path) / ".gpu-gate.yml"
    path.write_text('version: 1\nchecks: {"a\\x85b": required, "c\\x1ed": off}\n')
    with pytest.raises(PolicyError) as err:
        load_policy(path.parent)
    assert str(err.value).splitlines() == [
        ".gpu-gate.yml:2:10: unknown check 'a\\x85b' (valid checks: compile, equivalence, determinism, memcheck, "
        "racecheck, synccheck, initcheck, speed)",
        ".gpu-gate.yml:2:30: unknown check 'c\\x1ed' (valid checks: compile, equivalence, determinism, memcheck, "
        "racecheck, synccheck, initcheck, speed)"]

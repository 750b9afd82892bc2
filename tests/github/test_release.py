"""The release: .github/scripts/release.py against the fake GitHub, and release.yml end to end under act
(build, check, checksums, the release with its files, the moving major tag), from a tag of this checkout."""
from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from build_helpers import ROOT, source_tree
from github_server import FakeGitHub
from gpu_gate import __version__

SHA = "89abcdef0123456789abcdef0123456789abcdef"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("release_script", ROOT / ".github" / "scripts" / "release.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def gh(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        monkeypatch.setenv("GITHUB_API_URL", server.url)
        monkeypatch.setenv("GITHUB_REPOSITORY", "octo/gpu-gate")
        monkeypatch.setenv("GITHUB_TOKEN", server.token)
        yield server


def files(tmp_path: Path) -> list[Path]:
    dist = tmp_path / "dist"
    dist.mkdir()
    wheel, sdist = dist / "gpu_kernel_gate-1.2.3-py3-none-any.whl", dist / "gpu_kernel_gate-1.2.3.tar.gz"
    wheel.write_bytes(b"PK wheel bytes")
    sdist.write_bytes(b"\x1f\x8b sdist bytes")
    sums = dist / "SHA256SUMS"
    sums.write_text("".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}\n" for p in (wheel, sdist)))
    return [wheel, sdist, sums]


def test_a_release_is_drafted_filled_published_and_the_major_tag_follows(gh: FakeGitHub, tmp_path: Path) -> None:
    dist = files(tmp_path)
    assert script().main(["--tag", "v1.2.3", "--sha", SHA, *map(str, dist)]) == 0
    order = [r.operation for r in gh.requests]
    assert order == ["repos/get-release-by-tag", "repos/create-release", *["repos/upload-release-asset"] * 3,
                     "repos/update-release", "git/get-ref", "git/create-ref"]
    assert gh.calls("repos/create-release")[0].body["draft"] is True, "nobody sees a release without its files"
    (release,) = gh.releases.values()
    assert release["tag_name"] == "v1.2.3" and release["draft"] is False and release["make_latest"] == "true"
    assert f"- uses: octo/gpu-gate@{SHA} # v1.2.3" in release["body"]
    assert dist[2].read_text().strip() in release["body"]
    assert {a["name"]: a["data"] for a in gh.assets[release["id"]]} == {p.name: p.read_bytes() for p in dist}
    assert gh.refs == {"tags/v1": SHA} and gh.violations == []


def test_a_rerun_adds_only_what_is_missing_and_moves_the_tag_again(gh: FakeGitHub, tmp_path: Path) -> None:
    dist = files(tmp_path)
    assert script().main(["--tag", "v1.2.3", "--sha", SHA, *map(str, dist)]) == 0
    gh.refs["tags/v1"] = "0" * 40  # as if the tag still named the previous 1.x
    del gh.assets[next(iter(gh.releases))][1]  # an upload that was lost
    gh.requests.clear()
    assert script().main(["--tag", "v1.2.3", "--sha", SHA, *map(str, dist)]) == 0
    uploads = [r.path for r in gh.requests if r.operation == "repos/upload-release-asset"]
    assert len(uploads) == 1 and len(gh.releases) == 1
    assert {a["name"] for a in gh.assets[next(iter(gh.releases))]} == {p.name for p in dist}
    assert gh.refs == {"tags/v1": SHA} and gh.calls("git/update-ref")[0].body == {"sha": SHA, "force": True}
    assert gh.violations == []


def test_a_tag_that_is_no_version_or_no_checksums_publishes_nothing(gh: FakeGitHub, tmp_path: Path) -> None:
    dist = files(tmp_path)
    with pytest.raises(SystemExit, match="expected a tag vX.Y.Z"):
        script().main(["--tag", "v1", "--sha", SHA, *map(str, dist)])
    with pytest.raises(SystemExit, match="no SHA256SUMS among the files"):
        script().main(["--tag", "v1.2.3", "--sha", SHA, *map(str, dist[:2])])
    assert gh.requests == []


# --- release.yml under act ---------------------------------------------------------------------

act = pytest.importorskip("test_action_act")


def tagged(tmp_path: Path, tag: str) -> tuple[Path, Path, str]:
    """A repository of this checkout's sources and workflows, tagged ``tag``, and its push event."""
    repo = source_tree(tmp_path / "gpu-gate")
    for rel in (".github/workflows/release.yml", ".github/scripts/release.py"):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes((ROOT / rel).read_bytes())
    act.git(repo, "init", "-q", "-b", "main")
    act.git(repo, "add", "-A")
    act.git(repo, "commit", "-q", "-m", f"gpu-gate {__version__}")
    act.git(repo, "tag", tag)
    sha = act.git(repo, "rev-parse", "HEAD")
    event = tmp_path / "push.json"
    event.write_text(json.dumps({"ref": f"refs/tags/{tag}", "after": sha, "before": "0" * 40,
                                 "repository": {"full_name": "octo/gpu-gate"}, "pusher": {"name": "maintainer"}}))
    return repo, event, sha


@pytest.mark.slow
def test_the_release_workflow_under_act(tmp_path: Path) -> None:
    tag = f"v{__version__}"
    repo, event, sha = tagged(tmp_path, tag)
    with FakeGitHub() as gh:
        res = act.run_act(repo, event, gh, "release.yml", tmp_path / "run", tmp_path / "home", event_name="push",
                          repository="octo/gpu-gate")
        log = res.stdout + res.stderr
        assert res.returncode == 0, log[-8000:]
        assert f"releasing gpu-gate {__version__}" in log and "OK" in log  # the tag check, sha256sum --check
        (release,) = gh.releases.values()
        assets = {a["name"]: a["data"] for a in gh.assets[release["id"]]}
        wheel, sdist = f"gpu_kernel_gate-{__version__}-py3-none-any.whl", f"gpu_kernel_gate-{__version__}.tar.gz"
        assert set(assets) == {wheel, sdist, "SHA256SUMS"}
        sums = dict(reversed(line.split("  ")) for line in assets["SHA256SUMS"].decode().splitlines())
        assert sums == {n: hashlib.sha256(assets[n]).hexdigest() for n in (wheel, sdist)}
        names = zipfile.ZipFile(io.BytesIO(assets[wheel])).namelist()
        assert f"gpu_kernel_gate-{__version__}.dist-info/licenses/LICENSE" in names
        assert "gpu_gate/_action/action.yml" in names
        assert f"gpu_kernel_gate-{__version__}/LICENSE" in tarfile.open(fileobj=io.BytesIO(assets[sdist])).getnames()
        assert release["draft"] is False and release["tag_name"] == tag
        assert gh.refs == {f"tags/v{__version__.split('.')[0]}": sha} and gh.violations == []


@pytest.mark.slow
def test_a_tag_that_is_not_the_packages_version_releases_nothing_under_act(tmp_path: Path) -> None:
    repo, event, _ = tagged(tmp_path, "v9.9.9")
    with FakeGitHub() as gh:
        res = act.run_act(repo, event, gh, "release.yml", tmp_path / "run", tmp_path / "home", event_name="push",
                          repository="octo/gpu-gate")
        log = res.stdout + res.stderr
        assert res.returncode != 0
        assert f"tag v9.9.9, pyproject.toml {__version__}, gpu_gate {__version__}: they must agree" in log, log[-4000:]
        assert gh.requests == [] and not (tmp_path / "run" / "artifacts" / "dist").exists()

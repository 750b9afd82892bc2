"""Publish a gpu-gate release: the GitHub release of a version tag with its files, and the moving tag.

    python3 .github/scripts/release.py --tag v1.2.3 --sha COMMIT dist/*.whl dist/*.tar.gz dist/SHA256SUMS

Run by .github/workflows/release.yml's publish job, which holds ``contents: write`` and nothing
else, after the build job has built and checked the files. In order, so that nobody sees a release
without its files:

1. the release is created as a draft (or, on a re-run, the published one is taken up again);
2. every file is uploaded that the release does not have yet;
3. the release is published, as the latest;
4. the major tag (``v1`` for ``v1.2.3``) is moved to the release's commit, so that ``@v1`` follows
   the newest 1.x, created if it is the first release of that major version.

Standard library only. GITHUB_API_URL, GITHUB_REPOSITORY and GITHUB_TOKEN come from the
environment, as Actions sets them.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

API_VERSION = "2022-11-28"
TAG = re.compile(r"^v(?P<major>\d+)\.\d+\.\d+$")


class Api:
    def __init__(self, url: str, repository: str, token: str) -> None:
        self.url, self.repository, self.token = url.rstrip("/"), repository, token

    def call(self, method: str, path: str, body: Any = None, *, data: bytes | None = None,
             url: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
                   "X-GitHub-Api-Version": API_VERSION}
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        elif data is not None:
            headers["Content-Type"] = "application/octet-stream"
        target = url or f"{self.url}/repos/{self.repository}{path}"
        request = urllib.request.Request(target, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310 - the API's own URL
                return answer.status, json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def expect(self, ok: tuple[int, ...], method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, answer = self.call(method, path, body, **kw)
        if status not in ok:
            raise SystemExit(f"::error title=release::{method} {path or kw.get('url')}: {status} {answer}")
        return answer


def release_for(api: Api, tag: str, notes: str) -> dict[str, Any]:
    """The published release of ``tag`` (a re-run), else a new draft."""
    status, found = api.call("GET", f"/releases/tags/{urllib.parse.quote(tag)}")
    if status == 200:
        print(f"release {tag} exists already: adding what it lacks")
        return dict(found)
    return dict(api.expect((201,), "POST", "/releases", {"tag_name": tag, "name": f"gpu-gate {tag[1:]}",
                                                         "body": notes, "draft": True}))


def upload(api: Api, release: dict[str, Any], files: list[Path]) -> None:
    have = {a["name"] for a in release.get("assets", [])}
    base = release["upload_url"].split("{", 1)[0]
    for path in files:
        if path.name in have:
            print(f"  {path.name}: uploaded already")
            continue
        api.expect((201,), "POST", "", data=path.read_bytes(), url=f"{base}?name={urllib.parse.quote(path.name)}")
        print(f"  {path.name}: uploaded ({path.stat().st_size} bytes)")


def move_major_tag(api: Api, tag: str, sha: str) -> str:
    major = f"v{TAG.match(tag)['major']}"  # type: ignore[index]
    status, _ = api.call("GET", f"/git/ref/tags/{major}")
    if status == 200:
        api.expect((200,), "PATCH", f"/git/refs/tags/{major}", {"sha": sha, "force": True})
    else:
        api.expect((201,), "POST", "/git/refs", {"ref": f"refs/tags/{major}", "sha": sha})
    return major


def notes(tag: str, sha: str, repository: str, sums: str) -> str:
    return (f"gpu-gate {tag[1:]}, commit {sha}.\n\n"
            f"Pin the action by its commit:\n\n```yaml\n- uses: {repository}@{sha} # {tag}\n```\n\n"
            f"or install a file of this release with the action's `package` and `package-sha256` inputs. "
            f"SHA-256 of the files:\n\n```\n{sums.strip()}\n```\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tag", required=True, help="the version tag, vX.Y.Z")
    parser.add_argument("--sha", required=True, help="the commit the tag names")
    parser.add_argument("files", nargs="+", type=Path, help="the wheel, the sdist and SHA256SUMS")
    args = parser.parse_args(argv)
    if not TAG.match(args.tag) or not re.fullmatch(r"[0-9a-f]{40}", args.sha):
        raise SystemExit(f"::error title=release::{args.tag} {args.sha}: expected a tag vX.Y.Z and a full commit sha")
    sums = next((p for p in args.files if p.name == "SHA256SUMS"), None)
    if sums is None:
        raise SystemExit("::error title=release::no SHA256SUMS among the files: the build job writes it")
    env = os.environ
    api = Api(env.get("GITHUB_API_URL", "https://api.github.com"), env["GITHUB_REPOSITORY"], env["GITHUB_TOKEN"])
    release = release_for(api, args.tag, notes(args.tag, args.sha, api.repository, sums.read_text()))
    upload(api, release, args.files)
    if release.get("draft"):
        release = api.expect((200,), "PATCH", f"/releases/{release['id']}", {"draft": False, "make_latest": "true"})
    major = move_major_tag(api, args.tag, args.sha)
    print(f"released {args.tag} ({release.get('html_url')}); {major} now names {args.sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

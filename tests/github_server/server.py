"""A local fake of the GitHub REST endpoints gpu-gate uses, strict about what it accepts.

Every request is checked against ``rest_subset.json`` (transcribed from GitHub's REST API
description): method and path template, the auth and version headers, query parameters,
and the body's required fields, types, enums, maximum lengths and item counts. A request
that breaks the schema is answered 422 (400 for a bad header or unparsable JSON) and
recorded in ``violations``, so a test can assert there were none.

Faults can be injected per operation: rate limits (403 secondary limit with
``retry-after``, 403 primary limit with ``x-ratelimit-reset``, 429), 500s, and a write
that is applied but whose connection is dropped before the answer. ``read_only``
answers every write the way GitHub answers a fork's token.
"""
from __future__ import annotations

import collections
import dataclasses
import itertools
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA = json.loads((Path(__file__).parent / "rest_subset.json").read_text())
READ_ONLY_MESSAGE = "Resource not accessible by integration"
FAULT_KINDS = ("secondary_rate_limit", "primary_rate_limit", "too_many_requests", "server_error",
               "forbidden", "drop_after_apply", "drop_before_apply")


@dataclasses.dataclass
class Recorded:
    method: str
    path: str
    operation: str | None
    body: Any
    status: int | None  # None: the connection was dropped


@dataclasses.dataclass
class Violation:
    method: str
    path: str
    operation: str | None
    problems: list[str]


@dataclasses.dataclass
class Fault:
    operation: str
    kind: str
    wait_s: int = 7


@dataclasses.dataclass
class _Op:
    op_id: str
    method: str
    regex: re.Pattern[str]
    spec: dict[str, Any]


def _compile(op_id: str, spec: dict[str, Any]) -> _Op:
    pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/]+)", re.escape(spec["path"]))
    if spec.get("x-ref-spans-slashes"):  # git/refs/{ref}: GitHub takes tags/v1 unescaped
        pattern = pattern.replace("(?P<ref>[^/]+)", "(?P<ref>.+)")
    return _Op(op_id, spec["method"], re.compile(f"^{pattern}$"), spec)


OPERATIONS = [_compile(k, v) for k, v in SCHEMA["operations"].items()]


class FakeGitHub:
    """Start with ``with FakeGitHub() as gh:``; point GITHUB_API_URL at ``gh.url``."""

    def __init__(self, token: str = "test-token") -> None:
        self.token = token
        self.read_only = False
        self.comments: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.annotations: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        self.statuses: list[dict[str, Any]] = []
        self.pulls: dict[int, dict[str, Any]] = {}
        self.releases: dict[int, dict[str, Any]] = {}
        self.assets: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)  # with the bytes, in "data"
        self.refs: dict[str, str] = {}  # "tags/v1" -> sha
        self.permissions: dict[str, str] = {}  # login -> admin, write, read (anyone else: none)
        self.requests: list[Recorded] = []
        self.violations: list[Violation] = []
        self.faults: list[Fault] = []
        self._ids = itertools.count(1001)
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeGitHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- test helpers -----------------------------------------------------------------
    def inject(self, operation: str, kind: str, *, times: int = 1, wait_s: int = 7) -> None:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}")
        self.faults.extend(Fault(operation, kind, wait_s) for _ in range(times))

    def seed_comments(self, number: int, count: int, body: str = "an unrelated comment") -> None:
        for i in range(count):
            self._add_comment("o", "r", number, f"{body} {i}")

    def add_comment(self, number: int, body: str, login: str, association: str) -> None:
        """A comment by someone else: ``association`` is GitHub's author_association (OWNER, MEMBER,
        COLLABORATOR, CONTRIBUTOR, NONE...)."""
        comment = self._add_comment("o", "r", number, body)
        comment.update(user={"login": login}, author_association=association)

    def set_permission(self, login: str, permission: str) -> None:
        """``login``'s permission on the repository, as GitHub's ``permission`` field reads it (admin,
        write, read, none: maintain reads as write and triage as read)."""
        if permission not in ("admin", "write", "read", "none"):
            raise ValueError(f"unknown permission {permission!r}")
        self.permissions[login] = permission

    def add_pull(self, number: int, head_sha: str, *, head_repo: str = "octo/kernels", head_ref: str = "feature",
                 state: str = "open", repo: str = "octo/kernels") -> dict[str, Any]:
        """A pull request of ``repo`` whose head is ``head_ref`` at ``head_sha`` in ``head_repo`` (a fork when
        it is another repository). A later push is ``add_pull`` again with the new sha."""
        owner = head_repo.partition("/")[0]
        pull = {"number": number, "state": state, "html_url": f"https://github.com/{repo}/pull/{number}",
                "head": {"sha": head_sha, "ref": head_ref, "label": f"{owner}:{head_ref}",
                         "repo": {"full_name": head_repo, "fork": head_repo != repo}, "user": {"login": owner}},
                "base": {"ref": "main", "sha": "3" * 40, "repo": {"full_name": repo}}}
        self.pulls[number] = pull
        return pull

    def calls(self, operation: str, *, ok_only: bool = False) -> list[Recorded]:
        return [r for r in self.requests if r.operation == operation
                and (not ok_only or (r.status is not None and r.status < 300))]

    # --- request handling ---------------------------------------------------------------
    def handle(self, method: str, raw_path: str, headers: Any, raw_body: bytes) -> tuple[int, Any, dict[str, str]] | None:
        parsed = urllib.parse.urlsplit(raw_path)
        path, query = parsed.path, urllib.parse.parse_qs(parsed.query)
        op, params = self._match(method, path)
        body, problems, status = self._check(op, headers, query, raw_body)
        with self._lock:
            record = Recorded(method, path, op.op_id if op else None, body, None)
            self.requests.append(record)
            if problems:
                self.violations.append(Violation(method, path, record.operation, problems))
            result = self._respond(op, params, query, body, problems, status)
            record.status = result[0] if result else None
        return result

    def _match(self, method: str, path: str) -> tuple[_Op | None, dict[str, str]]:
        for op in OPERATIONS:
            m = op.regex.match(path)
            if m and op.method == method:
                return op, m.groupdict()
        return None, {}

    def _check(self, op: _Op | None, headers: Any, query: dict[str, list[str]],
               raw_body: bytes) -> tuple[Any, list[str], int]:
        if op is None:
            return None, ["no such operation in the schema subset"], 404
        problems = _header_problems(headers, self.token)
        if problems:
            return None, problems, 401 if any("Authorization" in p for p in problems) else 400
        problems = _query_problems(op.spec.get("query", []), query)
        if op.spec.get("x-binary-body"):  # an upload: the body is the file's bytes
            if not headers.get("Content-Type"):
                problems.append("an upload needs a Content-Type header")
            return raw_body, problems, 422
        if "requestBody" not in op.spec:
            return None, problems, 422
        try:
            body = json.loads(raw_body or b"null")
        except ValueError:
            return None, ["request body is not JSON"], 400
        validator = jsonschema.Draft7Validator(op.spec["requestBody"], format_checker=jsonschema.FormatChecker())
        problems += [f"{'/'.join(map(str, e.absolute_path)) or '<body>'}: {e.message[:200]}"
                     for e in validator.iter_errors(body)]
        problems += _limit_problems(op.spec.get("x-limits", {}), body)
        return body, problems, 422

    def _respond(self, op: _Op | None, params: dict[str, str], query: dict[str, list[str]], body: Any,
                 problems: list[str], status: int) -> tuple[int, Any, dict[str, str]] | None:
        if op is None or problems:
            return status, {"message": "Validation Failed" if status == 422 else "Bad request",
                            "errors": problems}, {}
        fault = next((f for f in self.faults if f.operation in (op.op_id, "*")), None)
        if fault is not None:
            self.faults.remove(fault)
            if fault.kind == "drop_before_apply":
                return None
            if fault.kind == "drop_after_apply":
                self._apply(op, params, query, body)
                return None
            return _fault_response(fault)
        if self.read_only and op.method != "GET":
            return 403, {"message": READ_ONLY_MESSAGE,
                         "documentation_url": "https://docs.github.com/rest"}, {}
        return self._apply(op, params, query, body)

    def _apply(self, op: _Op, p: dict[str, str], query: dict[str, list[str]],
               body: Any) -> tuple[int, Any, dict[str, str]]:
        handler = getattr(self, "_op_" + re.sub(r"\W", "_", op.op_id))
        return handler(p, query, body)

    # --- operations ------------------------------------------------------------------
    def _add_comment(self, owner: str, repo: str, number: int, text: str) -> dict[str, Any]:
        cid = next(self._ids)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        comment = {"id": cid, "node_id": f"IC_{cid}", "body": text, "user": {"login": "github-actions[bot]"},
                   "author_association": "NONE",
                   "html_url": f"https://github.com/{owner}/{repo}/pull/{number}#issuecomment-{cid}",
                   "created_at": now, "updated_at": now}
        self.comments[number].append(comment)
        return comment

    def _op_issues_list_comments(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        items = self.comments.get(int(p["issue_number"]), [])
        per_page = int(query.get("per_page", ["30"])[0])
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        last = max((len(items) + per_page - 1) // per_page, 1)
        if page < last:
            base = f"{self.url}/repos/{p['owner']}/{p['repo']}/issues/{p['issue_number']}/comments"
            headers["Link"] = (f'<{base}?per_page={per_page}&page={page + 1}>; rel="next", '
                               f'<{base}?per_page={per_page}&page={last}>; rel="last"')
        return 200, chunk, headers

    def _op_issues_create_comment(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        return 201, self._add_comment(p["owner"], p["repo"], int(p["issue_number"]), body["body"]), {}

    def _op_issues_update_comment(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        for comment in itertools.chain.from_iterable(self.comments.values()):
            if comment["id"] == int(p["comment_id"]):
                comment["body"] = body["body"]
                return 200, comment, {}
        return 404, {"message": "Not Found"}, {}

    def _run_view(self, run_id: int) -> dict[str, Any]:
        run = dict(self.check_runs[run_id])
        run["output"] = {**run["output"], "annotations_count": len(self.annotations[run_id])}
        return run

    def _op_checks_create(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        run_id = next(self._ids)
        output = dict(body.get("output") or {})
        self.annotations[run_id].extend(output.pop("annotations", []))
        self.check_runs[run_id] = {
            "id": run_id, "name": body["name"], "head_sha": body["head_sha"],
            "status": body.get("status", "queued"), "conclusion": body.get("conclusion"),
            "external_id": body.get("external_id"), "details_url": body.get("details_url"),
            "html_url": f"https://github.com/{p['owner']}/{p['repo']}/runs/{run_id}", "output": output}
        return 201, self._run_view(run_id), {}

    def _op_checks_update(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        run_id = int(p["check_run_id"])
        if run_id not in self.check_runs:
            return 404, {"message": "Not Found"}, {}
        run = self.check_runs[run_id]
        body = dict(body)
        output = dict(body.pop("output", None) or {})
        self.annotations[run_id].extend(output.pop("annotations", []))
        run["output"].update(output)
        run.update({k: v for k, v in body.items() if k != "output"})
        return 200, self._run_view(run_id), {}

    def _op_checks_get(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        run_id = int(p["check_run_id"])
        if run_id not in self.check_runs:
            return 404, {"message": "Not Found"}, {}
        return 200, self._run_view(run_id), {}

    def _op_checks_list_for_ref(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        name = query.get("check_name", [None])[0]
        runs = [self._run_view(i) for i, r in self.check_runs.items()
                if r["head_sha"] == p["ref"] and (name is None or r["name"] == name)]
        return 200, {"total_count": len(runs), "check_runs": runs}, {}

    def _op_pulls_get(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        pull = self.pulls.get(int(p["pull_number"]))
        return (200, pull, {}) if pull else (404, {"message": "Not Found"}, {})

    def _op_pulls_list(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        state = query.get("state", ["open"])[0]
        head = query.get("head", [None])[0]
        found = [pr for pr in self.pulls.values() if state in ("all", pr["state"])
                 and (head is None or pr["head"]["label"] == head)]
        return 200, found, {}

    def _op_repos_get_collaborator_permission_level(self, p: dict[str, str], query: dict[str, list[str]],
                                                    body: Any):
        login = urllib.parse.unquote(p["username"])
        permission = self.permissions.get(login, "none")
        return 200, {"permission": permission, "role_name": permission,
                     "user": {"login": login, "type": "User"}}, {}

    def _op_repos_create_commit_status(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        status = {"id": next(self._ids), "sha": p["sha"], "state": body["state"],
                  "description": body.get("description"), "target_url": body.get("target_url"),
                  "context": body.get("context", "default"),
                  "url": f"{self.url}/repos/{p['owner']}/{p['repo']}/statuses/{p['sha']}"}
        self.statuses.append(status)
        return 201, status, {}


    def _release_view(self, release_id: int) -> dict[str, Any]:
        release = dict(self.releases[release_id])
        release["assets"] = [{k: v for k, v in a.items() if k != "data"} for a in self.assets[release_id]]
        return release

    def _op_repos_create_release(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        if any(r["tag_name"] == body["tag_name"] for r in self.releases.values()):
            return 422, {"message": "Validation Failed",
                         "errors": [{"resource": "Release", "code": "already_exists", "field": "tag_name"}]}, {}
        rid = next(self._ids)
        base = f"{self.url}/repos/{p['owner']}/{p['repo']}/releases/{rid}"
        self.releases[rid] = {"id": rid, "tag_name": body["tag_name"], "name": body.get("name"),
                              "body": body.get("body"), "draft": body.get("draft", False),
                              "prerelease": body.get("prerelease", False), "make_latest": body.get("make_latest"),
                              "html_url": f"https://github.com/{p['owner']}/{p['repo']}/releases/tag/{body['tag_name']}",
                              "upload_url": base + "/assets{?name,label}", "url": base}
        return 201, self._release_view(rid), {}

    def _op_repos_update_release(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        rid = int(p["release_id"])
        if rid not in self.releases:
            return 404, {"message": "Not Found"}, {}
        self.releases[rid].update(body)
        return 200, self._release_view(rid), {}

    def _op_repos_get_release_by_tag(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        found = [rid for rid, r in self.releases.items() if r["tag_name"] == p["tag"] and not r["draft"]]
        return (200, self._release_view(found[0]), {}) if found else (404, {"message": "Not Found"}, {})

    def _op_repos_upload_release_asset(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        rid = int(p["release_id"])
        if rid not in self.releases:
            return 404, {"message": "Not Found"}, {}
        name = query["name"][-1]
        if any(a["name"] == name for a in self.assets[rid]):
            return 422, {"message": "Validation Failed",
                         "errors": [{"resource": "ReleaseAsset", "code": "already_exists", "field": "name"}]}, {}
        asset = {"id": next(self._ids), "name": name, "size": len(body), "state": "uploaded", "data": body,
                 "browser_download_url": f"https://github.com/{p['owner']}/{p['repo']}/releases/download/"
                                         f"{self.releases[rid]['tag_name']}/{name}"}
        self.assets[rid].append(asset)
        return 201, {k: v for k, v in asset.items() if k != "data"}, {}

    def _ref_view(self, p: dict[str, str], ref: str) -> dict[str, Any]:
        return {"ref": f"refs/{ref}", "url": f"{self.url}/repos/{p['owner']}/{p['repo']}/git/refs/{ref}",
                "object": {"type": "commit", "sha": self.refs[ref]}}

    def _op_git_get_ref(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        ref = p["ref"]
        return (200, self._ref_view(p, ref), {}) if ref in self.refs else (404, {"message": "Not Found"}, {})

    def _op_git_create_ref(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        if not body["ref"].startswith("refs/") or body["ref"].count("/") < 2:
            return 422, {"message": "Reference name must start with 'refs/' and have at least two slashes."}, {}
        ref = body["ref"][len("refs/"):]
        if ref in self.refs:
            return 422, {"message": "Reference already exists"}, {}
        self.refs[ref] = body["sha"]
        return 201, self._ref_view(p, ref), {}

    def _op_git_update_ref(self, p: dict[str, str], query: dict[str, list[str]], body: Any):
        ref = p["ref"]
        if ref not in self.refs:
            return 422, {"message": "Reference does not exist"}, {}
        self.refs[ref] = body["sha"]
        return 200, self._ref_view(p, ref), {}


def _header_problems(headers: Any, token: str) -> list[str]:
    problems = []
    if headers.get("Authorization") != f"Bearer {token}":
        problems.append("Authorization header is not 'Bearer <token>'")
    if headers.get("Accept") != "application/vnd.github+json":
        problems.append(f"Accept header is {headers.get('Accept')!r}, not 'application/vnd.github+json'")
    if headers.get("X-GitHub-Api-Version") != SCHEMA["api_version"]:
        problems.append(f"X-GitHub-Api-Version is {headers.get('X-GitHub-Api-Version')!r}")
    return problems


def _query_problems(params: list[dict[str, Any]], query: dict[str, list[str]]) -> list[str]:
    problems = []
    for param in params:
        values = query.get(param["name"])
        if not values:
            if param.get("required"):
                problems.append(f"query {param['name']} is required")
            continue
        schema = dict(param["schema"])
        value: Any = values[-1]
        if schema.get("type") == "integer":
            try:
                value = int(value)
            except ValueError:
                problems.append(f"query {param['name']}={value!r} is not an integer")
                continue
        schema.pop("format", None)
        for err in jsonschema.Draft7Validator(schema).iter_errors(value):
            problems.append(f"query {param['name']}: {err.message}")
    return problems


def _limit_problems(limits: dict[str, dict[str, Any]], body: Any) -> list[str]:
    problems = []
    for dotted, rule in limits.items():
        for value in _values_at(body, dotted.split(".")):
            if isinstance(value, str) and len(value) > rule["maxLength"]:
                problems.append(f"{dotted}: {rule['message']}")
    return problems


def _values_at(node: Any, parts: list[str]) -> list[Any]:
    if not parts:
        return [node]
    head, rest = parts[0], parts[1:]
    if head.endswith("[]"):
        items = node.get(head[:-2]) if isinstance(node, dict) else None
        return [v for item in (items or []) for v in _values_at(item, rest)]
    if isinstance(node, dict) and head in node:
        return _values_at(node[head], rest)
    return []


def _fault_response(fault: Fault) -> tuple[int, Any, dict[str, str]]:
    if fault.kind == "secondary_rate_limit":
        return 403, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}, \
            {"retry-after": str(fault.wait_s)}
    if fault.kind == "primary_rate_limit":
        reset = int(time.time()) + fault.wait_s
        return 403, {"message": "API rate limit exceeded for installation."}, \
            {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset), "x-ratelimit-limit": "5000"}
    if fault.kind == "forbidden":  # this one operation is not permitted to the token
        return 403, {"message": READ_ONLY_MESSAGE}, {}
    if fault.kind == "too_many_requests":
        return 429, {"message": "Too many requests"}, {}
    return 500, {"message": "Server Error"}, {}


def _handler_for(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            result = fake.handle(self.command, self.path, self.headers, raw)
            if result is None:  # an injected dropped connection: no answer at all
                self.close_connection = True
                return
            status, payload, headers = result
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler

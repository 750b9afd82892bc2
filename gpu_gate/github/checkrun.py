"""The check run (with annotations on kernel source lines) and its fallback, a commit status."""
from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import uuid
from pathlib import Path

from ..findings import Finding, JobResult, Severity
from ..record import RunRecord
from ..verdict import Verdict, same_place
from ..report import locate
from .client import ApiResponse, GitHubClient
from .text import CHECK_TEXT_LIMIT, fit_chars, truncation_note

CHECK_NAME = "gpu-gate"
ANNOTATIONS_PER_REQUEST = 50  # GitHub's cap per create/update request; updates append
ANNOTATION_MESSAGE_LIMIT = 60000  # "64 KB" in the API description: keep clear of it
ANNOTATION_TITLE_LIMIT = 255
STATUS_DESCRIPTION_LIMIT = 140


def check_annotations(record: RunRecord, verdict: Verdict, root: Path | None = None) -> list[dict[str, object]]:
    """One annotation per finding that names a file, blocking ones as failures.

    A finding about a whole file (an uncovered kernel) goes on line 1, as GitHub does. A blocking
    finding that names no file (an equivalence mismatch) goes on its spec's decorator and on the
    definitions of the kernels its job judged, once per job and place, read from the checkout at
    ``root`` (default: the working directory).
    """
    blocking = {id(item.finding) for item in verdict.blocking if item.finding is not None}
    out = [_annotation(f, blocking=id(f) in blocking) for f in record.plan_findings if f.file]
    # a finding several jobs made at one place: annotated once (blocking and warnings apart)
    seen: set[tuple[object, ...]] = set()
    for result in record.results:
        for f in result.findings:
            place = same_place(f) if f.file else None
            key = (id(f) in blocking, *place) if place is not None else None
            if f.file and (key is None or key not in seen):
                out.append(_annotation(f, blocking=id(f) in blocking))
            if key is not None:
                seen.add(key)
        unplaced = [f for f in result.findings if not f.file and id(f) in blocking]
        if unplaced:
            out += _placed(result, unplaced, root or Path.cwd(), record)
    return out


def _placed(result: JobResult, findings: list[Finding], root: Path, record: RunRecord) -> list[dict[str, object]]:
    first = findings[0]
    more = f"\n(and {len(findings) - 1} more finding(s) of this job: see the report)" if len(findings) > 1 else ""
    out = []
    spec = result.spec or first.spec
    for place in locate.job_places(root, record.places.get(result.job_id), spec, result.kernels,
                                   record.changed_lines.get(spec or "")):
        ann = _annotation(dataclasses.replace(first, file=place.path, line=place.line), blocking=True)
        if place.end is not None:
            ann["end_line"] = place.end
        ann["message"] = (f"{place.what}: {first.message}"[:ANNOTATION_MESSAGE_LIMIT - len(more)] + more) or first.kind
        out.append(ann)
    return out


def _annotation(f: Finding, *, blocking: bool) -> dict[str, object]:
    assert f.file, "only findings that name a file are annotated"
    line = f.line if f.line and f.line >= 1 else 1
    if blocking:
        level = "failure"
    elif f.severity is Severity.NOTE:
        level = "notice"
    else:
        level = "warning"
    title = f"gpu-gate {f.check}: {f.kind}" + (f" ({f.spec})" if f.spec else "")
    ann: dict[str, object] = {
        "path": f.file.removeprefix("./"),
        "start_line": line,
        "end_line": line,
        "annotation_level": level,
        "message": f.message[:ANNOTATION_MESSAGE_LIMIT] or f.kind,
        "title": title[:ANNOTATION_TITLE_LIMIT],
    }
    if f.repro:
        ann["raw_details"] = f"Reproduce with:\n{f.repro}"[:ANNOTATION_MESSAGE_LIMIT]
    return ann


def publish_check_run(client: GitHubClient, repo: str, head_sha: str, record: RunRecord, verdict: Verdict,
                      markdown: str, *, artifacts_url: str | None, details_url: str | None,
                      name: str = CHECK_NAME) -> str | None:
    """Create a completed check run, then append the annotations past the first 50."""
    notes = check_annotations(record, verdict)
    output = {
        "title": verdict.headline[:ANNOTATION_TITLE_LIMIT],
        "summary": fit_chars(markdown, CHECK_TEXT_LIMIT, truncation_note(artifacts_url)),
    }
    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, object] = {
        "name": name,
        "head_sha": head_sha,
        "status": "completed",
        "conclusion": "success" if verdict.passed else "failure",
        "completed_at": now,
        "output": {**output, "annotations": notes[:ANNOTATIONS_PER_REQUEST]},
    }
    if details_url:
        body["details_url"] = details_url
    external_id = f"gpu-gate-{uuid.uuid4().hex}"  # finds this run again after a dropped connection
    body["external_id"] = external_id
    created = client.request("POST", f"/repos/{repo}/check-runs", json=body,
                             recover=lambda: _find_check_run(client, repo, head_sha, name, external_id))
    run_id = created.data["id"]
    posted = min(len(notes), ANNOTATIONS_PER_REQUEST)
    for start in range(ANNOTATIONS_PER_REQUEST, len(notes), ANNOTATIONS_PER_REQUEST):
        batch = notes[start:start + ANNOTATIONS_PER_REQUEST]
        path = f"/repos/{repo}/check-runs/{run_id}"
        client.request("PATCH", path, json={"output": {**output, "annotations": batch}},
                       recover=functools.partial(_annotations_landed, client, path, posted + len(batch)))
        posted += len(batch)
    url = created.data.get("html_url")
    return url if isinstance(url, str) else None


def _find_check_run(client: GitHubClient, repo: str, sha: str, name: str, external_id: str) -> ApiResponse | None:
    resp = client.request("GET", f"/repos/{repo}/commits/{sha}/check-runs", params={"check_name": name})
    runs = resp.data.get("check_runs", []) if isinstance(resp.data, dict) else []
    for run in runs:
        if isinstance(run, dict) and run.get("external_id") == external_id:
            return ApiResponse(201, run, resp.headers)
    return None


def _annotations_landed(client: GitHubClient, path: str, want: int) -> ApiResponse | None:
    # Appending is not idempotent: a batch that landed before the connection dropped
    # shows in annotations_count, and must not be sent a second time.
    resp = client.request("GET", path)
    output = resp.data.get("output", {}) if isinstance(resp.data, dict) else {}
    return resp if output.get("annotations_count", 0) >= want else None


def publish_status(client: GitHubClient, repo: str, sha: str, verdict: Verdict, *,
                   target_url: str | None, context: str = CHECK_NAME) -> str | None:
    """A commit status: what a token without ``checks: write`` can still set."""
    body: dict[str, object] = {
        "state": "success" if verdict.passed else "failure",
        "description": verdict.headline.removeprefix("gpu-gate: ")[:STATUS_DESCRIPTION_LIMIT],
        "context": context,
    }
    if target_url:
        body["target_url"] = target_url
    resp = client.request("POST", f"/repos/{repo}/statuses/{sha}", json=body)
    url = resp.data.get("url") if isinstance(resp.data, dict) else None
    return url if isinstance(url, str) else None

"""What a GitHub Actions run tells us through its environment and its event payload."""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"
TOKEN_VARIABLES = ("GITHUB_TOKEN", "GH_TOKEN", "INPUT_TOKEN")


@dataclasses.dataclass(frozen=True)
class ActionsContext:
    api_url: str
    repository: str  # "owner/name"
    token: str | None = dataclasses.field(default=None, repr=False)
    event: dict[str, object] = dataclasses.field(default_factory=dict, repr=False)
    sha: str | None = None  # GITHUB_SHA: the merge commit on a pull_request event
    server_url: str = DEFAULT_SERVER_URL
    run_id: str | None = None
    step_summary: Path | None = None
    workflow: str = ""
    job: str = ""
    comment_key: str | None = None  # overrides workflow/job in the sticky marker
    check_name: str = "gpu-gate"  # the check run's name (and the commit status's context)
    artifact: bool = True  # the run uploads the report as an artifact (GPU_GATE_ARTIFACT set and empty: no)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ActionsContext:
        summary = env.get("GITHUB_STEP_SUMMARY")
        return cls(
            api_url=(env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
            repository=env.get("GITHUB_REPOSITORY", ""),
            token=next((env[v] for v in TOKEN_VARIABLES if env.get(v)), None),
            event=_read_event(env.get("GITHUB_EVENT_PATH")),
            sha=env.get("GITHUB_SHA") or None,
            server_url=(env.get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL).rstrip("/"),
            run_id=env.get("GITHUB_RUN_ID") or None,
            step_summary=Path(summary) if summary else None,
            workflow=env.get("GITHUB_WORKFLOW", ""),
            job=env.get("GITHUB_JOB", ""),
            comment_key=env.get("GPU_GATE_COMMENT_KEY") or None,
            check_name=(env.get("GPU_GATE_CHECK_NAME") or "").strip() or "gpu-gate",
            artifact=env.get("GPU_GATE_ARTIFACT", "unset").strip() != "",
        )

    @property
    def owner_repo(self) -> tuple[str, str] | None:
        owner, sep, name = self.repository.partition("/")
        return (owner, name) if sep and owner and name else None

    @property
    def pull_request(self) -> dict[str, Any] | None:
        pr = self.event.get("pull_request")
        return pr if isinstance(pr, dict) else None

    @property
    def pr_number(self) -> int | None:
        pr = self.pull_request
        number = pr.get("number") if pr else self.event.get("number")
        return number if isinstance(number, int) else None

    @property
    def head_sha(self) -> str | None:
        """The PR's head commit. GITHUB_SHA is the test merge commit, and a check run
        attached to it never shows on the pull request."""
        pr = self.pull_request
        head = pr.get("head") if pr else None
        sha = head.get("sha") if isinstance(head, dict) else None
        return sha if isinstance(sha, str) and sha else self.sha

    @property
    def run_url(self) -> str | None:
        if not (self.run_id and self.repository):
            return None
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"

    @property
    def artifacts_url(self) -> str | None:
        """Where the run keeps the report artifact; None when it uploads none (no link to nothing)."""
        url = self.run_url
        return f"{url}#artifacts" if url and self.artifact else None

    @property
    def sticky_key(self) -> str:
        key = self.comment_key or f"{self.workflow or 'workflow'}/{self.job or 'job'}"
        # The key sits inside an HTML comment: keep it from closing the comment early.
        return re.sub(r"[^A-Za-z0-9 ._/:@()+-]", "_", key).replace("--", "-_")


def _read_event(path: str | None) -> dict[str, object]:
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}

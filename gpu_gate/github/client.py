"""The one place where gpu-gate talks to the GitHub REST API.

One ``requests`` session; bearer token; the 2022-11-28 API version. Transient failures
(5xx, dropped connections) are retried with exponential backoff and jitter; rate limits
wait as GitHub asks (``retry-after``, else ``x-ratelimit-reset``, else at least a
minute). A write that is not idempotent is never retried blindly: after an ambiguous
failure the caller's ``recover`` looks whether the first attempt was applied after all.
The token never appears in a message, a log or a ``repr``.
"""
from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import requests

API_VERSION = "2022-11-28"
MAX_ATTEMPTS = 5
MAX_WAIT_S = 900.0  # a rate-limit wait longer than this gives up instead of idling the runner
MIN_RATE_LIMIT_WAIT_S = 60.0
READ_ONLY_MESSAGE = "Resource not accessible by integration"
_AMBIGUOUS = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


@dataclasses.dataclass(frozen=True)
class ApiResponse:
    status: int
    data: Any
    headers: Mapping[str, str]


class GitHubError(Exception):
    """A request GitHub refused, or one that kept failing. The message names no secret."""

    def __init__(self, method: str, path: str, status: int | None, message: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.message = message
        where = f"{method} {path}"
        super().__init__(f"{where}: HTTP {status}: {message}" if status else f"{where}: {message}")

    @property
    def read_only(self) -> bool:
        """The token may not write here (a fork's pull request, or missing permissions)."""
        return self.status == 403 and READ_ONLY_MESSAGE.lower() in self.message.lower()


Recover = Callable[[], "ApiResponse | None"]


class GitHubClient:
    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        sleeper: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        jitter: Callable[[], float] = random.random,
        max_attempts: int = MAX_ATTEMPTS,
        timeout_s: float = 30.0,
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self._sleep = sleeper
        self._clock = clock
        self._jitter = jitter
        self.max_attempts = max_attempts
        self.timeout_s = timeout_s
        self._session = requests.Session()
        self._session.headers.update({
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION,
            "User-Agent": "gpu-gate",
        })

    def __repr__(self) -> str:
        return f"GitHubClient({self.api_url!r})"

    def close(self) -> None:
        self._session.close()

    def url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.api_url}{path}"

    def request(self, method: str, path: str, *, json: Any = None, params: Mapping[str, Any] | None = None,
                recover: Recover | None = None) -> ApiResponse:
        """Send one request, retrying what is safe to retry. Raises GitHubError.

        Pass ``recover`` for a write that must not happen twice (creating a comment,
        appending annotations): after a dropped connection or a 5xx it is asked whether
        the write landed, and its answer is returned instead of repeating the write.
        """
        method = method.upper()
        last = "no attempt made"
        for attempt in range(self.max_attempts):
            try:
                resp = self._session.request(method, self.url(path), json=json, params=params,
                                             timeout=self.timeout_s)
            except _AMBIGUOUS as exc:
                last = f"connection failed ({type(exc).__name__})"
                found = self._recovered(recover)
                if found is not None:
                    return found
                self._backoff(attempt)
                continue
            wait = self._rate_limit_wait(resp, attempt)
            if wait is not None:
                last = f"rate limited (HTTP {resp.status_code}): {_message(resp)}"
                if wait > MAX_WAIT_S:
                    raise GitHubError(method, path, resp.status_code,
                                      f"rate limited for {wait:.0f}s more, longer than the {MAX_WAIT_S:.0f}s gpu-gate waits")
                self._sleep(wait)
                continue
            if resp.status_code >= 500:
                last = f"HTTP {resp.status_code}: {_message(resp)}"
                found = self._recovered(recover)
                if found is not None:
                    return found
                self._backoff(attempt)
                continue
            if resp.status_code >= 400:
                raise GitHubError(method, path, resp.status_code, _message(resp))
            return ApiResponse(resp.status_code, _json(resp), dict(resp.headers))
        raise GitHubError(method, path, None, f"gave up after {self.max_attempts} attempts; last: {last}")

    def paginate(self, path: str, params: Mapping[str, Any] | None = None) -> Iterator[Any]:
        """Every item of a list endpoint, following ``Link: rel="next"`` (100 per page)."""
        url: str | None = path
        query: dict[str, object] | None = {**(params or {}), "per_page": 100}
        while url:
            resp = self.request("GET", url, params=query)
            yield from resp.data if isinstance(resp.data, list) else []
            url = _next_link(resp.headers.get("Link") or resp.headers.get("link"))
            query = None  # the next link carries the query already

    @staticmethod
    def _recovered(recover: Recover | None) -> ApiResponse | None:
        # Without ``recover`` the caller declared the request safe to repeat.
        return recover() if recover is not None else None

    def _backoff(self, attempt: int) -> None:
        self._sleep(min(2.0 ** attempt, 30.0) + self._jitter())

    def _rate_limit_wait(self, resp: requests.Response, attempt: int) -> float | None:
        if resp.status_code not in (403, 429):
            return None
        headers = resp.headers
        retry_after = _number(headers.get("retry-after"))
        if retry_after is not None:
            return max(retry_after, 0.0)
        reset = _number(headers.get("x-ratelimit-reset"))
        if headers.get("x-ratelimit-remaining") == "0" and reset is not None:
            return max(reset - self._clock(), 1.0)
        if resp.status_code == 429 or "rate limit" in _message(resp).lower():
            return float(MIN_RATE_LIMIT_WAIT_S * 2 ** attempt)
        return None


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _json(resp: requests.Response) -> Any:
    if not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        return None


def _message(resp: requests.Response) -> str:
    data = _json(resp)
    if isinstance(data, dict) and data.get("message"):
        text = str(data["message"])
        errors = data.get("errors")
        return f"{text} ({errors})" if errors else text
    return (resp.text or resp.reason or "").strip()[:300]


def _next_link(header: str | None) -> str | None:
    for part in (header or "").split(","):
        url, _, rest = part.partition(";")
        if 'rel="next"' in rest.replace(" ", ""):
            return url.strip().strip("<>")
    return None

"""The publishing flags of ``gpu-gate check`` and ``gpu-gate report`` (kept import-light: argparse only)."""
from __future__ import annotations

import argparse
import re

COMMENT_MODES = ("sticky", "off", "failures-only")


def _sha(text: str) -> str:
    if not re.fullmatch(r"[0-9a-fA-F]{40}", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a full 40-hex commit SHA")
    return text.lower()


def _pr(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a pull request number")
    return int(text)


def add_publish_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--comment-mode", default="sticky", choices=COMMENT_MODES,
                        help="sticky: one PR comment, edited in place (default); off: none; failures-only: comment "
                             "only when the verdict blocks, and turn an earlier comment green once it passes")
    parser.add_argument("--pr", type=_pr, help="publish to this pull request (default: the event's; on workflow_run, "
                                               "the triggering run's), verified against its current head commit")
    parser.add_argument("--sha", type=_sha, help="the commit the results are for (default: the event's pull request "
                                                 "head, or workflow_run.head_sha); the pull request's head must equal it")

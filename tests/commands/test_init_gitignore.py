"""`gpu-gate init` reads the repository's .gitignore as git does (pathspec's GitIgnoreSpec): a pattern that
already ignores .gpu-gate/ is kept; one that a later negation takes back is not enough."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.commands.init import IGNORED, _ignore


@pytest.mark.parametrize("existing, added", [
    ("/.gpu-gate/\n", False),
    (".gpu-*/\n", False),          # a wildcard that covers it
    ("**/.gpu-gate\n", False),
    ("build/\n", True),
    (".gpu-gate/\n!.gpu-gate/\n", True),  # taken back by a later negation: git does not ignore it
    ("", True),
])
def test_init_adds_gpu_gate_to_gitignore_only_where_git_does_not_ignore_it(tmp_path: Path, existing: str,
                                                                            added: bool) -> None:
    if existing:
        (tmp_path / ".gitignore").write_text(existing)
    _ignore(tmp_path)
    text = (tmp_path / ".gitignore").read_text()
    assert text.startswith(existing) and (text != existing) is added, text
    if added:
        assert text.endswith(f"\n{IGNORED}\n")

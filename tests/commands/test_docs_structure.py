"""The docs as a new user meets them: the README opens with the two set-up commands and then the
quickstart for one's own repository (under 40 lines); the docs are split into Quickstart, Guide,
Reference and Security; every relative link and anchor resolves."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
PAGES = [ROOT / "README.md", ROOT / "runner" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\((?!https?://|mailto:)([^)\s]+)\)")


def section(text: str, heading: str) -> list[str]:
    start = text.index(f"\n{heading}\n") + 1
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None].rstrip("\n").splitlines()


def test_the_readme_opens_with_the_two_set_up_commands_then_the_quickstart() -> None:
    opening = README.split("\n")
    assert opening[:3] == ["# gpu-gate", "", "```sh"]
    assert opening[3].endswith("&& .venv/bin/gpu-gate demo") and opening[4] == "bash .ci/run" and opening[5] == "```"
    first_heading = re.search(r"^## .*$", README, re.M).group(0)
    assert first_heading == "## Quickstart: your own repository"


def test_the_quickstart_is_under_40_lines_and_does_each_step() -> None:
    lines = section(README, "## Quickstart: your own repository")
    assert len(lines) < 40, len(lines)
    text = "\n".join(lines)
    assert "pip install" in text and "[cpu]" in text, "install"
    assert "gpu-gate init" in text, "init"
    assert "@gg.spec(" in text and "reference=" in text, "one spec"
    assert "gpu-gate check --cpu --base main" in text, "the CPU check"
    assert "```yaml" in text and "uses: $/.github/actions/gpu-gate" in text and "gpu-gate vendor" in text, "workflow"


def test_the_docs_are_split_into_quickstart_guide_reference_and_security() -> None:
    index = (ROOT / "docs" / "README.md").read_text()
    for part in ("**Quickstart**", "**Guide**", "**Reference**", "**Security**"):
        assert part in index, part
    for page in ("quickstart.md", "guide/install.md", "guide/own-runner.md", "reference/action.md",
                 "reference/reports.md", "security.md", "trust.md"):
        assert f"]({page})" in index and (ROOT / "docs" / page).is_file(), page


def test_github_md_opens_with_a_three_row_decision_table_for_the_fork_patterns() -> None:
    text = (ROOT / "docs" / "github.md").read_text()
    table = section(text, "## Which workflow for which repository")
    rows = [ln for ln in table if ln.startswith("| ") and not ln.startswith("| ---")]
    assert len(rows) == 1 + 3, rows
    assert re.search(r"^## .*$", text, re.M).group(0) == "## Which workflow for which repository", "at the top"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.M | re.S)
    broken = []
    for target in LINK.findall(text):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert broken == [], broken

"""The front page stays short and every link between the documents leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [
    REPO_ROOT / "README.md",
    REPO_ROOT / "Method.md",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a document's headings: lower case, no punctuation, spaces to -."""
    anchors = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        match = re.match(r"(#{1,6}) (.+)", line)
        if match and not in_code:
            title = re.sub(r"[^\w\- ]", "", match.group(2).strip().lower())
            anchors.add(title.replace(" ", "-"))
    return anchors


def test_heading_anchors_follow_githubs_rule():
    text = "# Results\n## Policies with memory (recurrent PPO)\n```\n# not one\n```\n## A, b: c"
    assert heading_anchors(text) == {"results", "policies-with-memory-recurrent-ppo", "a-b-c"}


# A newcomer reads the README in five minutes: about 180 words a minute of technical prose.
FRONT_PAGE_WORDS = 900


def test_the_readme_is_a_front_page():
    readme = (REPO_ROOT / "README.md").read_text()
    words = len(readme.split())
    assert words <= FRONT_PAGE_WORDS, f"the README has {words} words: move detail into docs/"
    assert "make demo" in readme and "make test" in readme


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: str(path.relative_to(REPO_ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(document):
    for target in LINK.findall(document.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        assert linked.exists(), f"{document.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in heading_anchors(linked.read_text()), (
                f"{document.name} links to {target}: no such heading in {linked.name}"
            )

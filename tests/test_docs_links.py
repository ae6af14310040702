r"""Every relative link of the README, the CHANGELOG and docs/ reaches a file that exists and,
when it names a section (``page.md#section``), a heading of that page.

Anchors are made as GitHub makes them for headings: lower case, characters other than letters,
digits, ``_``, ``-`` and spaces dropped, spaces turned into ``-``, a repeated heading numbered
``-1``, ``-2``... (the rule of gjtorikian/html-pipeline's ``TableOfContentsFilter``:
``downcase``, drop ``[^\p{Word}\- ]``, ``tr(" ", "-")``). A broken one sends a reader to the
top of a long page.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchors(page: Path) -> set[str]:
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading is None:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1)).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def relative_links(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [link for link in LINK.findall(text) if not re.match(r"^[a-z][a-z0-9+.-]*:", link, re.IGNORECASE)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for link in relative_links(page):
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(
                f"{link}: no file {target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}"
            )
        elif fragment and target.suffix == ".md" and fragment not in github_anchors(target):
            broken.append(f"{link}: no heading of {target.name} makes the anchor #{fragment}")
    assert broken == [], f"{page.name}: {broken}"


def test_the_anchor_rule_matches_githubs() -> None:
    # headings of this repository and the anchors the rule makes of them: code spans lose
    # their backticks, punctuation (the '/' and '.' of a path, parentheses) is dropped
    assert "memory-in-the-request-benchmemory_in_contextpy" in github_anchors(ROOT / "docs" / "benchmarks.md")
    assert "compaction-inline-celery-or-off" in github_anchors(ROOT / "README.md")
    assert "what-compaction-keeps-the-memory-flush" in github_anchors(ROOT / "docs" / "longterm.md")

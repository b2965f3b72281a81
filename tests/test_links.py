"""Every relative link in the project's Markdown points at a file that exists, and at a heading it holds.

The README backs each claim with a link to the table that supports it; a renamed heading would
silently break that chain, so the anchors are checked the way GitHub renders them.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["README.md", "ARCHITECTURE.md", "docs/guide.md", "docs/RESULTS.md", "docs/quick/RESULTS.md", "docs/full/RESULTS.md",
        "benchmarks/RESULTS.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces to dashes,
    repeats numbered -1, -2, ..."""
    seen: dict[str, int] = {}
    found = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_anchors_follow_github():
    headings = ("# Soup speed: reference, fast GIS\n```\n# not a heading\n```\n"
                "## Cora × GCN (5 seeds)\n## Cora × GCN (5 seeds)\n")
    assert anchors(headings) == {"soup-speed-reference-fast-gis", "cora--gcn-5-seeds", "cora--gcn-5-seeds-1"}


def relative_links(doc: str):
    path = ROOT / doc
    for target in LINK.findall(path.read_text()):
        if not re.match(r"[a-z]+:", target):
            yield path, target


@pytest.mark.parametrize("doc", [d for d in DOCS if (ROOT / d).exists()])
def test_relative_links_resolve(doc):
    broken = []
    for path, target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT)}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text()):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{doc} has broken links:\n" + "\n".join(broken)

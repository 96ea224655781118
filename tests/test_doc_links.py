"""Every relative link in README.md and docs/ leads somewhere in the repository.

The README is the front door and docs/ holds the rest, so a moved or renamed page, a link
that climbs out of the repository (to a workspace the reader does not have), or an anchor
to a heading that was reworded would strand the reader. Links are read as GitHub renders
them: `[text](target)` and `![alt](target)` outside code blocks, a target relative to
the file that holds it, an anchor being a heading's GitHub slug.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^()\s]+)\)")
FENCED = re.compile(r"^```.*?^```", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")


def links(text: str) -> list[str]:
    """The link targets of a markdown text, leaving out code blocks and code spans."""
    return LINK.findall(CODE.sub("", FENCED.sub("", text)))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCED.sub("", page.read_text())
    return {slug(line.lstrip("#").replace("`", "")) for line in text.splitlines() if re.match(r"#{1,6} ", line)}


def broken(page: Path, text: str | None = None) -> list[str]:
    """What is wrong with each relative link of `page` (its text, unless given)."""
    out = []
    for target in links(page.read_text() if text is None else text):
        if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:: not this test's business
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if ROOT not in dest.parents or not dest.exists():
            out.append(f"{target}: no such file in the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            out.append(f"{target}: {dest.relative_to(ROOT)} has no heading #{anchor}")
    return out


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_relative_link_resolves(page):
    assert not broken(page), broken(page)


def test_the_checker_catches_what_it_is_for():
    """A missing file, a path out of the repository (even one that exists on this machine)
    and a stale anchor are each reported; links in code, to the web and to real headings
    are not."""
    text = (
        "[ok](commands.md#several-eval-sets) [web](https://example.org/x) `[code](nowhere.md)`\n"
        "[gone](nowhere.md) [out](../..) [stale](commands.md#no-such-heading)\n"
        "```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken(ROOT / "docs" / "page.md", text) == [
        "nowhere.md: no such file in the repository",
        "../..: no such file in the repository",
        "commands.md#no-such-heading: docs/commands.md has no heading #no-such-heading",
    ]

"""The Markdown a repository browser shows holds together: every relative link of a
tracked ``.md`` file names a file that exists, the committed reference pages are what
their generator writes, and the site points links to spec files at the pages showing
them (docs/hooks)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support import REPO

sys.path.insert(0, str(REPO / "docs" / "hooks"))
import generate  # noqa: E402  (docs/hooks/generate.py, the MkDocs hook)
import reference  # noqa: E402  (docs/hooks/reference.py, the generator of the reference)

# [text](target "title") and [label]: target, outside code
INLINE = re.compile(r"(?<!!)\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DEFINITION = re.compile(r"^ {0,3}\[[^\]\n]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")
EXTERNAL = re.compile(r"^([a-z][a-z0-9+.-]*:|#|/)", re.I)


def markdown_files() -> list[str]:
    """Tracked ``.md`` files and new ones not ignored."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "*.md"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return sorted({name for name in listed if (REPO / name).is_file()})


def relative_links(text: str) -> list[str]:
    """The relative link targets of a Markdown text (code blocks and spans skipped)."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    targets = INLINE.findall(text) + DEFINITION.findall(text)
    return [t for t in targets if not EXTERNAL.match(t)]


def test_relative_links_name_files_that_exist() -> None:
    dangling = []
    for name in markdown_files():
        path = REPO / name
        for target in relative_links(path.read_text(encoding="utf-8")):
            file = target.split("#", 1)[0].split("?", 1)[0]
            if file and not (path.parent / file).exists():
                dangling.append(f"{name}: {target}")
    assert dangling == []


def test_the_link_finder_sees_inline_and_reference_links_outside_code() -> None:
    text = ('See [ops](operations.md#health), ![img](img/a.png), [web](https://x.y/z.md),\n'
            '[top](#top) and `[not](code.md)`.\n\n```md\n[nor](fenced.md)\n```\n'
            '[label]: ../spec/wire.md\n')
    assert relative_links(text) == ["operations.md#health", "../spec/wire.md"]


@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_committed_reference_pages_are_generated(name: str) -> None:
    committed = (REPO / "docs" / name).read_text(encoding="utf-8")
    assert committed == reference.page_text(name), (
        f"docs/{name} differs from what the code generates: run "
        "`python docs/hooks/reference.py` and commit the result")


def test_site_points_spec_links_at_the_reference_pages() -> None:
    page = "See [wire](../spec/wire.md#5-errors), [design](../DESIGN.md), [sdk](sdk.md)."
    assert generate.site_links(page, "protocol.md") == (
        "See [wire](reference/wire.md#5-errors), [design](reference/design.md), [sdk](sdk.md).")
    index = "[server.md](../../spec/server.md) and [limits](../limits.md)"
    assert generate.site_links(index, "reference/index.md") == (
        "[server.md](server.md) and [limits](../limits.md)")
    # a spec page shown in the site keeps its links to its neighbours
    assert generate.site_links("[s](server.md)", "reference/wire.md") == "[s](server.md)"

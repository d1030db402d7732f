"""MkDocs hook: adds the specification (the repository's ``spec/*.md`` and ``DESIGN.md``)
to the site under ``reference/``, and points the docs' links to those files at the pages
that show them.

A page links to a spec file by its path in the repository (``../spec/wire.md``), which a
repository browser follows; in the site the link is rewritten to the page under
``reference/``. The generated reference pages (docs/operators.md, docs/commands.md) are
committed files, written by reference.py beside this hook.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Site page -> the repository file it shows, unmodified (docs/reference/index.md says why).
SPEC_PAGES = {f"reference/{path.name}": path for path in sorted((REPO / "spec").glob("*.md"))}
SPEC_PAGES["reference/design.md"] = REPO / "DESIGN.md"
_PAGE_OF = {path: uri for uri, path in SPEC_PAGES.items()}
# an inline link's target: ](target) or ](target#anchor)
_TARGET = re.compile(r"\]\((?P<path>[^)\s#]+\.md)(?P<anchor>#[^)\s]*)?\)")


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, path in SPEC_PAGES.items():
        files.append(File.generated(config, uri, content=path.read_text(encoding="utf-8")))
    return files


def site_links(markdown: str, page_uri: str) -> str:
    """``markdown`` of the page at ``page_uri`` with each link to a spec file of the
    repository pointed at the site page showing it (other links unchanged)."""
    source = SPEC_PAGES.get(page_uri, DOCS / page_uri)

    def rewrite(match: re.Match[str]) -> str:
        target = (source.parent / match["path"]).resolve()
        uri = _PAGE_OF.get(target)
        if uri is None:
            return match[0]
        relative = posixpath.relpath(uri, posixpath.dirname(page_uri) or ".")
        return f"]({relative}{match['anchor'] or ''})"

    return _TARGET.sub(rewrite, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return site_links(markdown, page.file.src_uri)

"""MkDocs hook: adds the generated pages (see reference.py) and the specification (the
repository's ``spec/*.md`` and ``DESIGN.md``, under ``reference/``) to the site."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import commands_page, operators_page  # noqa: E402

PAGES = {"operators.md": operators_page, "commands.md": commands_page}
REPO = Path(__file__).resolve().parents[2]
# Site page -> the repository file it shows, unmodified (docs/reference/index.md says why).
SPEC_PAGES = {f"reference/{path.name}": path for path in sorted((REPO / "spec").glob("*.md"))}
SPEC_PAGES["reference/design.md"] = REPO / "DESIGN.md"


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, render in PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    for uri, path in SPEC_PAGES.items():
        files.append(File.generated(config, uri, content=path.read_text(encoding="utf-8")))
    return files

"""MkDocs hook: adds the generated reference pages (see reference.py) to the site."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from reference import commands_page, operators_page  # noqa: E402

PAGES = {"operators.md": operators_page, "commands.md": commands_page}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for uri, render in PAGES.items():
        files.append(File.generated(config, uri, content=render()))
    return files

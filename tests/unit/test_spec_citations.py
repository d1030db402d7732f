"""Every citation of the specification in the repository names a file and sections that
exist: ``spec/wire.md §6.3``, ``DESIGN.md §3`` (spec/README.md)."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.support import REPO

SPEC_PAGES = ("wire", "server", "registry", "operators", "expressions", "durability", "sdk")
SPEC_FILES = ["DESIGN.md", *(f"spec/{page}.md" for page in SPEC_PAGES)]
# A cited file, then the sections that follow it: "§6.3", "§2.4-§2.7", "§8, §9".
CITATION = re.compile(
    r"(?<![\w/.])(spec/[\w-]+\.md|DESIGN\.md)((?:[ \t]*§[ \t]*\d+(?:\.\d+)*"
    r"(?:[ \t]*(?:[-–,]|and)[ \t]*§?[ \t]*\d+(?:\.\d+)*)*)?)")
SECTION = re.compile(r"\d+(?:\.\d+)*")
HEADING = re.compile(r"^#+[ \t]+(\d+(?:\.\d+)*)\.?[ \t]", re.M)
CITING_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".h", ".md", ".html", ".toml", ".yml", ".js")


def _citing_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return [name for name in listed
            if name.endswith(CITING_SUFFIXES) and not name.startswith("spec/")
            and name != "DESIGN.md"
            and (REPO / name).is_file()]


def _sections(name: str) -> set[str]:
    return set(HEADING.findall((REPO / name).read_text(encoding="utf-8")))


def test_the_cited_files_are_in_the_repository() -> None:
    for name in SPEC_FILES:
        assert (REPO / name).is_file(), name


def test_every_citation_names_a_file_and_sections_that_exist() -> None:
    headings = {name: _sections(name) for name in SPEC_FILES}
    wrong: list[str] = []
    cited = 0
    for name in _citing_files():
        text = (REPO / name).read_text(encoding="utf-8", errors="replace")
        for match in CITATION.finditer(text):
            cited += 1
            target = match.group(1)
            line = text.count("\n", 0, match.start()) + 1
            if target not in headings:
                if not (REPO / target).is_file():
                    wrong.append(f"{name}:{line}: {target} is not in the repository")
                continue
            for section in SECTION.findall(match.group(2)):
                if section not in headings[target]:
                    wrong.append(f"{name}:{line}: {target} has no section {section}")
        for match in re.finditer(r"(?<![\w/.])spec/[ \t]*$", text, re.M):
            line = text.count("\n", 0, match.start()) + 1
            wrong.append(f"{name}:{line}: a citation split over two lines")
    assert not wrong, "\n".join(wrong)
    assert cited > 200  # the code does cite the specification


@pytest.mark.parametrize(("text", "found"), [
    ("see spec/wire.md §6.3 for this", [("spec/wire.md", ["6.3"])]),
    ("(spec/operators.md §3 steps 2-5; DESIGN.md §3)",
     [("spec/operators.md", ["3"]), ("DESIGN.md", ["3"])]),
    ("spec/wire.md §2.4-§2.7, §3.4", [("spec/wire.md", ["2.4", "2.7", "3.4"])]),
    ("tests/spec/wire.md", []),
    ("docs/wire.md §2", []),
])
def test_the_citation_pattern(text: str, found: list[tuple[str, list[str]]]) -> None:
    assert [(m.group(1), SECTION.findall(m.group(2))) for m in CITATION.finditer(text)] == found

"""The layers of docs/architecture.md, read from the source: a module imports only the
layers below it (imports inside functions count too), and no two modules import each other
through the command modules of the ``beava`` command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "beava"

# (modules under this prefix, prefixes they must not import)
RULES = [
    ("beava.catalogue", ("beava.engine", "beava.durability", "beava.protocol", "beava.server",
                         "beava.dsl", "beava.app", "beava.offline", "beava.cli")),
    ("beava.engine", ("beava.protocol", "beava.server", "beava.cli")),
    ("beava.engine.expressions", ("beava.engine.registry", "beava.engine.state",
                                  "beava.engine.store", "beava.engine.backfill")),
    ("beava.engine.registry", ("beava.engine.state", "beava.engine.store",
                               "beava.engine.backfill")),
    ("beava.protocol", ("beava.engine", "beava.server")),
    ("beava.cli_usage", ("beava.cli",)),
    ("beava.cli_inspect", ("beava.cli", "beava.cli_wal")),
    ("beava.cli_wal", ("beava.cli", "beava.cli_inspect")),
]


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every beava module ``path`` names in an import statement, anywhere in it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
    return {name for name in out if name.startswith("beava.")}


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


@pytest.mark.parametrize(("layer", "forbidden"), RULES, ids=[rule[0] for rule in RULES])
def test_a_layer_imports_nothing_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    modules = [name for name in MODULES if under(name, layer)]
    assert modules, layer
    wrong = sorted((name, target) for name in modules for target in imported(MODULES[name])
                   if any(under(target, prefix) for prefix in forbidden)
                   and not under(target, layer))
    assert wrong == []

"""Package surface (spec/sdk.md §1), lazy loading, exceptions (§10) and bv.demo."""

from __future__ import annotations

import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import beava as bv
from tests.support import SPEC

REPO = Path(__file__).resolve().parents[2]
SDK_SPEC = SPEC / "sdk.md"


def spec_package_surface() -> dict[str, list[str]]:
    """group -> names of the `beava.__all__` table of spec/sdk.md §1, read from the spec text.

    A names cell lists backticked names, or one backticked run of space-separated names; a
    call signature such as `demo(name)` counts as its name, and what follows " — " is prose.
    """
    text = SDK_SPEC.read_text()
    section = text[text.index("## 1. Package surface"):text.index("## 2. ")]
    groups: dict[str, list[str]] = {}
    for group, cell in re.findall(r"^\| ([^|`]+?) \| (.+) \|$", section, re.M):
        if group == "group":
            continue  # the header row
        names: list[str] = []
        for span in re.findall(r"`([^`]+)`", cell.split(" — ")[0]):
            if re.fullmatch(r"[A-Za-z_]\w*(?: [A-Za-z_]\w*)*", span):
                names.extend(span.split())
            else:
                names.append(re.match(r"[A-Za-z_]\w*", span).group())
        groups[group] = names
    return groups


def test_all_is_exactly_the_spec_list() -> None:
    groups = spec_package_surface()
    (label,) = [group for group in groups if group.startswith("operators")]
    operators = groups[label]
    assert operators[:3] == ["count", "sum", "mean"]  # the parse worked
    assert f"operators ({len(operators)})" == label  # the table states its own count
    assert groups["data"] == ["demo"]
    assert groups["compiler (extension)"] == ["compile_register_payload"]
    expected = [name for names in groups.values() for name in names]
    assert sorted(bv.__all__) == sorted(expected)  # also: no name listed twice
    for name in bv.__all__:
        assert getattr(bv, name) is not None
    assert "VALIDATION_ERROR_KINDS" not in bv.__all__


def test_version_is_the_distributions() -> None:
    # pyproject reads the version from the package: the installed metadata agrees
    from importlib.metadata import version

    assert bv.__version__ == version("beava")
    assert bv.__version__.count(".") == 2


@pytest.mark.parametrize("name", ["fork", "upsert", "Session", "join", "_missing"])
def test_unknown_names(name: str) -> None:
    with pytest.raises(AttributeError):
        getattr(bv, name)


def test_builtins_are_shadowed_only_in_the_namespace() -> None:
    assert bv.sum is not sum and bv.min is not min and bv.max is not max
    assert sum([1, 2]) == 3


def test_star_import_and_dir() -> None:
    namespace: dict[str, object] = {}
    exec("from beava import *", namespace)
    assert set(bv.__all__) <= set(namespace)
    assert set(bv.__all__) <= set(dir(bv))
    assert {"__version__", "PushError", "ReadError"} <= set(dir(bv))
    assert not {"annotations", "importlib", "Any", "TYPE_CHECKING"} & set(dir(bv))


def fresh_python_lines(code: str) -> list[str]:
    """The stdout lines of ``code`` run in a new interpreter (nothing imported yet)."""
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.splitlines()


def test_importing_beava_loads_no_sdk_module() -> None:
    code = (
        "import sys, beava\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('beava.', 'beava_client', "
        "'msgspec')))\n"
        "print(loaded)\n"
        "beava.col\n"
        "print('beava.dsl.expressions' in sys.modules, 'beava.app' in sys.modules)\n"
    )
    assert fresh_python_lines(code) == ["[]", "True False"]


def test_the_dsl_does_not_load_the_wire_client() -> None:
    code = (
        "import sys, beava as bv\n"
        "@bv.event\n"
        "class E:\n"
        "    a: int\n"
        "bv.compile_register_payload(E)\n"
        "print('beava_client' in sys.modules, 'socket' in sys.modules)\n"
        "bv.TransportError\n"
        "print('beava_client' in sys.modules)\n"
    )
    assert fresh_python_lines(code) == ["False False", "True"]


def test_validation_error_kinds() -> None:
    expected = {"cycle", "missing_upstream", "schema_mismatch", "bad_return_type",
                "unknown_field_type", "table_key_invalid", "registration_conflict",
                "duplicate_name"}
    assert isinstance(bv.VALIDATION_ERROR_KINDS, frozenset)
    assert expected == bv.VALIDATION_ERROR_KINDS


def test_registration_error() -> None:
    e = bv.RegistrationError(code="force_required", path="nodes[0]", message="needs force")
    assert (e.code, e.path, e.message, e.errors, e.details) == (
        "force_required", "nodes[0]", "needs force", [], {})
    assert str(e) == "[force_required] nodes[0]: needs force"
    assert str(bv.RegistrationError(code="x", message="m")) == "[x] m"
    assert isinstance(e, Exception) and not isinstance(e, TypeError)
    with pytest.raises(TypeError):
        bv.RegistrationError("positional")  # type: ignore[misc]
    v = bv.ValidationError("cycle", "a.b", "loop")
    e2 = bv.RegistrationError(code="c", errors=[v], details={"k": 1})
    assert e2.errors == [v] and e2.details == {"k": 1}
    copy = pickle.loads(pickle.dumps(e2))
    assert (type(copy), copy.code, copy.errors, copy.details) == (
        bv.RegistrationError, "c", [v], {"k": 1})


def test_descriptor_error_is_also_a_type_error() -> None:
    e = bv.DescriptorError(code="bad_return_type", path="F", message="m")
    assert isinstance(e, bv.RegistrationError) and isinstance(e, TypeError)
    assert str(e) == "[bad_return_type] F: m"
    assert type(pickle.loads(pickle.dumps(e))) is bv.DescriptorError


def test_validation_error_dataclass() -> None:
    v = bv.ValidationError("cycle", "nodes[1]", "A -> B -> A")
    assert str(v) == "[cycle] nodes[1]: A -> B -> A"
    with pytest.raises(AttributeError):
        v.kind = "x"  # type: ignore[misc]
    assert not isinstance(v, BaseException)


def test_other_error_classes() -> None:
    assert issubclass(bv.BinaryNotFoundError, Exception)
    assert issubclass(bv.TransportError, ConnectionError)


def test_markers() -> None:
    assert isinstance(bv.Event, type) and isinstance(bv.Table, type)


# -- demo ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["adtech", "fraud", "ecommerce"])
def test_demo_datasets(name: str) -> None:
    data = bv.demo(name)
    assert set(data) == {"name", "schema", "events"}
    assert data["name"] == name
    assert data == bv.demo(name)  # deterministic
    assert len(data["events"]) >= 500
    wire_types = {"str", "i64", "f64", "bool"}
    for event in data["events"]:
        fields = data["schema"][event["_event"]]
        assert set(event) - {"_event"} == set(fields)
        for field, typ in fields.items():
            assert typ in wire_types
            value = event[field]
            expected = {"str": str, "i64": int, "f64": float, "bool": bool}[typ]
            assert type(value) is expected, (field, value)


def test_demo_returns_fresh_data() -> None:
    first = bv.demo("fraud")
    first["events"].clear()
    assert bv.demo("fraud")["events"]


def test_demo_fraud_content() -> None:
    events = bv.demo("fraud")["events"]
    assert events[0]["_event"] == "Txn"
    assert sum(e["is_fraud"] for e in events) > 10
    assert len({e["user_id"] for e in events}) == 40


@pytest.mark.parametrize("name", ["nope", "", "Fraud", None])
def test_demo_unknown_name(name: object) -> None:
    with pytest.raises(ValueError, match="adtech, ecommerce, fraud"):
        bv.demo(name)  # type: ignore[arg-type]

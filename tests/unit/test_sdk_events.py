"""@bv.event: class form (fields, optional fields, defaults, options) and function form
(annotation resolution, register-time resolution, structural errors), spec/sdk.md §2."""

from __future__ import annotations

from typing import Any, Optional

import pytest

import beava as bv
from beava.dsl.events import event_source_node


@bv.event
class Txn:
    user_id: str
    amount: float
    n_items: int
    is_fraud: bool
    coupon: str | None
    currency: str = "USD"


@bv.event
class Click:
    user_id: str
    page: str


def node(cls: Any) -> dict[str, Any]:
    return event_source_node(cls)


# -- class form --------------------------------------------------------------------------


def test_decorator_returns_the_class_with_reference_attributes() -> None:
    assert isinstance(Txn, type)
    assert Txn._name == "Txn"
    assert Txn._kind == "event_source"
    assert Txn._chain == []
    assert Txn._schema == {
        "user_id": str, "amount": float, "n_items": int, "is_fraud": bool,
        "coupon": str | None, "currency": str,
    }
    assert list(Txn._schema) == ["user_id", "amount", "n_items", "is_fraud", "coupon", "currency"]
    assert Txn._defaults == {"currency": "USD"}
    assert (Txn._keep_events_for, Txn._cold_after, Txn._dedupe_key, Txn._dedupe_window) == (
        None, None, None, None)


def test_event_node() -> None:
    assert node(Txn) == {
        "kind": "event",
        "name": "Txn",
        "schema": {
            "fields": {"user_id": "str", "amount": "f64", "n_items": "i64", "is_fraud": "bool",
                       "coupon": "str", "currency": "str"},
            "optional_fields": ["coupon"],
            "defaults": {"currency": "USD"},
        },
    }


def test_no_defaults_key_without_defaults() -> None:
    assert node(Click) == {
        "kind": "event", "name": "Click",
        "schema": {"fields": {"user_id": "str", "page": "str"}, "optional_fields": []},
    }


def test_spellings() -> None:
    @bv.event()
    class A:
        x: int

    @bv.event(cold_after="1d")
    class B:
        x: int

    assert node(A)["schema"]["fields"] == {"x": "i64"}
    assert node(B)["cold_after_ms"] == 86_400_000


def test_optional_spellings_and_none_default() -> None:
    @bv.event
    class E:
        a: Optional[int]  # noqa: UP045 - the spelling under test
        b: float | None = None
        c: None | bool

    n = node(E)
    assert n["schema"] == {"fields": {"a": "i64", "b": "f64", "c": "bool"},
                           "optional_fields": ["a", "b", "c"]}
    assert E._defaults == {}


def test_defaults_of_every_type() -> None:
    @bv.event
    class E:
        s: str = "x"
        i: int = 3
        f: float = 2
        g: float = 1.5
        b: bool = False
        o: int | None = 7

    assert node(E)["schema"]["defaults"] == {"s": "x", "i": 3, "f": 2, "g": 1.5, "b": False,
                                             "o": 7}


@pytest.mark.parametrize(
    "define",
    [
        lambda: type("E", (), {"__annotations__": {"i": int}, "i": True}),
        lambda: type("E", (), {"__annotations__": {"i": int}, "i": 1.0}),
        lambda: type("E", (), {"__annotations__": {"f": float}, "f": True}),
        lambda: type("E", (), {"__annotations__": {"f": float}, "f": float("inf")}),
        lambda: type("E", (), {"__annotations__": {"f": float}, "f": "1"}),
        lambda: type("E", (), {"__annotations__": {"s": str}, "s": 1}),
        lambda: type("E", (), {"__annotations__": {"b": bool}, "b": 1}),
        lambda: type("E", (), {"__annotations__": {"o": str | None}, "o": 5}),
    ],
)
def test_wrongly_typed_default(define: Any) -> None:
    with pytest.raises(TypeError, match="default"):
        bv.event(define())


@pytest.mark.parametrize("annotation", [list[str], dict, Any, bytes, "datetime", int | str,
                                        int | str | None, Optional[list[int]]])  # noqa: UP045
def test_unsupported_annotation(annotation: Any) -> None:
    cls = type("E", (), {"__annotations__": {"x": annotation}})
    with pytest.raises(TypeError):
        bv.event(cls)


def test_event_time_field_is_rejected() -> None:
    with pytest.raises(TypeError, match="event_time"):
        @bv.event
        class E:
            user_id: str
            event_time: int


def test_class_without_fields_is_rejected() -> None:
    with pytest.raises(TypeError, match="no annotated field"):
        @bv.event
        class E:
            pass


def test_options_are_emitted_in_order() -> None:
    @bv.event(keep_events_for="30d", cold_after=60_000, dedupe_key="id", dedupe_window="5m")
    class E:
        id: str

    n = node(E)
    assert list(n) == ["kind", "name", "schema", "keep_events_for_ms", "cold_after_ms",
                       "dedupe_key", "dedupe_window_ms"]
    assert (n["keep_events_for_ms"], n["cold_after_ms"], n["dedupe_key"],
            n["dedupe_window_ms"]) == (30 * 86_400_000, 60_000, "id", 300_000)
    assert (E._keep_events_for, E._cold_after, E._dedupe_window) == ("30d", 60_000, "5m")


@pytest.mark.parametrize(("text", "ms"), [("1ms", 1), ("2s", 2000), ("3m", 180_000),
                                          ("4h", 14_400_000), ("5d", 432_000_000)])
def test_duration_units(text: str, ms: int) -> None:
    cls = bv.event(cold_after=text)(type("E", (), {"__annotations__": {"a": int}}))
    assert node(cls)["cold_after_ms"] == ms


def test_forever_sends_nothing() -> None:
    @bv.event(keep_events_for="forever", cold_after="forever")
    class E:
        a: int

    assert "keep_events_for_ms" not in node(E) and "cold_after_ms" not in node(E)
    assert E._cold_after == "forever"


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"cold_after": "0d"}, ValueError),
        ({"cold_after": "1w"}, ValueError),
        ({"cold_after": "01h"}, ValueError),
        ({"cold_after": 0}, ValueError),
        ({"cold_after": -5}, ValueError),
        ({"keep_events_for": "soon"}, ValueError),
        ({"cold_after": 1.5}, TypeError),
        ({"cold_after": True}, TypeError),
        ({"keep_events_for": [1]}, TypeError),
        ({"dedupe_key": "nope"}, ValueError),
        ({"dedupe_key": 1}, TypeError),
        ({"dedupe_window": "5m"}, ValueError),
        ({"dedupe_key": "a", "dedupe_window": "forever"}, ValueError),
        ({"dedupe_key": "a", "dedupe_window": 0}, ValueError),
        ({"tolerate_delay": "5s"}, TypeError),
        ({"event_time_field": "ts"}, TypeError),
        ({"retention": "1d"}, TypeError),
    ],
)
def test_option_errors(options: dict[str, Any], error: type[Exception]) -> None:
    cls = type("E", (), {"__annotations__": {"a": str}})
    with pytest.raises(error):
        bv.event(**options)(cls)


def test_chain_methods_are_static_methods_on_the_class() -> None:
    chain = Click.filter(bv.col("page") == "/")
    assert chain._chain == [{"op": "filter", "expr": "(page == '/')"}]
    assert Click._chain == []  # the class is never changed
    for method in ("filter", "select", "drop", "rename", "with_columns", "map", "cast",
                   "fillna", "group_by", "agg", "named"):
        assert callable(getattr(Click, method))


def test_decorating_something_else() -> None:
    with pytest.raises(TypeError):
        bv.event(42)  # type: ignore[call-overload]


# -- function form ------------------------------------------------------------------------


@bv.event
def BigTxn(txn: Txn) -> bv.Event:
    return txn.filter(bv.col("amount") > 100)


def test_function_form_object() -> None:
    assert BigTxn._name == "BigTxn"
    assert BigTxn._kind == "event_derivation"
    assert BigTxn._is_bv_event_function is True
    assert BigTxn._chain == [{"op": "filter", "expr": "(amount > 100)"}]
    assert BigTxn._root is Txn


def test_function_form_chains_through_another_function_form() -> None:
    @bv.event
    def HugeTxn(big: BigTxn) -> bv.Event:
        return big.filter(bv.col("amount") > 1000).select("user_id", "amount")

    assert HugeTxn._chain == [
        {"op": "filter", "expr": "(amount > 100)"},
        {"op": "filter", "expr": "(amount > 1000)"},
        {"op": "select", "fields": ["user_id", "amount"]},
    ]
    assert BigTxn._chain == [{"op": "filter", "expr": "(amount > 100)"}]  # unchanged
    assert HugeTxn._schema == {"user_id": "str", "amount": "f64"}


def test_annotation_from_frame_locals() -> None:
    @bv.event
    class LocalEv:
        v: int

    @bv.event
    def Pos(e: LocalEv) -> bv.Event:  # a string annotation under __future__.annotations
        return e.filter(bv.col("v") > 0)

    assert Pos._root is LocalEv


def test_annotation_from_closure_cells() -> None:
    def make() -> Any:
        @bv.event
        class ClosureOnlyEv:
            v: int

        def Pos(e: ClosureOnlyEv) -> bv.Event:
            assert ClosureOnlyEv is not None  # makes ClosureOnlyEv a closure cell
            return e.filter(bv.col("v") > 0)

        return Pos, ClosureOnlyEv

    fn, source = make()
    assert "ClosureOnlyEv" not in locals()
    assert bv.event(fn)._root is source


def test_annotation_objects_without_future_import() -> None:
    namespace: dict[str, Any] = {"bv": bv, "Click": Click}
    exec(
        "def Home(c: Click):\n    return c.filter(bv.col('page') == '/')\n",
        namespace,
    )
    assert bv.event(namespace["Home"])._root is Click


def test_globals_win_over_frame_locals() -> None:
    Txn = Click  # noqa: N806 - shadows the module-level Txn in this frame only

    @bv.event
    def G(t: Txn) -> bv.Event:
        return t.filter(bv.col("amount") > 1)

    assert Txn is Click
    assert G._root is globals()["Txn"]


def test_options_on_the_function_form_are_rejected() -> None:
    with pytest.raises(TypeError, match="options"):
        @bv.event(cold_after="1d")
        def F(t: Txn) -> bv.Event:
            return t.filter(bv.col("amount") > 1)


def test_no_parameter() -> None:
    with pytest.raises(TypeError, match="one event parameter"):
        @bv.event
        def F() -> bv.Event:
            return Txn.filter(bv.col("amount") > 1)


def test_annotation_that_is_not_an_event() -> None:
    chain = Click.filter(bv.col("page") == "/").named("Home")
    with pytest.raises(TypeError) as info:
        @bv.event
        def F(c: chain) -> bv.Event:  # type: ignore[valid-type]
            return c.filter(bv.col("page") == "/")
    assert not isinstance(info.value, bv.DescriptorError)

    with pytest.raises(TypeError):
        @bv.event
        def G(c: int) -> bv.Event:
            return Click.filter(bv.col("page") == "/")

    with pytest.raises(TypeError):
        @bv.event
        def H(c: UnknownName) -> bv.Event:  # type: ignore[name-defined]  # noqa: F821
            return Click.filter(bv.col("page") == "/")


def test_extra_non_event_parameter() -> None:
    with pytest.raises(TypeError):
        @bv.event
        def F(t: Txn, limit: int) -> bv.Event:
            return t.filter(bv.col("amount") > limit)

    with pytest.raises(TypeError):
        @bv.event
        def G(t: Txn, *rest: Any) -> bv.Event:
            return t.filter(bv.col("amount") > 1)

    with pytest.raises(TypeError):
        @bv.event
        def H(a, b) -> bv.Event:  # type: ignore[no-untyped-def]
            return a.filter(bv.col("amount") > 1)


def test_two_event_parameters_is_a_join() -> None:
    with pytest.raises(bv.DescriptorError) as info:
        @bv.event
        def F(t: Txn, c: Click) -> bv.Event:
            return t.filter(bv.col("amount") > 1)
    assert info.value.code == "joins_not_supported"
    assert isinstance(info.value, TypeError)


def test_table_parameter() -> None:
    @bv.table(key="user_id")
    def T(t: Txn) -> bv.Table:
        return t.group_by("user_id").agg(n=bv.count())

    with pytest.raises(bv.DescriptorError) as info:
        @bv.event
        def F(t: T) -> bv.Event:  # type: ignore[valid-type]
            return t.filter(bv.col("n") > 1)
    assert info.value.code == "aggregation_on_table_not_supported"


@pytest.mark.parametrize(
    "body",
    [
        lambda t: 42,
        lambda t: t,
        lambda t: t.named("Same"),
        lambda t: t.group_by("user_id").agg(n=bv.count()),
        lambda t: t.agg(n=bv.count()),
        lambda t: t.group_by("user_id"),
        lambda t: Click.filter(bv.col("page") == "/"),
        lambda t: None,
    ],
)
def test_bad_return_type(body: Any) -> None:
    def F(t: Txn) -> Any:
        return body(t)

    with pytest.raises(bv.DescriptorError) as info:
        bv.event(F)
    assert info.value.code == "bad_return_type"
    assert isinstance(info.value, TypeError)


# -- unannotated parameters: resolved at register time ---------------------------------------


def test_unannotated_parameter_resolves_by_name() -> None:
    @bv.event
    def Filtered(txns):  # type: ignore[no-untyped-def]
        return txns.filter(bv.col("amount") > 5)

    assert Filtered._deferred is not None
    with pytest.raises(TypeError, match="registered"):
        Filtered._chain  # noqa: B018
    payload = bv.compile_register_payload(Click, Txn, Filtered)
    assert [n["name"] for n in payload["nodes"]] == ["Click", "Txn", "Filtered"]
    assert payload["nodes"][2]["upstreams"] == ["Txn"]
    assert Filtered._chain == [{"op": "filter", "expr": "(amount > 5)"}]
    # the resolution is kept for later calls, even without the upstream in the call
    assert bv.compile_register_payload(Filtered)["nodes"][0]["name"] == "Txn"


@pytest.mark.parametrize(("param", "expected"), [("page_view", "PageView"),
                                                 ("page_views", "PageView"),
                                                 ("PAGEVIEW", "PageView"),
                                                 ("click", "Click"), ("clicks", "Click")])
def test_name_matching_rule(param: str, expected: str) -> None:
    @bv.event
    class PageView:
        path: str

    column = "path" if expected == "PageView" else "page"
    namespace: dict[str, Any] = {"bv": bv}
    exec(f"def F({param}):\n    return {param}.select('{column}')\n", namespace)
    fn = bv.event(namespace["F"])
    bv.compile_register_payload(PageView, Click, fn)
    assert fn._root._name == expected


def test_single_event_source_fallback() -> None:
    @bv.event
    def Anything(e):  # type: ignore[no-untyped-def]
        return e.filter(bv.col("page") == "/")

    @bv.event
    def Other(zz):  # type: ignore[no-untyped-def]
        return zz.filter(bv.col("page") == "/x")

    # one event source in the call: it is the upstream when no name matches
    payload = bv.compile_register_payload(Click, Anything)
    assert payload["nodes"][1]["upstreams"] == ["Click"]
    # the root source of a resolved descriptor counts as a candidate too
    assert bv.compile_register_payload(Anything, Other)["nodes"][2]["name"] == "Other"


def test_unresolvable_parameter_names_the_candidates() -> None:
    @bv.event
    def Mystery(thing):  # type: ignore[no-untyped-def]
        return thing.filter(bv.col("page") == "/")

    with pytest.raises(TypeError) as info:
        bv.compile_register_payload(Click, Txn, Mystery)
    text = str(info.value)
    assert "'thing'" in text and "Click" in text and "Txn" in text
    assert Mystery._deferred is not None  # nothing was resolved


def test_unannotated_resolution_runs_the_decoration_checks() -> None:
    @bv.event
    def Broken(click):  # type: ignore[no-untyped-def]
        return click

    with pytest.raises(bv.DescriptorError) as info:
        bv.compile_register_payload(Click, Broken)
    assert info.value.code == "bad_return_type"


def test_unannotated_resolves_to_a_function_form_event() -> None:
    @bv.event
    def HomeClick(clicks):  # type: ignore[no-untyped-def]
        return clicks.filter(bv.col("page") == "/")

    @bv.event
    def HomeClickByUser(home_click):  # type: ignore[no-untyped-def]
        return home_click.select("user_id")

    payload = bv.compile_register_payload(Click, HomeClick, HomeClickByUser)
    assert payload["nodes"][2]["ops"] == [
        {"op": "filter", "expr": "(page == '/')"},
        {"op": "select", "fields": ["user_id"]},
    ]


def test_annotated_with_a_deferred_event_is_deferred_too() -> None:
    @bv.event
    def HomeClick(clicks):  # type: ignore[no-untyped-def]
        return clicks.filter(bv.col("page") == "/")

    @bv.event
    def Narrow(h: HomeClick) -> bv.Event:  # type: ignore[valid-type]
        return h.select("user_id")

    assert Narrow._deferred is not None
    payload = bv.compile_register_payload(Click, Narrow)
    assert [n["name"] for n in payload["nodes"]] == ["Click", "Narrow"]
    assert HomeClick._deferred is None


def test_cycle_between_unannotated_functions() -> None:
    @bv.event
    def Ping(pong):  # type: ignore[no-untyped-def]
        return pong.filter(bv.col("page") == "/")

    @bv.event
    def Pong(ping):  # type: ignore[no-untyped-def]
        return ping.filter(bv.col("page") == "/")

    with pytest.raises(TypeError, match="cycle"):
        bv.compile_register_payload(Ping, Pong)

"""Compile expression ASTs to Python functions by code generation.

Every AST node becomes one statement assigning a local (single assignment), so the
generated code is straight-line apart from the `if` guards that make `and`/`or`
short-circuit. The only text that reaches the generated source is generated local names,
helper names, `repr` of field names and literals (ints, finite floats, strings, bools,
None) and fixed operator symbols; user text is never evaluated. Subtrees nested deeper than
_HOIST_DEPTH guards are moved into helper functions, which keeps the source under Python's
indentation limit.

Hot paths are inlined: a comparison with a literal becomes a `type()` test plus one native
comparison, and the logic tables of `and`/`or`/`not` are plain `is` tests. Arithmetic,
general comparisons, casts and quadkey call the helpers of the runtime module.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from beava.catalogue.expression_grammar import I64_MAX, I64_MIN
from beava.engine.expressions import runtime as rt
from beava.engine.expressions.nodes import (
    Arith,
    Call,
    Compare,
    Expr,
    Field,
    Literal,
    Logic,
    Neg,
    Not,
)
from beava.engine.expressions.parser import recursion_headroom
from beava.engine.expressions.type_check import cast_target

_HOIST_DEPTH = 40
_INDENT = "    "

MISSING = object()  # sentinel for "key absent" in generated chain code

_BASE_NAMESPACE: dict[str, Any] = {
    "_add": rt.add,
    "_sub": rt.sub,
    "_mul": rt.mul,
    "_div": rt.div,
    "_neg": rt.neg,
    "_gt": rt.COMPARISONS[">"],
    "_ge": rt.COMPARISONS[">="],
    "_lt": rt.COMPARISONS["<"],
    "_le": rt.COMPARISONS["<="],
    "_eq": rt.COMPARISONS["=="],
    "_ne": rt.COMPARISONS["!="],
    "_cast_str": rt.cast_str,
    "_cast_int": rt.cast_int,
    "_cast_float": rt.cast_float,
    "_cast_bool": rt.cast_bool,
    "_quadkey": rt.quadkey,
    "_saturate": rt.saturate,
    "_MISSING": MISSING,
}
_ARITH_HELPERS = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div"}
_COMPARE_HELPERS = {">": "_gt", ">=": "_ge", "<": "_lt", "<=": "_le", "==": "_eq", "!=": "_ne"}
_SWAPPED = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "==": "==", "!=": "!="}
_NAMED_CONSTANTS = ("None", "True", "False")


class _Scope:
    """Statements evaluating one expression; field loads are collected at its top."""

    def __init__(self, indent: int) -> None:
        self.indent = indent
        self.loads: list[str] = []
        self.lines: list[str] = []
        self.fields: dict[str, str] = {}

    def add(self, depth: int, text: str) -> None:
        self.lines.append(_INDENT * (self.indent + depth) + text)

    def source_lines(self) -> list[str]:
        return self.loads + self.lines


class FunctionBuilder:
    """Builds one generated function `<name>(row)` out of raw lines and expressions."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.namespace: dict[str, Any] = dict(_BASE_NAMESPACE)
        self.lines: list[str] = []
        self.helpers: list[str] = []
        self.counter = 0

    # --- names and literals -------------------------------------------------------------

    def fresh(self, prefix: str = "_t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def constant(self, value: object) -> str:
        """Bind `value` in the function's globals and return its name."""
        name = self.fresh("_k")
        self.namespace[name] = value
        return name

    def literal(self, value: object) -> str:
        """Python source for a JSON scalar / expression literal value."""
        if value is None or type(value) is bool:
            return repr(value)
        if type(value) is int or type(value) is str:
            return repr(value)
        if type(value) is float and math.isfinite(value):
            return repr(value)
        return self.constant(value)

    # --- raw lines (chain ops) ------------------------------------------------------------

    def line(self, text: str, depth: int = 0) -> None:
        self.lines.append(_INDENT * (1 + depth) + text)

    def value(self, expr: Expr) -> str:
        """Emit the evaluation of `expr` against the current `row`; return its operand source.

        The source is a local name or a literal; it can be read any number of times.
        """
        scope = _Scope(1)
        with recursion_headroom():
            result = self._emit(scope, expr, 0)
        self.lines.extend(scope.source_lines())
        return result

    def is_true(self, operand: str) -> str:
        """A Python condition that holds iff the operand's value is exactly Bool(true)."""
        if operand in _NAMED_CONSTANTS:
            return "True" if operand == "True" else "False"
        if not operand.startswith("_"):
            return "False"  # a number or string literal
        return f"{operand} is True"

    def build(self) -> Callable[..., Any]:
        source = "\n".join(self.helpers + [f"def {self.name}(row):", *self.lines])
        exec(compile(source, f"<beava {self.name}>", "exec"), self.namespace)
        function: Callable[..., Any] = self.namespace[self.name]
        return function

    # --- expression emission ------------------------------------------------------------

    def _emit(self, scope: _Scope, node: Expr, depth: int) -> str:
        if isinstance(node, Literal):
            return self.literal(node.value)
        if isinstance(node, Field):
            local = scope.fields.get(node.name)
            if local is None:
                local = self.fresh("_f")
                scope.fields[node.name] = local
                scope.loads.append(f"{_INDENT * scope.indent}{local} = row.get({node.name!r})")
            return local
        if depth > _HOIST_DEPTH:
            return self._hoist(scope, node, depth)
        if isinstance(node, Not):
            x = self._name(scope, self._emit(scope, node.operand, depth), depth)
            t = self.fresh()
            scope.add(depth, f"{t} = False if {x} is True else (True if {x} is False else None)")
            return t
        if isinstance(node, Neg):
            x = self._emit(scope, node.operand, depth)
            t = self.fresh()
            scope.add(depth, f"{t} = _neg({x})")
            return t
        if isinstance(node, Arith):
            return self._arith(scope, node, depth)
        if isinstance(node, Logic):
            return self._logic(scope, node, depth)
        if isinstance(node, Compare):
            return self._compare(scope, node, depth)
        if isinstance(node, Call):
            return self._call(scope, node, depth)
        return "None"  # a type name outside `cast` has no value

    def _name(self, scope: _Scope, operand: str, depth: int) -> str:
        """An operand usable on the left of `is`: a local or None/True/False."""
        if operand.startswith("_") or operand in _NAMED_CONSTANTS:
            return operand
        t = self.fresh()
        scope.add(depth, f"{t} = {operand}")
        return t

    def _hoist(self, scope: _Scope, node: Expr, depth: int) -> str:
        name = self.fresh("_h")
        inner = _Scope(1)
        result = self._emit(inner, node, 0)
        self.helpers.append(f"def {name}(row):")
        self.helpers.extend(inner.source_lines())
        self.helpers.append(f"{_INDENT}return {result}")
        t = self.fresh()
        scope.add(depth, f"{t} = {name}(row)")
        return t

    def _arith(self, scope: _Scope, node: Arith, depth: int) -> str:
        acc = self._emit(scope, node.operands[0], depth)
        acc_is_number = _is_number(node.operands[0])
        for op, operand in zip(node.ops, node.operands[1:], strict=True):
            rhs = self._emit(scope, operand, depth)
            rhs_is_number = _is_number(operand)
            t = self.fresh()
            x = rhs if acc_is_number else acc
            if op != "/" and rhs_is_number != acc_is_number and x.startswith("_"):
                # A local and a numeric literal: inline the number case.
                literal = operand if rhs_is_number else node.operands[0]
                self._arith_literal(scope, t, f"{acc} {op} {rhs}", x, literal, depth)
            else:
                scope.add(depth, f"{t} = {_ARITH_HELPERS[op]}({acc}, {rhs})")
            acc = t
            acc_is_number = False
        return acc

    def _arith_literal(
        self, scope: _Scope, t: str, native: str, x: str, literal: Expr, depth: int
    ) -> None:
        """`t = native` when x is a number; I64 results saturate, anything else is Null."""
        assert isinstance(literal, Literal)
        p = self.fresh("_p")
        scope.add(depth, f"{p} = type({x})")
        if type(literal.value) is float:
            # Python converts the int operand to a double, as I64 (op) F64 requires.
            scope.add(depth, f"if {p} is float or {p} is int:")
            scope.add(depth + 1, f"{t} = {native}")
        else:
            scope.add(depth, f"if {p} is float:")
            scope.add(depth + 1, f"{t} = {native}")
            scope.add(depth, f"elif {p} is int:")
            scope.add(depth + 1, f"{t} = {native}")
            scope.add(depth + 1, f"if not {I64_MIN} <= {t} <= {I64_MAX}:")
            scope.add(depth + 2, f"{t} = _saturate({t})")
        scope.add(depth, "else:")
        scope.add(depth + 1, f"{t} = None")

    def _logic(self, scope: _Scope, node: Logic, depth: int) -> str:
        first = self._emit(scope, node.operands[0], depth)
        if first.startswith("_t"):
            acc = first  # a temp has no other reader, so it can accumulate in place
        else:
            acc = self.fresh()
            scope.add(depth, f"{acc} = {first}")
        # `and` stops at false, `or` at true; once reached the accumulator never changes.
        stop, other = ("False", "True") if node.op == "and" else ("True", "False")
        for operand in node.operands[1:]:
            scope.add(depth, f"if {acc} is not {stop}:")
            y = self._name(scope, self._emit(scope, operand, depth + 1), depth + 1)
            # The accumulator is now `other`, Null or a non-bool (§7 logic tables).
            scope.add(depth + 1, f"if {acc} is {other}:")
            scope.add(depth + 2, f"{acc} = {y} if {y} is True or {y} is False else None")
            scope.add(depth + 1, f"elif {acc} is None and {y} is {stop}:")
            scope.add(depth + 2, f"{acc} = {stop}")
            scope.add(depth + 1, "else:")
            scope.add(depth + 2, f"{acc} = None")
        return acc

    def _compare(self, scope: _Scope, node: Compare, depth: int) -> str:
        left = self._emit(scope, node.left, depth)
        right = self._emit(scope, node.right, depth)
        if isinstance(node.right, Literal) and not isinstance(node.left, Literal):
            return self._compare_literal(scope, node.op, left, node.right, depth)
        if isinstance(node.left, Literal) and not isinstance(node.right, Literal):
            return self._compare_literal(scope, _SWAPPED[node.op], right, node.left, depth)
        t = self.fresh()
        scope.add(depth, f"{t} = {_COMPARE_HELPERS[node.op]}({left}, {right})")
        return t

    def _compare_literal(self, scope: _Scope, op: str, x: str, literal: Literal, depth: int) -> str:
        """`x op literal` inlined: one type test and one native comparison."""
        k = literal.value
        if k is None:
            return "None"
        t = self.fresh()
        src = self.literal(k)
        if type(k) is str or type(k) is bool:
            kind = "str" if type(k) is str else "bool"
            scope.add(depth, f"{t} = {x} {op} {src} if type({x}) is {kind} else None")
            return t
        # Numeric literal; I64 vs F64 compares as doubles, NaN makes every operator false.
        p = self.fresh("_p")
        scope.add(depth, f"{p} = type({x})")
        if type(k) is int:
            kf = self.literal(float(k))
            same, other_type, other = f"{x} {op} {src}", "float", f"{x} {op} {kf}"
            if op == "!=":
                other = f"{x} != {kf} and {x} == {x}"
            first, second = "int", other_type
        else:
            same = f"{x} != {src} and {x} == {x}" if op == "!=" else f"{x} {op} {src}"
            other = f"float({x}) {op} {src}"
            first, second = "float", "int"
        scope.add(depth, f"if {p} is {first}:")
        scope.add(depth + 1, f"{t} = {same}")
        scope.add(depth, f"elif {p} is {second}:")
        scope.add(depth + 1, f"{t} = {other}")
        scope.add(depth, "else:")
        scope.add(depth + 1, f"{t} = None")
        return t

    def _call(self, scope: _Scope, node: Call, depth: int) -> str:
        name = node.name
        args = node.args
        if name == "isnull" and len(args) == 1:
            x = self._name(scope, self._emit(scope, args[0], depth), depth)
            t = self.fresh()
            scope.add(depth, f"{t} = {x} is None")
            return t
        if name == "cast" and len(args) == 2:
            target = cast_target(args[1])
            if target not in rt.CASTS:
                return "None"  # unknown target type: Null at run time
            x = self._emit(scope, args[0], depth)
            t = self.fresh()
            scope.add(depth, f"{t} = _cast_{target}({x})")
            return t
        if name == "quadkey" and len(args) == 3:
            values = [self._emit(scope, arg, depth) for arg in args]
            t = self.fresh()
            scope.add(depth, f"{t} = _quadkey({', '.join(values)})")
            return t
        return "None"  # unknown function or wrong arity: Null, as the reference's `where`


def _is_number(node: Expr) -> bool:
    return isinstance(node, Literal) and type(node.value) in (int, float)


def compile_value(expr: Expr) -> Callable[[Any], Any]:
    """A function row -> value of `expr` (§7)."""
    builder = FunctionBuilder("_expression")
    result = builder.value(expr)
    builder.line(f"return {result}")
    return builder.build()


def compile_predicate(expr: Expr) -> Callable[[Any], bool]:
    """A function row -> True iff `expr` evaluates to exactly Bool(true)."""
    builder = FunctionBuilder("_predicate")
    result = builder.value(expr)
    builder.line(f"return {builder.is_true(result)}")
    return builder.build()

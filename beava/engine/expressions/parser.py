"""Lexer and recursive-descent parser for the expression language (spec/expressions.md §2-§3)."""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from beava.catalogue.expression_grammar import I64_MAX, IDENTIFIER, KEYWORDS
from beava.engine.expressions.nodes import (
    Arith,
    Call,
    Compare,
    Expr,
    ExpressionError,
    Field,
    Literal,
    Logic,
    Neg,
    Not,
    TypeName,
)

MAX_NESTING = 512
# Size limits beyond the spec (docs/limits.md): the text is refused before it is tokenized,
# the tree as soon as it grows past the node cap, so an oversized expression costs little.
# The cap keeps what a valid expression costs to check and compile to a fraction of a second.
MAX_EXPRESSION_LENGTH = 16_384  # code points
MAX_EXPRESSION_NODES = 2_048  # parse-tree nodes: operands, operators, calls, literals
_COMPARISONS = frozenset((">", ">=", "<", "<=", "==", "!="))
_DIGITS = re.compile(r"[0-9]+")
_EXPONENT = re.compile(r"[eE][+-]?[0-9]+")
_WHITESPACE = " \t\r\n"

_E = TypeVar("_E", bound=Expr)

# Token kinds.
INT, FLOAT, STR, IDENT, KEYWORD, PUNCT, END = "int", "float", "str", "ident", "kw", "punct", "end"


class Token:
    __slots__ = ("kind", "value", "text", "pos")

    # value: the text of IDENT, KEYWORD, PUNCT and STR tokens, the number of INT and FLOAT
    # tokens, None for END.
    def __init__(self, kind: str, value: str | int | float | None, text: str, pos: int
                 ) -> None:
        self.kind = kind
        self.value = value
        self.text = text
        self.pos = pos  # code-point index into the source

    def is_punct(self, symbol: str) -> bool:
        return self.kind == PUNCT and self.value == symbol

    def is_keyword(self, word: str) -> bool:
        return self.kind == KEYWORD and self.value == word


_DEEP_RECURSION_LIMIT = 12_000  # > frames needed for MAX_NESTING levels of every tier
_headroom_lock = threading.Lock()
_headroom_users = 0
_saved_limit = 0


@contextmanager
def recursion_headroom() -> Iterator[None]:
    """Allow deep (but bounded) recursion over expressions nested up to MAX_NESTING levels.

    The recursion in this package is plain Python-to-Python calls, which CPython 3.11 runs
    without growing the C stack, so a temporarily higher limit is safe. The limit is
    process-wide: it is restored when the last concurrent user leaves.
    """
    global _headroom_users, _saved_limit
    with _headroom_lock:
        if _headroom_users == 0:
            _saved_limit = sys.getrecursionlimit()
            if _saved_limit < _DEEP_RECURSION_LIMIT:
                sys.setrecursionlimit(_DEEP_RECURSION_LIMIT)
        _headroom_users += 1
    try:
        yield
    finally:
        with _headroom_lock:
            _headroom_users -= 1
            if _headroom_users == 0 and _saved_limit < _DEEP_RECURSION_LIMIT:
                sys.setrecursionlimit(_saved_limit)


def byte_col(text: str, pos: int) -> int:
    """1-based UTF-8 byte column of code-point index `pos`."""
    return len(text[:pos].encode("utf-8", "surrogatepass")) + 1


def _error(text: str, pos: int, reason: str) -> ExpressionError:
    col = byte_col(text, pos)
    return ExpressionError(f"parse error at col {col}: {reason}", None, col)


def tokenize(text: str) -> list[Token]:
    """Split `text` into tokens; the list always ends with an END token."""
    tokens: list[Token] = []
    n = len(text)
    i = 0
    while i < n:
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if "0" <= c <= "9":
            tokens.append(_number(text, i))
            i += len(tokens[-1].text)
            continue
        if c == "_" or ("a" <= c <= "z") or ("A" <= c <= "Z"):
            match = IDENTIFIER.match(text, i)
            assert match is not None
            word = match.group()
            kind = KEYWORD if word in KEYWORDS else IDENT
            tokens.append(Token(kind, word, word, i))
            i = match.end()
            continue
        if c in "'\"":
            token = _string(text, i)
            tokens.append(token)
            i += len(token.text)
            continue
        if c == "/" and text.startswith("//", i):
            raise _error(text, i, "unknown character sequence '//'")
        if c in "(),+-*/":
            tokens.append(Token(PUNCT, c, c, i))
            i += 1
            continue
        if c in "<>=!":
            if i + 1 < n and text[i + 1] == "=":
                tokens.append(Token(PUNCT, c + "=", c + "=", i))
                i += 2
                continue
            if c == "=":
                raise _error(text, i, "use '==' for equality")
            if c == "!":
                raise _error(text, i, "unknown character '!' (use '!=' or 'not')")
            tokens.append(Token(PUNCT, c, c, i))
            i += 1
            continue
        raise _error(text, i, f"unknown character {c!r}")
    tokens.append(Token(END, None, "end of input", n))
    return tokens


def _number(text: str, start: int) -> Token:
    match = _DIGITS.match(text, start)
    assert match is not None
    end = match.end()
    if end + 1 < len(text) and text[end] == "." and "0" <= text[end + 1] <= "9":
        fraction = _DIGITS.match(text, end + 1)
        assert fraction is not None
        end = fraction.end()
        if end < len(text) and text[end] in "eE":
            exponent = _EXPONENT.match(text, end)
            if exponent is None:
                raise _error(text, start, "invalid float literal")
            end = exponent.end()
        literal = text[start:end]
        # Python's float() rounds correctly and overflows to inf, as the spec requires.
        return Token(FLOAT, float(literal), literal, start)
    literal = text[start:end]
    value = int(literal)
    if value > I64_MAX:
        raise _error(text, start, f"invalid integer literal {literal}")
    return Token(INT, value, literal, start)


def _string(text: str, start: int) -> Token:
    quote = text[start]
    chars: list[str] = []
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == quote:
            return Token(STR, "".join(chars), text[start : i + 1], start)
        if c == "\\" and i + 1 < n:
            nxt = text[i + 1]
            # Only `\\` and an escaped quote of the literal's own style are unescaped.
            chars.append(nxt if nxt in ("\\", quote) else c + nxt)
            i += 2
            continue
        chars.append(c)
        i += 1
    raise _error(text, start, "unterminated string literal")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        if len(text) > MAX_EXPRESSION_LENGTH:
            raise _error(
                text, MAX_EXPRESSION_LENGTH,
                f"expression too long: {len(text)} characters, at most {MAX_EXPRESSION_LENGTH}",
            )
        self.tokens = tokenize(text)
        self.index = 0
        self.nodes = 0

    def made(self, node: _E) -> _E:
        """Count one more parse-tree node; fail past MAX_EXPRESSION_NODES."""
        self.nodes += 1
        if self.nodes > MAX_EXPRESSION_NODES:
            raise self.fail(
                self.tok, f"expression too large: more than {MAX_EXPRESSION_NODES} nodes"
            )
        return node

    @property
    def tok(self) -> Token:
        return self.tokens[self.index]

    def advance(self) -> Token:
        token = self.tokens[self.index]
        self.index += 1
        return token

    def fail(self, token: Token, reason: str) -> ExpressionError:
        return _error(self.text, token.pos, reason)

    def unexpected(self) -> ExpressionError:
        token = self.tok
        if token.kind == END:
            return self.fail(token, "unexpected token (end of input)")
        return self.fail(token, f'unexpected token "{token.text}"')

    def enter(self, level: int, token: Token) -> int:
        """Open one more nesting level at `token`."""
        if level >= MAX_NESTING:
            raise self.fail(token, f"nesting depth exceeds {MAX_NESTING}")
        return level + 1

    def parse(self) -> Expr:
        expr = self.or_expr(1)
        if self.tok.kind != END:
            raise self.unexpected()
        return expr

    def or_expr(self, level: int) -> Expr:
        operands = [self.and_expr(level)]
        while self.tok.is_keyword("or"):
            self.advance()
            operands.append(self.and_expr(level))
        return operands[0] if len(operands) == 1 else self.made(Logic("or", tuple(operands)))

    def and_expr(self, level: int) -> Expr:
        operands = [self.not_expr(level)]
        while self.tok.is_keyword("and"):
            self.advance()
            operands.append(self.not_expr(level))
        return operands[0] if len(operands) == 1 else self.made(Logic("and", tuple(operands)))

    def not_expr(self, level: int) -> Expr:
        if self.tok.is_keyword("not"):
            inner = self.enter(level, self.advance())
            return self.made(Not(self.not_expr(inner)))
        return self.cmp_expr(level)

    def cmp_expr(self, level: int) -> Expr:
        left = self.add_expr(level)
        token = self.tok
        if token.kind != PUNCT or token.value not in _COMPARISONS:
            return left
        self.advance()
        right = self.add_expr(level)
        op = str(token.value)
        if op in ("==", "!="):
            # `e == null` is a null test (§3 post-parse rewrites).
            tested = _null_test_operand(left, right)
            if tested is not None:
                test = self.made(Call("isnull", (tested,)))
                return test if op == "==" else self.made(Not(test))
        return self.made(Compare(op, left, right))

    def add_expr(self, level: int) -> Expr:
        return self._chain(level, ("+", "-"), self.mul_expr)

    def mul_expr(self, level: int) -> Expr:
        return self._chain(level, ("*", "/"), self.unary)

    def _chain(
        self, level: int, symbols: tuple[str, str], operand_parser: Callable[[int], Expr]
    ) -> Expr:
        operands = [operand_parser(level)]
        ops: list[str] = []
        while self.tok.kind == PUNCT and self.tok.text in symbols:
            ops.append(self.advance().text)
            operands.append(operand_parser(level))
        if not ops:
            return operands[0]
        return self.made(Arith(tuple(operands), tuple(ops)))

    def unary(self, level: int) -> Expr:
        if not self.tok.is_punct("-"):
            return self.primary(level)
        minus = self.advance()
        literal = self.tok
        if literal.kind in (INT, FLOAT):
            self.advance()
            return self.made(Literal(-literal.value))  # type: ignore[operator]  # a number
        return self.made(Neg(self.unary(self.enter(level, minus))))

    def primary(self, level: int) -> Expr:
        token = self.tok
        kind = token.kind
        if kind in (INT, FLOAT, STR):
            self.advance()
            return self.made(Literal(token.value))
        if kind == KEYWORD and token.value in ("true", "false", "null"):
            self.advance()
            return self.made(
                Literal({"true": True, "false": False, "null": None}[str(token.value)])
            )
        if kind == IDENT:
            self.advance()
            if self.tok.is_punct("("):
                return self.call(str(token.value), level)
            return self.made(Field(str(token.value)))
        if token.is_punct("("):
            inner = self.enter(level, self.advance())
            if self.tok.is_keyword("not"):
                # A group that starts with `not` negates its whole content (reference rule).
                self.advance()
                expr: Expr = self.made(Not(self.or_expr(inner)))
            else:
                expr = self.or_expr(inner)
            self.expect_close()
            return expr
        raise self.unexpected()

    def call(self, name: str, level: int) -> Expr:
        self.advance()  # "("
        args: list[Expr] = []
        if self.tok.is_punct(")"):
            self.advance()
        else:
            while True:
                args.append(self.or_expr(self.enter(level, self.tok)))
                if self.tok.is_punct(","):
                    self.advance()
                    continue
                self.expect_close()
                break
        if name == "cast" and len(args) >= 2 and isinstance(args[1], Field):
            args[1] = TypeName(args[1].name)
        return self.made(Call(name, tuple(args)))

    def expect_close(self) -> None:
        if not self.tok.is_punct(")"):
            raise self.fail(self.tok, "expected ')'")
        self.advance()


def _null_test_operand(left: Expr, right: Expr) -> Expr | None:
    if isinstance(right, Literal) and right.value is None:
        return left
    if isinstance(left, Literal) and left.value is None:
        return right
    return None


def parse(text: str) -> Expr:
    """Parse `text` into an AST; raises ExpressionError with `col <N>` in the reason."""
    with recursion_headroom():
        return _Parser(text).parse()

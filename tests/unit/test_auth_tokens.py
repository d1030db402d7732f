"""Token configuration: the file and BEAVA_AUTH_TOKENS formats, their errors (which never
quote a token), scope implication and the lookup; the config resolution around them."""

from __future__ import annotations

from pathlib import Path

import pytest

from beava.protocol.auth import TokenFormatError, parse_token_env, parse_token_file
from beava.server.config import CommandLine, ConfigError, resolve

A = "alpha-token-00000001"
B = "bravo-token-00000002"
C = "charlie.token_0003~+/="


def test_file_format_with_comments_and_scope_lists() -> None:
    table = parse_token_file(
        f"# tokens\n\n{A} read\n  {B}\twrite , read\n{C} admin\n", "tokens.txt")
    assert len(table) == 3
    assert table.scopes_for(A) == {"read"}
    assert table.scopes_for(B) == {"read", "write"}
    assert table.scopes_for(C) == {"read", "write", "admin"}
    assert table.scopes_for("alpha-token-00000009") is None
    assert table.scopes_for(A[:-1]) is None
    assert table.scopes_for(A.encode()) == {"read"}
    assert A not in repr(table)


def test_env_format() -> None:
    table = parse_token_env(f" {A}:read ; {B}:write+admin;; {C}:Read,Write ")
    assert table.scopes_for(A) == {"read"}
    assert table.scopes_for(B) == {"read", "write", "admin"}
    assert table.scopes_for(C) == {"read", "write"}


@pytest.mark.parametrize(("text", "message"), [
    ("", "tokens.txt: no token defined"),
    ("# only a comment\n", "tokens.txt: no token defined"),
    (f"{A}\n", "tokens.txt line 1: expected '<token> <scope>[,<scope>...]'"),
    (f"{A} root\n", "tokens.txt line 1: unknown scope 'root' (expected read, write or admin)"),
    (f"{A} read,\n", "tokens.txt line 1: unknown scope '' (expected read, write or admin)"),
    ("short read\n", "tokens.txt line 1: a token must be at least 16 characters long"),
    ("bad:token-000000000 read\n",
     "tokens.txt line 1: a token may hold only letters, digits and - . _ ~ + / ="),
    (f"\n{A} read\n{A} write\n", "tokens.txt: token #2 is defined twice"),
])
def test_file_errors_never_quote_a_token(text: str, message: str) -> None:
    with pytest.raises(TokenFormatError) as info:
        parse_token_file(text, "tokens.txt")
    assert str(info.value) == message
    assert A not in str(info.value)


@pytest.mark.parametrize(("text", "message"), [
    ("", "BEAVA_AUTH_TOKENS: no token defined"),
    (A, "BEAVA_AUTH_TOKENS entry 1: expected '<token>:<scope>[+<scope>...]'"),
    (f"{A}:read;{B}:", "BEAVA_AUTH_TOKENS entry 2: no scope given (read, write or admin)"),
    (f"{A}:read;{A}:admin", "BEAVA_AUTH_TOKENS: token #2 is defined twice"),
])
def test_env_errors(text: str, message: str) -> None:
    with pytest.raises(TokenFormatError) as info:
        parse_token_env(text)
    assert str(info.value) == message


def test_config_sources(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{A} write\n")
    assert resolve(CommandLine(), {}).security.tokens is None
    sec = resolve(CommandLine(auth_token_file=str(path)), {}).security
    assert sec.tokens is not None and sec.tokens.scopes_for(A) == {"read", "write"}
    assert sec.token_source == str(path)
    sec = resolve(CommandLine(), {"BEAVA_AUTH_TOKEN_FILE": str(path)}).security
    assert sec.tokens is not None and sec.tokens.scopes_for(A) is not None
    sec = resolve(CommandLine(), {"BEAVA_AUTH_TOKENS": f"{B}:read"}).security
    assert sec.tokens is not None and sec.tokens.scopes_for(B) == {"read"}
    yaml_file = tmp_path / "beava.yaml"
    yaml_file.write_text(f"auth:\n  token_file: {path}\n")
    sec = resolve(CommandLine(config=str(yaml_file)), {}).security
    assert sec.tokens is not None and sec.tokens.scopes_for(A) is not None


def test_config_errors(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{A} write\n")
    with pytest.raises(ConfigError, match="both in a file and in BEAVA_AUTH_TOKENS"):
        resolve(CommandLine(auth_token_file=str(path)), {"BEAVA_AUTH_TOKENS": f"{B}:read"})
    with pytest.raises(ConfigError, match="auth token file not found"):
        resolve(CommandLine(auth_token_file=str(tmp_path / "missing")), {})
    with pytest.raises(ConfigError, match="TLS needs both a certificate"):
        resolve(CommandLine(tls_cert=str(path)), {})
    with pytest.raises(ConfigError, match="--tls-client-ca needs --tls-cert"):
        resolve(CommandLine(), {"BEAVA_TLS_CLIENT_CA": str(path)})
    with pytest.raises(ConfigError, match="TLS certificate not found"):
        resolve(CommandLine(), {"BEAVA_TLS_CERT": str(tmp_path / "x"),
                                "BEAVA_TLS_KEY": str(path)})
    with pytest.raises(ConfigError, match="cannot load TLS certificate"):
        resolve(CommandLine(tls_cert=str(path), tls_key=str(path)), {})
    yaml_file = tmp_path / "beava.yaml"
    yaml_file.write_text("tls:\n  certificate: x\n")
    with pytest.raises(ConfigError, match="unknown config key 'tls.certificate'"):
        resolve(CommandLine(config=str(yaml_file)), {})

"""The backfill admin operation (docs/wire.md): staged uploads of a table's state, then an
atomic, durable install (``beava.engine.backfill``).

One request body is a map with an ``action``:

- ``begin`` ``{table, until_ms, size, nodes}``: checks the table's definition in ``nodes``
  (the register payload the state was computed with) against the server's and opens an
  upload of ``size`` bytes; answers ``{"upload": id, "chunk_bytes": n, "table": name}``;
- ``chunk`` ``{upload, offset, data}``: appends ``data`` (bytes; base64 text in JSON) at
  ``offset``, which must be the bytes received so far; answers ``{"received": n}``;
- ``commit`` ``{upload, dry_run?, drop_missing?}``: with all ``size`` bytes received,
  decodes them (MessagePack of a table state dump: plain data, never executed) against the
  table's shape, a part per slice (:class:`Commit`, ``beava.engine.backfill_state``), and
  installs the table (``beava.engine.backfill.Install``: counts what it replaces, compares
  a slice of entities per step; ``dry_run`` only counts, a drop needs ``drop_missing``);
- ``abort`` ``{upload}``: drops the upload.

Uploads live in memory, bounded in number, size and idle time (an upload being committed
still counts); the server owns them only until commit or abort (a restart forgets them).
"""

from __future__ import annotations

import base64
import binascii
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from beava.catalogue.errors import BeavaError
from beava.catalogue.expression_grammar import I64_MAX
from beava.engine.backfill import Install, load_table, table_spec
from beava.engine.backfill_state import StateDecoder
from beava.engine.registry import TableSpec
from beava.engine.store import FeatureStore

MAX_UPLOADS = 8
MAX_STAGED_BYTES = 1 << 30  # every open upload together
MAX_CHUNK_BYTES = 2 * 1024 * 1024  # fits a 4 MiB frame or HTTP body, also as base64 JSON
IDLE_SECONDS = 600.0


@dataclass
class _Upload:
    spec: TableSpec
    until_ms: int
    size: int
    touched: float
    data: bytearray = field(default_factory=bytearray)


def _bad(path: str, message: str) -> BeavaError:
    return BeavaError("invalid_backfill", path=path, message=message)


def _int(body: dict[str, Any], name: str, high: int) -> int:
    value = body.get(name)
    if type(value) is not int or not 0 <= value <= high:
        raise _bad(name, f"{name} must be an integer from 0 to {high}")
    return value


def _bool(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if type(value) is not bool:
        raise _bad(name, f"{name} must be true or false")
    return value


def _str(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if type(value) is not str or not value:
        raise _bad(name, f"{name} must be a non-empty string")
    return value


class Commit:
    """A commit being served: the upload's state decoded a slice at a time, then loaded and
    installed in one step (``beava.engine.backfill.install``)."""

    __slots__ = ("area", "decoder", "until_ms", "size", "dry_run", "drop_missing", "install")

    def __init__(self, area: BackfillUploads, upload: _Upload, dry_run: bool,
                 drop_missing: bool) -> None:
        self.area = area
        self.decoder = StateDecoder(upload.spec, upload.data)
        self.until_ms = upload.until_ms
        self.size = upload.size
        self.dry_run = dry_run
        self.drop_missing = drop_missing
        self.install: Install | None = None

    def run(self, deadline: float | None) -> dict[str, Any] | None:
        """Work until done (the reply body) or ``deadline`` (``time.perf_counter``) has
        passed (None: call again). BeavaError when the upload does not install."""
        try:
            if self.install is None:
                if not self.decoder.run(deadline, time.perf_counter):
                    return None
                assert self.decoder.state is not None
                table = load_table(self.decoder.spec, self.decoder.state)
                self.decoder.state = None  # the loaded table holds it now
                self.install = Install(self.area.store, table, self.until_ms,
                                       dry_run=self.dry_run, drop_missing=self.drop_missing)
            reply = self.install.run(deadline, time.perf_counter)
        except BaseException:
            self.area.committing.discard(self)
            raise
        if reply is not None:
            self.area.committing.discard(self)
        return reply


class BackfillUploads:
    """Open uploads of one server, and the four actions."""

    def __init__(self, store: FeatureStore,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.monotonic = monotonic
        self.uploads: dict[str, _Upload] = {}
        self.committing: set[Commit] = set()

    @property
    def staged_bytes(self) -> int:
        return (sum(u.size for u in self.uploads.values())
                + sum(c.size for c in self.committing))

    def handle(self, body: Any) -> dict[str, Any] | Commit:
        """The reply body of an action; a commit is a :class:`Commit` to run."""
        if type(body) is not dict:
            raise _bad("", "the body must be a map with an action")
        action = body.get("action")
        if action == "begin":
            return self._begin(body)
        if action == "chunk":
            return self._chunk(body)
        if action == "commit":
            return self._commit(body)
        if action == "abort":
            self.uploads.pop(_str(body, "upload"), None)
            return {"aborted": True}
        raise _bad("action", "action must be begin, chunk, commit or abort")

    def _begin(self, body: dict[str, Any]) -> dict[str, Any]:
        table = _str(body, "table")
        until_ms = _int(body, "until_ms", I64_MAX)
        size = _int(body, "size", MAX_STAGED_BYTES)
        spec = table_spec(body.get("nodes"), table, self.store.registry)
        now = self.monotonic()
        for upload_id, upload in list(self.uploads.items()):
            if upload.spec.name == table or now - upload.touched > IDLE_SECONDS:
                del self.uploads[upload_id]  # a new upload of a table replaces the old one
        if (len(self.uploads) + len(self.committing) >= MAX_UPLOADS
                or self.staged_bytes + size > MAX_STAGED_BYTES):
            raise BeavaError("backfill_too_large", table=table,
                             message=f"at most {MAX_UPLOADS} uploads of {MAX_STAGED_BYTES} "
                                     f"bytes together may be open")
        upload_id = secrets.token_hex(12)
        self.uploads[upload_id] = _Upload(spec, until_ms, size, now)
        return {"chunk_bytes": MAX_CHUNK_BYTES, "table": table, "upload": upload_id}

    def _upload(self, body: dict[str, Any]) -> _Upload:
        upload_id = _str(body, "upload")
        upload = self.uploads.get(upload_id)
        if upload is None:
            raise BeavaError("backfill_upload_not_found", upload=upload_id,
                             message="no open upload with this id (committed, aborted, "
                                     "replaced, idle too long, or the server restarted)")
        upload.touched = self.monotonic()
        return upload

    def _chunk(self, body: dict[str, Any]) -> dict[str, Any]:
        upload = self._upload(body)
        offset = _int(body, "offset", upload.size)
        data = body.get("data")
        if type(data) is str:
            try:
                data = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise _bad("data", "data is not base64") from None
        if type(data) is not bytes:
            raise _bad("data", "data must be bytes (base64 text in JSON)")
        if offset != len(upload.data):
            raise BeavaError("invalid_backfill", path="offset", expected=len(upload.data),
                             message=f"offset {offset} is not the bytes received so far "
                                     f"({len(upload.data)})")
        if len(data) > MAX_CHUNK_BYTES or offset + len(data) > upload.size:
            raise _bad("data", f"a chunk holds at most {MAX_CHUNK_BYTES} bytes, within the "
                               f"upload's size {upload.size}")
        upload.data += data
        return {"received": len(upload.data)}

    def _commit(self, body: dict[str, Any]) -> Commit:
        upload = self._upload(body)
        dry_run, drop_missing = _bool(body, "dry_run"), _bool(body, "drop_missing")
        if len(upload.data) != upload.size:
            raise BeavaError("invalid_backfill", path="upload", expected=upload.size,
                             message=f"received {len(upload.data)} of {upload.size} bytes")
        del self.uploads[_str(body, "upload")]
        commit = Commit(self, upload, dry_run, drop_missing)
        self.committing.add(commit)
        return commit

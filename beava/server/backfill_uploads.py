"""The backfill admin operation (docs/wire.md): staged uploads of a table's state, then an
atomic, durable install (``beava.engine.backfill``).

One request body is a map with an ``action``:

- ``begin`` ``{table, until_ms, size, nodes}``: checks the table's definition in ``nodes``
  (the register payload the state was computed with) against the server's and opens an
  upload of one part of ``size`` bytes; with ``parts: K`` instead of ``size``, an upload of
  K key-disjoint parts, each opened by ``part`` (a table without keys has one part);
  answers ``{"upload": id, "chunk_bytes": n, "table": name, "parts": K}``;
- ``part`` ``{upload, part, size}``: opens part ``part`` (0 to K - 1) of ``size`` bytes (0:
  a part that holds no entity), or starts it over (a retried sender); answers
  ``{"part": j, "size": n}``;
- ``chunk`` ``{upload, part?, offset, data}``: appends ``data`` (bytes; base64 text in
  JSON) to the part (default 0) at ``offset``, which must be the bytes received so far;
  answers ``{"received": n}``;
- ``commit`` ``{upload, dry_run?, drop_missing?}``: with every part complete, decodes each
  (MessagePack of a table state dump: plain data, never executed) against the table's
  shape, a piece per slice (:class:`Commit`, ``beava.engine.backfill_state``), joins them
  (``beava.engine.backfill.join_part``: overlapping parts are refused) and installs the
  table (``beava.engine.backfill.Install``: counts what it replaces, compares a slice of
  entities per step; ``dry_run`` only counts, a drop needs ``drop_missing``);
- ``status`` ``{upload}``: the bytes received of each part (null: not opened); like every
  request naming an upload, it keeps the upload from being dropped as idle;
- ``abort`` ``{upload}``: drops the upload.

Uploads live in memory, bounded in number, parts, size and idle time (an upload being
committed still counts); the server owns them only until commit or abort (a restart forgets
them).
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
from beava.engine.backfill import Install, join_part, load_table, table_spec
from beava.engine.backfill_state import StateDecoder
from beava.engine.registry import TableSpec
from beava.engine.state.tables import TableState
from beava.engine.store import FeatureStore

MAX_UPLOADS = 64  # a backfill begins an upload per table
MAX_PARTS = 1024  # parts of one upload
MAX_STAGED_BYTES = 1 << 30  # every open upload together
FIRST_MISSING = 10  # the incomplete parts a refused commit names
MAX_CHUNK_BYTES = 2 * 1024 * 1024  # fits a 4 MiB frame or HTTP body, also as base64 JSON
IDLE_SECONDS = 600.0


@dataclass
class _Part:
    """A part being received: its chunks as they came (joined once, when the commit
    decodes it; appending each to one growing buffer copied the bytes so far again and
    again), ``received`` their bytes."""

    size: int
    chunks: list[bytes] = field(default_factory=list)
    received: int = 0

    def data(self) -> bytes:
        """The part's bytes, in one buffer (its chunks dropped)."""
        data = self.chunks[0] if len(self.chunks) == 1 else b"".join(self.chunks)
        self.chunks = [data]
        return data


@dataclass
class _Upload:
    spec: TableSpec
    until_ms: int
    touched: float
    parts: list[_Part | None]  # None: not opened yet

    @property
    def size(self) -> int:
        return sum(part.size for part in self.parts if part is not None)


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
    """A commit being served: each part's state decoded a slice at a time, loaded and joined
    to the parts before it, then the table installed (``beava.engine.backfill.Install``)."""

    __slots__ = ("area", "spec", "parts", "decoder", "table", "starts", "until_ms", "size",
                 "dry_run", "drop_missing", "install")

    def __init__(self, area: BackfillUploads, upload: _Upload, dry_run: bool,
                 drop_missing: bool) -> None:
        self.area = area
        self.spec = upload.spec
        self.parts = [part for part in upload.parts if part is not None]
        self.decoder: StateDecoder | None = None  # of the part being decoded
        self.table: TableState | None = None  # the parts joined so far
        self.starts: list[int] = []  # the first slot of each part joined
        self.until_ms = upload.until_ms
        self.size = upload.size
        self.dry_run = dry_run
        self.drop_missing = drop_missing
        self.install: Install | None = None

    def run(self, deadline: float | None) -> dict[str, Any] | None:
        """Work until done (the reply body) or ``deadline`` (``time.perf_counter``) has
        passed (None: call again). BeavaError when the upload does not install."""
        try:
            while self.install is None:
                part = self._next_part(deadline)
                if part is None:
                    return None
                if self.table is None:
                    self.table = part
                    self.starts.append(0)
                else:
                    join_part(self.table, part, self.starts)
                if len(self.starts) == len(self.parts):
                    self.install = Install(self.area.store, self.table, self.until_ms,
                                           dry_run=self.dry_run,
                                           drop_missing=self.drop_missing)
            reply = self.install.run(deadline, time.perf_counter)
        except BaseException:
            self.area.committing.discard(self)
            raise
        if reply is not None:
            self.area.committing.discard(self)
        return reply

    def _next_part(self, deadline: float | None) -> TableState | None:
        """The next part loaded, or None when ``deadline`` passed first (call again)."""
        index = len(self.starts)
        if not self.parts[index].size:
            return TableState(self.spec)  # a part of 0 bytes holds no entity
        try:
            if self.decoder is None:
                self.decoder = StateDecoder(self.spec, self.parts[index].data())
            if not self.decoder.run(deadline, time.perf_counter):
                return None
            assert self.decoder.state is not None
            part = load_table(self.spec, self.decoder.state)
        except BeavaError as err:
            if len(self.parts) > 1:  # which part does not fit
                err.fields["part"] = index
            raise
        self.decoder = None  # the loaded table holds its state now
        self.parts[index].chunks = []  # nor are its bytes needed any more
        return part


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
        if action == "part":
            return self._part(body)
        if action == "chunk":
            return self._chunk(body)
        if action == "commit":
            return self._commit(body)
        if action == "status":
            upload = self._upload(body)
            return {"parts": [None if part is None else part.received
                              for part in upload.parts]}
        if action == "abort":
            self.uploads.pop(_str(body, "upload"), None)
            return {"aborted": True}
        raise _bad("action", "action must be begin, part, chunk, status, commit or abort")

    def _begin(self, body: dict[str, Any]) -> dict[str, Any]:
        table = _str(body, "table")
        until_ms = _int(body, "until_ms", I64_MAX)
        if "parts" in body:
            if "size" in body:
                raise _bad("size", "give size (one part) or parts (each opened by the part "
                                   "action), not both")
            nparts = _int(body, "parts", MAX_PARTS)
            if nparts < 1:
                raise _bad("parts", f"parts must be an integer from 1 to {MAX_PARTS}")
            size = 0
        else:
            nparts, size = 1, _int(body, "size", MAX_STAGED_BYTES)
        spec = table_spec(body.get("nodes"), table, self.store.registry)
        if nparts > 1 and not spec.keys:
            raise _bad("parts", f"table {table} has no key: its state is one part")
        now = self.monotonic()
        for upload_id, upload in list(self.uploads.items()):
            if upload.spec.name == table or now - upload.touched > IDLE_SECONDS:
                del self.uploads[upload_id]  # a new upload of a table replaces the old one
        if len(self.uploads) + len(self.committing) >= MAX_UPLOADS:
            raise BeavaError("backfill_too_large", table=table,
                             message=f"at most {MAX_UPLOADS} uploads of {MAX_STAGED_BYTES} "
                                     f"bytes together may be open")
        self._check_room(table, size)
        upload_id = secrets.token_hex(12)
        parts: list[_Part | None] = [None] * nparts
        if "parts" not in body:
            parts[0] = _Part(size)
        self.uploads[upload_id] = _Upload(spec, until_ms, now, parts)
        return {"chunk_bytes": MAX_CHUNK_BYTES, "parts": nparts, "table": table,
                "upload": upload_id}

    def _check_room(self, table: str, size: int) -> None:
        if self.staged_bytes + size > MAX_STAGED_BYTES:
            raise BeavaError("backfill_too_large", table=table,
                             message=f"at most {MAX_UPLOADS} uploads of {MAX_STAGED_BYTES} "
                                     f"bytes together may be open")

    def _upload(self, body: dict[str, Any]) -> _Upload:
        upload_id = _str(body, "upload")
        upload = self.uploads.get(upload_id)
        if upload is None:
            raise BeavaError("backfill_upload_not_found", upload=upload_id,
                             message="no open upload with this id (committed, aborted, "
                                     "replaced, idle too long, or the server restarted)")
        upload.touched = self.monotonic()
        return upload

    def _index(self, upload: _Upload, body: dict[str, Any]) -> int:
        if "part" not in body:
            return 0
        return _int(body, "part", len(upload.parts) - 1)

    def _part(self, body: dict[str, Any]) -> dict[str, Any]:
        upload = self._upload(body)
        index = self._index(upload, body)
        size = _int(body, "size", MAX_STAGED_BYTES)
        old = upload.parts[index]
        upload.parts[index] = None  # started over: its bytes so far no longer count
        try:
            self._check_room(upload.spec.name, size)
        except BeavaError:
            upload.parts[index] = old
            raise
        upload.parts[index] = _Part(size)
        return {"part": index, "size": size}

    def _chunk(self, body: dict[str, Any]) -> dict[str, Any]:
        upload = self._upload(body)
        index = self._index(upload, body)
        part = upload.parts[index]
        if part is None:
            raise _bad("part", f"part {index} is not open (open it with the part action)")
        offset = _int(body, "offset", part.size)
        data = body.get("data")
        if type(data) is str:
            try:
                data = base64.b64decode(data, validate=True)
            except (binascii.Error, ValueError):
                raise _bad("data", "data is not base64") from None
        if type(data) is not bytes:
            raise _bad("data", "data must be bytes (base64 text in JSON)")
        if offset != part.received:
            raise BeavaError("invalid_backfill", path="offset", expected=part.received,
                             message=f"offset {offset} is not the bytes received so far "
                                     f"({part.received})")
        if len(data) > MAX_CHUNK_BYTES or offset + len(data) > part.size:
            raise _bad("data", f"a chunk holds at most {MAX_CHUNK_BYTES} bytes, within the "
                               f"part's size {part.size}")
        part.chunks.append(data)
        part.received += len(data)
        return {"received": part.received}

    def _commit(self, body: dict[str, Any]) -> Commit:
        upload = self._upload(body)
        dry_run, drop_missing = _bool(body, "dry_run"), _bool(body, "drop_missing")
        missing = [index for index, part in enumerate(upload.parts)
                   if part is None or part.received != part.size]
        if missing:
            if len(upload.parts) == 1:
                part = upload.parts[0]
                assert part is not None
                raise BeavaError("invalid_backfill", path="upload", expected=part.size,
                                 message=f"received {part.received} of {part.size} bytes")
            raise BeavaError("invalid_backfill", path="upload", parts=missing[:FIRST_MISSING],
                             message=f"{len(missing)} of the {len(upload.parts)} parts are "
                                     f"not complete (the first: "
                                     f"{', '.join(map(str, missing[:FIRST_MISSING]))})")
        del self.uploads[_str(body, "upload")]
        commit = Commit(self, upload, dry_run, drop_missing)
        self.committing.add(commit)
        return commit

"""beava_client.results: merging bulk push replies into one result."""

from __future__ import annotations

from beava_client.frames import Frame
from beava_client.results import PushManyTally, PushTally, empty_push_result


def _ack(lsn: int, rv: int = 1) -> Frame:
    return (0x10, 1, b'{"ack_lsn":%d,"idempotent_replay":false,"registry_version":%d}' % (lsn, rv))


def test_push_tally_counts_acks_and_indexes_errors() -> None:
    tally = PushTally(0x10)
    tally.feed([_ack(5), (0xFFFF, 1, b'{"error":{"code":"invalid_event"},"registry_version":1}')])
    tally.feed([_ack(6), (0xFFFF, 1, b'{"code":"unsupported"}'), _ack(7, 2)])
    assert tally.result() == {
        "acks": 3,
        "ack_lsn": 7,
        "errors": [
            {"index": 1, "error": {"code": "invalid_event"}},
            {"index": 3, "error": {"code": "unsupported"}},
        ],
        "registry_version": 2,
    }


def test_push_tally_registry_version_from_the_last_reply() -> None:
    tally = PushTally(0x10)
    error = b'{"error":{"code":"event_not_found"},"registry_version":4}'
    tally.feed([_ack(1, 1), (0xFFFF, 1, error)])
    assert tally.result()["registry_version"] == 4
    assert tally.result()["ack_lsn"] == 1


def test_push_tally_offset_and_unexpected_op() -> None:
    tally = PushTally(0x10, offset=100)
    tally.feed([(0x23, 1, b"{}")])
    assert tally.result()["errors"] == [{"index": 100, "error": {"code": "unexpected_frame",
                                                                 "op": 0x23}}]
    assert tally.result()["ack_lsn"] is None


def test_push_many_tally_rebases_indexes() -> None:
    tally = PushManyTally()
    tally.add({"ack_lsn": 10, "acks": 2, "errors": [{"error": {"code": "x"}, "index": 1}],
               "registry_version": 3}, 0)
    tally.add({"ack_lsn": None, "acks": 0, "errors": [{"error": {"code": "y"}, "index": 0}],
               "registry_version": 3}, 3)
    tally.add({"ack_lsn": 12, "acks": 1, "errors": [], "registry_version": 4}, 4)
    assert tally.result() == {
        "acks": 3,
        "ack_lsn": 12,
        "errors": [{"error": {"code": "x"}, "index": 1}, {"error": {"code": "y"}, "index": 3}],
        "registry_version": 4,
    }


def test_empty_result() -> None:
    assert empty_push_result() == {"acks": 0, "ack_lsn": None, "errors": [],
                                   "registry_version": None}

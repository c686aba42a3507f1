"""The pairing core on its own: keys per direction, id text and id type; reuse; orphans."""

from __future__ import annotations

import pytest
from blackbox.recorder.log.jsonrpc import id_fields
from blackbox.recorder.log.pairing import Pending, request_key, response_key


def req(direction: str, raw_id: object) -> tuple:
    return request_key(direction, *id_fields(raw_id))


def resp(direction: str, raw_id: object) -> tuple:
    return response_key(direction, *id_fields(raw_id))


def test_a_response_closes_the_request_that_went_the_other_way() -> None:
    pending: Pending[str] = Pending()
    assert pending.open(req("c2s", 1), "call 1") is None
    assert resp("s2c", 1) == req("c2s", 1)
    assert pending.close(resp("c2s", 1)) is None  # same direction as the request: not its answer
    assert pending.close(resp("s2c", 1)) == "call 1"
    assert len(pending) == 0


def test_mixed_id_types_are_different_ids() -> None:
    pending: Pending[str] = Pending()
    for raw_id in (0, "0", 0.0, None, True, "true"):
        pending.open(req("c2s", raw_id), repr(raw_id))
    assert len(pending) == 6
    assert pending.close(resp("s2c", "0")) == "'0'"
    assert pending.close(resp("s2c", 0)) == "0"
    assert pending.close(resp("s2c", None)) == "None"
    assert pending.close(resp("s2c", "true")) == "'true'"
    assert pending.outstanding() == ["0.0", "True"]


def test_the_same_id_both_ways_pairs_each_side_separately() -> None:
    """A server's own request may reuse id 0 while the client's id 0 is outstanding."""
    pending: Pending[str] = Pending()
    pending.open(req("c2s", 0), "client asks")
    pending.open(req("s2c", 0), "server asks")
    assert pending.outstanding("c2s") == ["client asks"]
    assert pending.outstanding("s2c") == ["server asks"]
    assert pending.close(resp("c2s", 0)) == "server asks"  # the client answers the server
    assert pending.close(resp("s2c", 0)) == "client asks"
    assert pending.outstanding() == []


def test_ids_are_reused_once_answered() -> None:
    pending: Pending[str] = Pending()
    pending.open(req("c2s", 7), "first")
    assert pending.close(resp("s2c", 7)) == "first"
    assert pending.open(req("c2s", 7), "second") is None
    assert pending.close(resp("s2c", 7)) == "second"
    assert pending.close(resp("s2c", 7)) is None  # a duplicate answer is an orphan


def test_an_id_reused_while_outstanding_displaces_the_first() -> None:
    pending: Pending[str] = Pending()
    pending.open(req("c2s", 7), "first")
    pending.open(req("c2s", 8), "other")
    assert pending.open(req("c2s", 7), "second") == "first"
    assert pending.outstanding() == ["other", "second"]  # oldest first, from the new request
    assert pending.close(resp("s2c", 7)) == "second"


def test_a_response_with_no_request_is_an_orphan() -> None:
    pending: Pending[str] = Pending()
    assert pending.close(resp("s2c", 1)) is None
    assert pending.close(response_key("-", "1", "number")) is None  # no side's direction
    pending.open(req("c2s", 1), "call")
    assert pending.close(resp("s2c", "1")) is None  # "1" is not 1
    assert pending.outstanding() == ["call"]


def test_a_batch_pairs_message_by_message() -> None:
    """A batch's requests open one key each; their answers may come in any order and frames."""
    pending: Pending[str] = Pending()
    for raw_id in (1, 2, "3"):
        pending.open(req("c2s", raw_id), f"item {raw_id}")
    assert [pending.close(resp("s2c", raw_id)) for raw_id in ("3", 1)] == ["item 3", "item 1"]
    assert pending.outstanding() == ["item 2"]


def test_outstanding_oldest_first_and_replace_keeps_the_place() -> None:
    pending: Pending[str] = Pending()
    for n in range(3):
        pending.open(req("c2s", n), f"call {n}")
    pending.replace(req("c2s", 0), "call 0, more known")
    assert pending.outstanding() == ["call 0, more known", "call 1", "call 2"]
    assert pending.get(req("c2s", 1)) == "call 1" and req("c2s", 1) in pending
    assert [key for key, _ in pending.items()] == [req("c2s", n) for n in range(3)]
    with pytest.raises(KeyError):
        pending.replace(req("c2s", 9), "never opened")


def test_newest_matches_the_id_text_whatever_its_type() -> None:
    pending: Pending[str] = Pending()
    pending.open(req("c2s", 7), "number")
    pending.open(req("c2s", "7"), "string")
    pending.open(req("s2c", 7), "server's")
    assert pending.newest("c2s", "7") == "string"
    pending.open(req("c2s", 7), "number again")
    assert pending.newest("c2s", "7") == "number again"
    assert pending.newest("s2c", "7") == "server's"
    assert pending.newest("c2s", "8") is None

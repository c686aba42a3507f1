"""Request <-> response pairing, the one implementation every reader uses.

The analytics calls table, the replayer's recording, the policy decisions' join and the stdio
observer all need "which request does this response answer?". The wire facts are easy to get
subtly wrong, so they live here once, as a small pure core with no I/O: a `Pending` table of the
requests waiting for their answers, keyed by `request_key` and answered through `response_key`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

# (direction of the request, id text, id type), as `blackbox.recorder.log.jsonrpc.id_fields` gives
# an id.
Key = tuple[str, str | None, str | None]

# A response travels the other way from its request.
OPPOSITE = {"c2s": "s2c", "s2c": "c2s"}

T = TypeVar("T")


def request_key(direction: str, rpc_id: str | None, rpc_id_type: str | None) -> Key:
    """The key of a request sent in `direction`.

    Ids are per direction (both sides number their own requests: a server's own request may
    reuse id 0 while the client's id 0 is outstanding) and of mixed type (0 and "0" are
    different ids), so the key holds all three."""
    return (direction, rpc_id, rpc_id_type)


def response_key(direction: str, rpc_id: str | None, rpc_id_type: str | None) -> Key:
    """The key of the request a response sent in `direction` answers: the request went the
    other way. A direction that is neither side's gives a key no request has."""
    return (OPPOSITE.get(direction, ""), rpc_id, rpc_id_type)


class Pending(Generic[T]):
    """The requests waiting for their answers, with what the caller wants to remember of each.

    `open` a request under its `request_key`, `close` it with its response's `response_key` and
    get back what was remembered (None for a response with no request: an orphan). Ids are reused
    once answered, and a client may even reuse one still outstanding: the newer request then
    displaces the older, which `open` hands back (it will never be paired). A batch is no special
    case: each of its messages opens or closes on its own key, as a lone message would.

    Kept oldest first (a reused id counts from its new request). The methods are small enough
    that the hot readers (the analytics refresh) call them per frame.
    """

    __slots__ = ("_waiting",)

    def __init__(self) -> None:
        self._waiting: dict[Key, T] = {}

    def open(self, key: Key, request: T) -> T | None:
        """Remember `request` until its answer; returns the request it displaced, if its id
        was still outstanding."""
        waiting = self._waiting
        displaced = waiting.pop(key, None)
        waiting[key] = request
        return displaced

    def close(self, key: Key) -> T | None:
        """The request a response answers, no longer waiting; None when none was."""
        return self._waiting.pop(key, None)

    def get(self, key: Key) -> T | None:
        """The request waiting under `key`, left waiting."""
        return self._waiting.get(key)

    def replace(self, key: Key, request: T) -> None:
        """Remember something else for a waiting request (it keeps its place in the order)."""
        if key not in self._waiting:
            raise KeyError(key)
        self._waiting[key] = request

    def outstanding(self, direction: str | None = None) -> list[T]:
        """The requests still waiting, oldest first; only those sent in `direction` if given."""
        if direction is None:
            return list(self._waiting.values())
        return [request for key, request in self._waiting.items() if key[0] == direction]

    def items(self) -> list[tuple[Key, T]]:
        """(key, request) of the requests still waiting, oldest first."""
        return list(self._waiting.items())

    def newest(self, direction: str, rpc_id: str | None) -> T | None:
        """The newest request waiting that was sent in `direction` with an id of this text,
        whatever its type: for a reference that carries the id's text only (a policy
        decision's `rpc_id`)."""
        for key in reversed(self._waiting):
            if key[0] == direction and key[1] == rpc_id:
                return self._waiting[key]
        return None

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

"""`blackbox serve`: a stdio MCP server that answers from a recorded session.

A host or an agent can then be tested without the real server (and without its side effects).
Each client request is matched to a recorded request on method and params, ignoring ids and
`_meta`; the recorded response goes back with the client's id. Notifications the server sent while
it worked on that request are sent first, as they were. An unmatched request gets a JSON-RPC error
that names the nearest recorded request and how it differs. When the recorded server exited
instead of answering, the mock exits the same way, so a replay against the mock reproduces it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import BinaryIO

from blackbox.recorder.log import parse
from blackbox.recorder.store import EventStore
from blackbox.replay.matchers import Nearest, matches, nearest
from blackbox.replay.recording import Recording, load_recording

NOT_RECORDED = -32601  # no request with this method was recorded
NO_MATCH = -32602  # the method was recorded, with other params


@dataclass
class Exchange:
    request: dict
    seq: int
    response: dict | None
    notifications: list[bytes] = field(default_factory=list)
    exit_code: int | None = None  # the recorded server exited instead of answering


class ServerExit(Exception):
    """The recording says the server exited here; the mock does the same."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def exchanges(recording: Recording) -> list[Exchange]:
    """The recorded requests with what the server sent back for each."""
    exit_fault = next((f for f in recording.faults if f.fault == "server_exit"), None)
    out: list[Exchange] = []
    for step in recording.steps:
        f = step.frame
        if f.kind != "request" or not isinstance(f.message, dict):
            continue
        response = step.response.message if step.response is not None else None
        end = step.response.seq if step.response is not None else f.seq
        notes = [
            n.raw
            for n in recording.notifications
            if f.seq < n.seq < end and n.kind == "notification"
        ]
        ex = Exchange(f.message, f.seq, response if isinstance(response, dict) else None, notes)
        if ex.response is None and exit_fault is not None and exit_fault.step == step.number:
            ex.exit_code = exit_fault.exit_code if exit_fault.exit_code is not None else 1
        out.append(ex)
    return out


class MockServer:
    """Answers requests from a recording; `handle` maps one incoming frame to outgoing frames."""

    def __init__(self, recording: Recording, strict_order: bool = False) -> None:
        self.recording = recording
        self.exchanges = exchanges(recording)
        self.used = [0] * len(self.exchanges)
        self.strict_order = strict_order
        self.position = 0  # next exchange under --strict-order

    def handle(self, raw: bytes) -> list[bytes]:
        message, problem = parse(raw)
        if problem is not None or not isinstance(message, dict):
            return [_error(None, -32700, f"blackbox serve: cannot parse the request ({problem})")]
        if not isinstance(message.get("method"), str) or "id" not in message:
            return []  # notifications and answers to nothing we asked: nothing to say
        index = self._pick(message)
        if index is None:
            return [self._miss(message)]
        ex = self.exchanges[index]
        self.used[index] += 1
        if ex.exit_code is not None:
            raise ServerExit(ex.exit_code)
        if ex.response is None:
            return list(ex.notifications)  # the recorded server never answered this
        reply = dict(ex.response)
        reply["id"] = message["id"]
        return [*ex.notifications, _compact(reply)]

    def _pick(self, message: dict) -> int | None:
        if self.strict_order:
            if self.position < len(self.exchanges) and matches(
                self.exchanges[self.position].request, message
            ):
                self.position += 1
                return self.position - 1
            return None
        fallback = None
        for i, ex in enumerate(self.exchanges):
            if matches(ex.request, message):
                if not self.used[i]:
                    return i
                fallback = i  # asked again: the last recorded answer to it
        return fallback

    def _miss(self, message: dict) -> bytes:
        method = message.get("method")
        if method == "ping":
            return _compact({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        if self.strict_order:
            if self.position >= len(self.exchanges):
                text = f"no request was recorded after seq {self._last_seq()}, got {method}"
                return _error(message["id"], NO_MATCH, f"blackbox serve: {text}")
            expected = self.exchanges[self.position]
            near = nearest(message, [expected.request])
            assert near is not None
            text = f"expected the recorded request at seq {expected.seq}: {near.explain()}"
            return _error(message["id"], NO_MATCH, f"blackbox serve: {text}", near, expected.seq)
        near = nearest(message, [ex.request for ex in self.exchanges])
        if near is None:
            return _error(
                message["id"], NOT_RECORDED, "blackbox serve: the recording has no requests"
            )
        seq = self.exchanges[near.index].seq
        code = NO_MATCH if near.same_method else NOT_RECORDED
        what = f"no recorded {method} matches" if near.same_method else f"{method} was not recorded"
        text = f"{what}; {near.explain()} (seq {seq})"
        return _error(message["id"], code, f"blackbox serve: {text}", near, seq)

    def _last_seq(self) -> int:
        return self.exchanges[-1].seq if self.exchanges else 0


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _error(
    rpc_id: object, code: int, text: str, near: Nearest | None = None, seq: int | None = None
) -> bytes:
    error: dict = {"code": code, "message": text}
    if near is not None:
        error["data"] = {
            "nearest_seq": seq,
            "nearest_method": near.message.get("method"),
            "differences": [d.as_dict() for d in near.differences],
        }
    return _compact({"jsonrpc": "2.0", "id": rpc_id, "error": error})


def serve_session(
    store: EventStore, session_ref: str, stdin: BinaryIO, stdout: BinaryIO, strict_order: bool
) -> int:
    """Load a session, let go of the store (a mock may run for hours), serve it."""
    recording = load_recording(store, store.resolve(session_ref))
    store.close()
    return serve(recording, stdin, stdout, strict_order)


def serve(
    recording: Recording, stdin: BinaryIO, stdout: BinaryIO, strict_order: bool = False
) -> int:
    """Serve the recording over newline-delimited JSON-RPC until stdin closes. Returns the exit
    status: 0, or the recorded server's exit status when the recording ends in a crash."""
    server = MockServer(recording, strict_order=strict_order)
    for line in stdin:
        raw = line.rstrip(b"\r\n")
        if not raw.strip():
            continue
        try:
            replies = server.handle(raw)
        except ServerExit as exc:
            stdout.flush()
            return exc.code
        for reply in replies:
            stdout.write(reply + b"\n")
        stdout.flush()
    return 0

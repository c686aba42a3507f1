"""A deliberately misbehaving HTTP server for the proxy's fault tests, written on raw asyncio
streams so that each failure is byte-exact: a 500, a chunked SSE body cut in the middle of an
event (connection dropped, or body ended cleanly mid-event), a slow SSE stream whose events carry
the time they were sent, a JSON reply that sets a cookie, a server that never answers, and a
2024-11-05 SSE stream announcing an absolute endpoint URL. It runs in a thread of the test
process.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from urllib.parse import parse_qs, urlsplit

SSE_HEADERS = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _response_for(body: bytes) -> bytes:
    try:
        req = json.loads(body)
        rid = req.get("id")
    except ValueError:
        rid = None
    return json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"ok": True}}).encode()


def _json_head(length: int, extra: bytes = b"") -> bytes:
    """A 200 JSON response's head declaring `length` body bytes (`extra`: more header lines)."""
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        + extra
        + f"content-length: {length}\r\n\r\n".encode()
    )


class FaultServer:
    def __init__(self) -> None:
        self.port = 0
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sse_writers: dict[str, asyncio.StreamWriter] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._server = server
        self._ready.set()
        self._loop.run_forever()

    def __enter__(self) -> FaultServer:
        self._thread.start()
        self._ready.wait(5)
        return self

    def __exit__(self, *_exc: object) -> None:
        async def close() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
                self.requests.append((method, target, headers, body))
                keep = await self._route(method, target, headers, body, writer)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _route(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        parts = urlsplit(target)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        path = parts.path
        if path == "/500":
            text = b"boom: the server fell over"
            writer.write(
                b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
                + f"content-length: {len(text)}\r\n\r\n".encode()
                + text
            )
            return True
        if path == "/json":
            reply = _response_for(body)
            writer.write(_json_head(len(reply)) + reply)
            return True
        if path == "/json-cut":  # a JSON reply that stops before its declared length
            reply = _response_for(body)
            writer.write(_json_head(len(reply) + 100) + reply[:20])
            await writer.drain()
            await asyncio.sleep(0.05)
            return False
        if path == "/json-big":  # a JSON reply of `size` bytes, in one piece or chunked
            pad = "x" * int(query.get("size", "1000"))
            reply = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"pad": pad}}).encode()
            if query.get("chunked"):
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"transfer-encoding: chunked\r\n\r\n"
                    + b"".join(chunk(reply[i : i + 4096]) for i in range(0, len(reply), 4096))
                    + b"0\r\n\r\n"
                )
            else:
                writer.write(_json_head(len(reply)) + reply)
            return True
        if path == "/cookie":  # a server that hands out a session cookie, as many do
            reply = _response_for(body)
            cookie = b"set-cookie: sid=only-for-the-first-client; Path=/\r\n"
            writer.write(_json_head(len(reply), cookie) + reply)
            return True
        if path in ("/cut", "/cut-clean"):
            writer.write(SSE_HEADERS)
            note = b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
            writer.write(chunk(b"id: e1\ndata: " + note + b"\n\n"))
            writer.write(chunk(b'id: e2\ndata: {"jsonrpc":"2.0","id":1,"res'))
            await writer.drain()
            await asyncio.sleep(0.05)
            if path == "/cut-clean":
                writer.write(b"0\r\n\r\n")  # the body ends cleanly, the event does not
                return True
            return False  # drop the connection mid-chunk
        if path == "/slow":
            count = int(query.get("n", "5"))
            gap = float(query.get("gap", "0.2"))
            writer.write(SSE_HEADERS)
            writer.write(chunk(b"id: p0\ndata: \n\n"))  # a priming event, as servers send
            await writer.drain()
            for i in range(count):
                await asyncio.sleep(gap)
                msg = {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": {"i": i, "sent": time.time()}},
                }
                writer.write(chunk(f"id: s{i}\ndata: {json.dumps(msg)}\n\n".encode()))
                await writer.drain()
            writer.write(chunk(b"data: " + _response_for(body) + b"\n\n"))
            writer.write(b"0\r\n\r\n")
            return True
        if path == "/hang":
            await asyncio.sleep(30)
            return False
        if path == "/sse" and method == "GET":
            sid = f"s{len(self._sse_writers) + 1}"
            self._sse_writers[sid] = writer
            writer.write(SSE_HEADERS)
            endpoint = f"{self.url}/messages?session_id={sid}"
            writer.write(chunk(f"event: endpoint\ndata: {endpoint}\n\n".encode()))
            await writer.drain()
            while not writer.is_closing():
                await asyncio.sleep(0.05)
                if writer.transport.is_closing():
                    break
            return False
        if path == "/messages" and method == "POST":
            sse = self._sse_writers.get(query.get("session_id", ""))
            writer.write(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
            if sse is not None:
                sse.write(chunk(b"event: message\ndata: " + _response_for(body) + b"\n\n"))
                await sse.drain()
            return True
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        return True


# What the fault tests send through the proxy: a plain tools/call and the headers an SDK sends.
CALL = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"add","arguments":{}}}'
JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}

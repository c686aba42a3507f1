"""The OTLP trace request as protobuf wire bytes, written directly from span data.

Why it exists: the batch export's target is 20,000 spans/s, which building protobuf message
objects span by span does not reach: most of its time goes into attribute objects whose
(key, value) pairs repeat from span to span. Here each such pair is encoded once and its bytes
reused, and a span is a handful of joins. The bytes are the same protobuf a message object would
serialise to (tests decode them with `opentelemetry-proto` and compare with `sdk.encode`); the
OTLP exporter's own transport sends them. Field numbers are the OTLP proto's
(opentelemetry/proto/trace/v1/trace.proto).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from blackbox.recorder.otel.spans import SpanData

_FIXED64 = struct.Struct("<Q").pack
_FIXED32 = struct.Struct("<I").pack
_DOUBLE = struct.Struct("<d").pack
_CACHE_MAX = 50_000
UNIQUE = frozenset({"mcp_blackbox.position", "mcp_blackbox.seq", "jsonrpc.request.id"})
_pairs: dict[tuple[int, str, Any], bytes] = {}
_keys: dict[str, bytes] = {}


_ONE_BYTE = [bytes([i]) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _ONE_BYTE[value]
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_TAGS = {n: _varint(n << 3 | 2) for n in range(1, 16)}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    size = len(payload)
    return _TAGS[number] + (_ONE_BYTE[size] if size < 128 else _varint(size)) + payload


def _any_value(value: object) -> bytes:
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE(value)
    return _field(1, str(value).encode())


def key_value(key: str, value: object) -> bytes:
    """One KeyValue message's bytes (without the field tag that embeds it)."""
    return _field(1, key.encode()) + _field(2, _any_value(value))


def attributes(attrs: dict[str, Any], number: int) -> bytes:
    """Repeated KeyValue field `number` for `attrs`; repeated pairs come from the cache."""
    parts = []
    cache = _pairs
    for k, v in attrs.items():
        if k in UNIQUE:
            key = _keys.get(k)
            if key is None:
                key = _keys[k] = _field(1, k.encode())
            parts.append(_field(number, key + _field(2, _any_value(v))))
            continue
        # The field number is part of the key: a pair is field 9 on a span, 3 on an event.
        ck = (number, k, v if v.__class__ is not bool else ("bool", v))
        enc = cache.get(ck)
        if enc is None:
            enc = _field(number, key_value(k, v))
            if len(cache) < _CACHE_MAX:
                cache[ck] = enc
        parts.append(enc)
    return b"".join(parts)


_CLIENT = b"\x30\x03"  # kind = SPAN_KIND_CLIENT
_ERROR_CODE = b"\x18\x02"  # Status.code = STATUS_CODE_ERROR


def span_bytes(s: SpanData) -> bytes:
    parts = [
        b"\x0a\x10" + s.trace_id.to_bytes(16, "big"),
        b"\x12\x08" + s.span_id.to_bytes(8, "big"),
    ]
    if s.tracestate:
        parts.append(_field(3, s.tracestate.encode()))
    if s.parent_id is not None:
        parts.append(b"\x22\x08" + s.parent_id.to_bytes(8, "big"))
    parts.append(_field(5, s.name.encode()))
    parts.append(_CLIENT)
    parts.append(b"\x39" + _FIXED64(s.start_ns))
    parts.append(b"\x41" + _FIXED64(s.end_ns))
    parts.append(attributes(s.attributes, 9))
    for name, ts, attrs in s.events:
        event = b"\x09" + _FIXED64(ts) + _field(2, name.encode()) + attributes(attrs, 3)
        parts.append(_field(11, event))
    if s.error:
        status = _field(2, s.status_message.encode()) if s.status_message else b""
        parts.append(_field(15, status + _ERROR_CODE))
    flags = 0x100 | (0x200 if s.remote_parent else 0) | 0x01
    parts.append(b"\x85\x01" + _FIXED32(flags))  # field 16, wire type 5
    return b"".join(parts)


def request_bytes(
    spans: Sequence[SpanData], resource: bytes, scope: bytes, schema_url: str, res_schema: str
) -> bytes:
    """An ExportTraceServiceRequest: one ResourceSpans, one ScopeSpans. `resource` and `scope`
    are their messages' serialised bytes."""
    body = b"".join([_field(2, span_bytes(s)) for s in spans])
    scope_spans = _field(1, scope) + body + (_field(3, schema_url.encode()) if schema_url else b"")
    resource_spans = _field(1, resource) + _field(2, scope_spans)
    if res_schema:
        resource_spans += _field(3, res_schema.encode())
    return _field(1, resource_spans)

"""Redaction removes every planted secret (params, results, stderr, headers, decisions) and
leaves the rest intact; fingerprints are keyed and joinable; it never raises."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from blackbox.recorder.privacy.redact import RedactionRulesError, Redactor, load_or_create_key
from blackbox.recorder.store.synthetic import SECRETS, session_events

KEY = b"test-key"


def test_every_planted_secret_is_removed_and_the_rest_kept() -> None:
    redactor = Redactor.default(key=KEY)
    events = session_events("s1", 1_790_000_000_000_000_000, era="2026-07-28", secrets=True)
    out = [redactor.redact_frame(ev.raw) for ev in events]
    blob = b"\n".join(out)
    for name, secret in SECRETS.items():
        assert secret.encode() not in blob, name
    # Unchanged records are the very same bytes; changed ones are still JSON of the same shape.
    for ev, red in zip(events, out, strict=True):
        if red == ev.raw:
            continue
        before, after = json.loads(ev.raw), json.loads(red)
        assert _shape(before) == _shape(after)
    call = json.loads(out[4])
    assert call["method"] == "tools/call"
    assert call["params"]["name"] == "get_current_time"
    assert call["params"]["arguments"]["timezone"] == "Europe/Paris"
    assert call["params"]["arguments"]["note"].startswith("login with password=[redacted:")
    meta = call["params"]["_meta"]
    assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
    result = json.loads(out[6])["result"]
    text = result["content"][0]["text"]
    assert text.startswith("token [redacted:") and " belongs to [redacted:" in text
    assert result["isError"] is False
    stderr = [json.loads(r) for r, ev in zip(out, events, strict=True) if ev.kind == "stderr"]
    assert stderr[0] == {"v": 1, "line": "INFO server ready"}  # untouched: no secret in it
    assert stderr[1]["line"].startswith("DEBUG aws=[redacted:")
    http = next(
        json.loads(r) for r, ev in zip(out, events, strict=True) if ev.kind == "http_exchange"
    )
    headers = http["request_headers"]
    assert headers["Authorization"].startswith("Bearer [redacted:")
    assert headers["X-Slack-Token"].startswith("[redacted:")
    assert headers["Accept"] == "application/json, text/event-stream"
    assert http["response_headers"] == {"content-type": "application/json"}
    assert http["status"] == 200 and http["path"] == "/mcp"


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__ if not isinstance(value, str) else "str"


@pytest.mark.parametrize(
    "secret",
    [
        "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUv",
        "ghp_" + "x" * 36,
        "github_pat_11ABCDEFG0123456789_abcdefghijkl",
        "AKIAIOSFODNN7EXAMPLE",
        "xoxp-1234567890-abcdefghij",
        "AIzaSyA1234567890abcdefghijklmnopqrstuv",
        "bob.smith+mcp@mail.example.co.uk",
    ],
)
def test_builtin_shapes_inside_free_text(secret: str) -> None:
    redactor = Redactor.default(key=KEY)
    out = redactor.redact_text(f"before {secret} after")
    assert secret not in out
    assert out.startswith("before [redacted:") and out.endswith("] after")


def test_password_like_keys_anywhere_and_camel_case() -> None:
    redactor = Redactor.default(key=KEY)
    doc = {
        "a": {"password": "p1", "apiKey": "k1", "X-Api-Key": "k2", "client_secret": "c"},
        "list": [{"accessToken": "t1"}, {"Authorization": "Basic dXNlcjpwYXNz"}],
        "progressToken": "pt-1",
        "max_tokens": 100,
        "note": "fine",
    }
    out = redactor.redact_value(doc)
    assert all(str(v).startswith("[redacted:") for v in out["a"].values())
    assert out["list"][0]["accessToken"].startswith("[redacted:")
    assert out["list"][1]["Authorization"].startswith("Basic [redacted:")
    assert out["progressToken"] == "pt-1" and out["max_tokens"] == 100 and out["note"] == "fine"
    assert doc["a"]["password"] == "p1"  # the input is not changed


def test_equal_secrets_share_a_fingerprint_and_keys_differ() -> None:
    a = Redactor.default(key=KEY)
    b = Redactor.default(key=KEY)
    other = Redactor.default(key=b"another-key")
    s = SECRETS["param_api_key"]
    assert a.redact_text(s) == b.redact_text(f"{s}") != other.redact_text(s)
    assert a.redact_text(s) != a.redact_text(s + "x")
    # Joinable across places: the same secret in a header and a param gets the same marker.
    marker = a.redact_text(s)
    header = a.redact_value({"x-api-key": s})
    assert header == {"x-api-key": marker}


def test_unchanged_frames_are_the_same_bytes_and_whitespace_is_kept() -> None:
    redactor = Redactor.default(key=KEY)
    raw = b'{"result":{"content":[]},"jsonrpc":"2.0","id":0}\n'
    assert redactor.redact_frame(raw) is raw
    secret = b'{"id":1, "jsonrpc":"2.0","params":{"token":"abc"}}\n'
    out = redactor.redact_frame(secret)
    assert out.endswith(b"}\n") and b"abc" not in out
    assert list(json.loads(out)) == ["id", "jsonrpc", "params"]  # key order kept


def test_non_json_frames_get_the_patterns_only() -> None:
    redactor = Redactor.default(key=KEY)
    raw = b"Traceback: connect(password=hunter22) failed for a@b.io \xff\xfe"
    out = redactor.redact_frame(raw)
    assert b"hunter22" not in out and b"a@b.io" not in out
    assert out.startswith(b"Traceback: connect(password=[redacted:")
    assert out.endswith(b"\xff\xfe")  # bytes that are not UTF-8 survive untouched


def test_never_raises_on_any_bytes() -> None:
    redactor = Redactor.default(key=KEY)
    rng = random.Random(8)
    for _ in range(300):
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        assert isinstance(redactor.redact_frame(raw), bytes)
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than the JSON parser/walker recursion
    out = redactor.redact_frame(b'{"password":"x","a":' + deep + b"}")
    assert b'"x"' not in out


def test_rules_file_keys_paths_and_patterns(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        """
builtins = false
key = "rules-key"
keys = ["session-ref"]
paths = ["$.params.arguments.card", "$.result.content[*].text"]
patterns = ['\\bEMP-[0-9]{6}\\b']
[patterns_named]
iban = '\\bDE[0-9]{20}\\b'
""",
        encoding="utf-8",
    )
    redactor = Redactor.load(rules)
    doc = {
        "params": {
            "arguments": {"card": "4111111111111111", "sessionRef": "r-1", "password": "kept"},
            "card": "top-level card stays",
        },
        "result": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        "note": "employee EMP-123456 paid to DE12345678901234567890",
    }
    out = redactor.redact_value(doc)
    assert out["params"]["arguments"]["card"].startswith("[redacted:")
    assert out["params"]["arguments"]["sessionRef"].startswith("[redacted:")
    assert out["params"]["arguments"]["password"] == "kept"  # builtins are off
    assert out["params"]["card"] == "top-level card stays"  # the path is exact
    assert [c["text"][:10] for c in out["result"]["content"]] == ["[redacted:"] * 2
    assert "EMP-123456" not in out["note"] and "DE1234" not in out["note"]
    assert redactor.counts == {"path": 3, "key": 1, "pattern_1": 1, "iban": 1}
    assert redactor.fingerprint("x") == Redactor.build(key=b"rules-key").fingerprint("x")


def test_key_file_is_created_once_and_reused(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('key_file = "keys/redact.key"\n', encoding="utf-8")
    first = Redactor.load(rules)
    key_path = tmp_path / "keys" / "redact.key"
    assert key_path.is_file() and oct(key_path.stat().st_mode & 0o777) == "0o600"
    second = Redactor.load(rules)
    assert first.marker("s3cret") == second.marker("s3cret")
    assert load_or_create_key(key_path) == key_path.read_bytes().strip()
    fresh = load_or_create_key(tmp_path / "other.key")
    assert len(fresh) == 64 and fresh != key_path.read_bytes().strip()


def test_default_key_applies_when_the_file_names_none(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('keys = ["ref"]\n', encoding="utf-8")
    a = Redactor.load(rules, default_key=b"dk")
    assert a.marker("v") == Redactor.default(key=b"dk").marker("v")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("keys = [", "not valid TOML"),
        ("colour = 1", "unknown setting"),
        ("patterns = ['(']", "bad regular expression"),
        ("keys = 'password'", "must be a list"),
        ("paths = ['$']", "empty JSON path"),
    ],
)
def test_bad_rules_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(text, encoding="utf-8")
    with pytest.raises(RedactionRulesError, match=message):
        Redactor.load(rules)


def test_missing_rules_file(tmp_path: Path) -> None:
    with pytest.raises(RedactionRulesError, match="does not exist"):
        Redactor.load(tmp_path / "nope.toml")


def test_redaction_is_idempotent() -> None:
    redactor = Redactor.default(key=KEY)
    raw = json.dumps(
        {"headers": {"authorization": "Bearer abcdefghijkl"}, "text": "mail x@y.org key=zzz123"}
    ).encode()
    once = redactor.redact_frame(raw)
    assert redactor.redact_frame(once) == once


def test_without_a_key_fingerprints_join_within_one_redactor_only() -> None:
    a, b = Redactor.default(), Redactor.default()
    assert a.marker("s") == a.marker("s") and a.marker("s") != b.marker("s")


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        (r"(\w)\1\1-secret", "back-reference"),
        (r"(?P<d>\d)(?P=d)x", "back-reference"),
        (r"EMP-\d{4}(?!\d)", "lookahead"),
        (r"(?<!x)EMP-\d{4}", "lookbehind"),
        (r"(?>a+)b", "atomic group"),
        (r"a++b", "possessive repeat"),
        (r"(a)?(?(1)b|c)", "conditional group"),
        (r"(?x) EMP - \d+", "flag"),
    ],
)
def test_patterns_re2_cannot_run_are_refused_naming_the_pattern_and_why(
    tmp_path: Path, pattern: str, construct: str
) -> None:
    """Before: these loaded and ran on Python's backtracking engine (a back-reference can make
    a pattern super-linear); now every pattern runs on RE2, which has none of them."""
    rules = tmp_path / "rules.toml"
    rules.write_text(f"[patterns_named]\nemployee_id = '{pattern}'\n", encoding="utf-8")
    with pytest.raises(RedactionRulesError) as caught:
        Redactor.load(rules)
    message = str(caught.value)
    assert "employee_id" in message and repr(pattern) in message and construct in message
    assert "\n" not in message
    with pytest.raises(RedactionRulesError, match="employee_id"):
        Redactor.build(key=KEY, patterns=[("employee_id", pattern)])


def test_rules_file_patterns_are_joined_into_one_prefilter() -> None:
    redactor = Redactor.build(
        key=KEY, patterns=[r"(?P<secret>\d{3})-\d{3}", r"(?i)emp-(?P<secret>x+)"]
    )
    assert redactor.prefilter is not None and redactor.prefilter.combined is not None
    assert redactor.redact_text("id 123-456 and EMP-xx") == (
        f"id {redactor.marker('123')}-456 and EMP-{redactor.marker('xx')}"
    )
    assert Redactor.default(key=KEY).prefilter is not None


@pytest.mark.parametrize(
    "pattern", [r"^EMP-\d{4}$", r"EMP-\d{4}\b", r"\bEMP-\d{4}", r"\AEMP-\d{4}\Z"]
)
def test_patterns_that_see_string_edges_are_applied_per_string(pattern: str) -> None:
    """The whole-frame fast path would miss these: they must disable it, not leak."""
    redactor = Redactor.build(key=KEY, builtins=False, patterns=[pattern])
    out = redactor.redact_frame(b'{"jsonrpc":"2.0","id":1,"result":{"ref":"EMP-1234"}}')
    assert b"EMP-1234" not in out


def test_fast_path_still_finds_secrets_in_keys_and_escaped_strings() -> None:
    redactor = Redactor.default(key=KEY)
    assert redactor.key_needles is not None  # the built-ins allow the fast path
    for raw in (
        b'{"params":{"clientSecret":"abc"}}',
        b'{"params":{"X-API-KEY":"abc"}}',
        b'{"text":"line\\nmail me: x@y.org"}',
        b'{"text":"{\\"password\\": \\"abc\\"}"}',
    ):
        out = redactor.redact_frame(raw)
        assert b"abc" not in out and b"x@y.org" not in out, raw


@pytest.mark.parametrize(
    "text",
    [
        "BEARER abcdefgh12345678",
        "Token abcdefgh12345678",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==",
        "postgresql://admin:S3cr3tPw@db.internal/app",
        "API-KEY: zz9zz9zz9",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijk",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        "Ops@Example.COM",
    ],
)
def test_every_builtin_is_reached_through_the_prefilter(text: str) -> None:
    redactor = Redactor.default(key=KEY)
    assert redactor.prefilter is not None and redactor.prefilter.may_match(text)
    out = redactor.redact_text(text)
    assert "[redacted:" in out
    assert not any(s in out for s in ("12345678", "S3cr3tPw", "zz9zz9", "MIIEow", "Example"))


def test_rules_without_a_key_get_a_key_file_beside_them(tmp_path: Path) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text('keys = ["ref"]\n', encoding="utf-8")
    first, second = Redactor.load(rules), Redactor.load(rules)
    assert (tmp_path / "rules.toml.key").is_file()
    assert first.marker("v") == second.marker("v")  # record time and export time agree

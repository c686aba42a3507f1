"""The policy file and the gate: parsing with located errors, rule matching, and the verdicts the
taps act on (unit level; the end-to-end proof through a real tap is in test_policy_e2e.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from blackbox.recorder.gate.decisions import args_fingerprint
from blackbox.recorder.gate.policy import DENIED_CODE, Policy, PolicyError
from blackbox.recorder.gate.policy_rules import json_equal, normalize_path, parse_arg_path
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.environment import BLACKBOX

POLICY = """\
default = "allow"

[[rule]]
id = "no-etc-writes"
decision = "deny"
server = "files*"
tool = "write_*"
reason = "nothing writes under /etc"
when = [{ arg = "path", matches = "^/etc/" }]

[[rule]]
id = "confirmed-delete"
decision = "ask"
tool = ["delete_all", "drop_*"]
[[rule.when]]
arg = "$.confirm"
equals = true

[[rule]]
id = "force-flag"
decision = "deny"
[[rule.when]]
arg = "options.force"
present = true

[[rule]]
id = "reads-ok"
decision = "allow"
tool = "read_*"
"""


def call(tool: str, args: object = None, rpc_id: object = 1, method: str = "tools/call") -> dict:
    params: dict = {"name": tool}
    if args is not None:
        params["arguments"] = args
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}


def raw(message: object) -> bytes:
    return json.dumps(message).encode()


@pytest.fixture
def policy() -> Policy:
    return Policy.from_text(POLICY, "policy.toml")


# -- evaluation ----------------------------------------------------------------------------------


def test_first_matching_rule_decides_and_default_applies_otherwise(policy: Policy) -> None:
    o = policy.evaluate("files", "tools/call", "write_file", {"path": "/etc/hosts"})
    assert (o.decision, o.rule, o.decided_by) == ("deny", "no-etc-writes", "rule")
    o = policy.evaluate("files", "tools/call", "write_file", {"path": "/home/a/x"})
    assert (o.decision, o.rule, o.decided_by) == ("allow", "default", "default")


def test_server_glob_needs_a_server_name(policy: Policy) -> None:
    args = {"path": "/etc/hosts"}
    assert policy.evaluate("other", "tools/call", "write_file", args).rule == "default"
    assert policy.evaluate(None, "tools/call", "write_file", args).rule == "default"
    assert policy.evaluate("files-prod", "tools/call", "write_file", args).rule == "no-etc-writes"


def test_tool_lists_and_equals_use_json_equality(policy: Policy) -> None:
    assert policy.evaluate("s", "tools/call", "drop_db", {"confirm": True}).rule == (
        "confirmed-delete"
    )
    # 1 is not true in JSON: the condition must not hold
    assert policy.evaluate("s", "tools/call", "delete_all", {"confirm": 1}).rule == "default"
    assert policy.evaluate("s", "tools/call", "delete_all", {}).rule == "default"


def test_present_condition_on_a_nested_path(policy: Policy) -> None:
    assert policy.evaluate("s", "tools/call", "x", {"options": {"force": False}}).rule == (
        "force-flag"
    )
    assert policy.evaluate("s", "tools/call", "x", {"options": {}}).rule == "default"
    assert policy.evaluate("s", "tools/call", "x", None).rule == "default"


def test_default_deny() -> None:
    p = Policy.from_text('default = "deny"\n[[rule]]\nid = "r"\ndecision = "allow"\ntool = "ok"\n')
    assert p.evaluate(None, "tools/call", "ok", {}).decision == "allow"
    assert p.evaluate(None, "tools/call", "other", {}).decision == "deny"


def test_arg_paths() -> None:
    assert parse_arg_path("a.b[0]") == ("a", "b", 0)
    assert parse_arg_path('$.files[-1]["x.y"]') == ("files", -1, "x.y")
    assert parse_arg_path("$") == ()
    with pytest.raises(ValueError):
        parse_arg_path("a..b[")


def test_json_equal_distinguishes_booleans_from_numbers() -> None:
    assert json_equal(1, 1.0)
    assert not json_equal(True, 1)
    assert not json_equal([True], [1])
    assert json_equal({"a": [1, "x"]}, {"a": [1.0, "x"]})
    assert not json_equal("1", 1)


# -- the gate ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}',
        b"not json at all",
        b'{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"a\\nb"}}',
    ],
)
def test_ungated_frames_return_none(policy: Policy, frame: bytes) -> None:
    assert policy.check("files", frame) is None


def test_allowed_call_yields_one_decision_and_no_reply(policy: Policy) -> None:
    args = {"path": "/home/a/x", "content": "hi"}
    verdict = policy.check("files", raw(call("write_file", args, rpc_id=7)))
    assert verdict is not None and verdict.allowed and verdict.reply is None
    (doc,) = [json.loads(d) for d in verdict.decision_docs]
    assert doc["decision"] == "allow" and doc["final"] == "allow"
    assert doc["source"] == "policy" and doc["decided_by"] == "default"
    assert doc["rule"] == "default" and doc["server"] == "files" and doc["tool"] == "write_file"
    assert doc["rpc_id"] == "7" and doc["request_seq"] is None
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":")).encode()
    assert doc["args_fingerprint"] == hashlib.sha256(canonical).hexdigest()
    assert doc["policy_sha256"] == policy.sha256


@pytest.mark.parametrize("rpc_id", [0, "0", "req-9"])
def test_denied_call_gets_an_error_naming_the_rule_with_its_own_id(
    policy: Policy, rpc_id: object
) -> None:
    verdict = policy.check("files", raw(call("write_file", {"path": "/etc/x"}, rpc_id)))
    assert verdict is not None and not verdict.allowed
    reply = json.loads(verdict.reply)
    assert reply["id"] == rpc_id and type(reply["id"]) is type(rpc_id)
    assert reply["error"]["code"] == DENIED_CODE
    assert reply["error"]["message"].startswith("denied by policy rule no-etc-writes: ")
    assert reply["error"]["data"]["rule"] == "no-etc-writes"
    assert reply["error"]["data"]["decision"] == "deny"
    assert not verdict.reply.endswith(b"\n")
    (doc,) = [json.loads(d) for d in verdict.decision_docs]
    assert (doc["decision"], doc["final"], doc["rule"]) == ("deny", "deny", "no-etc-writes")


def test_ask_cannot_be_asked_at_a_tap_so_it_is_denied(policy: Policy) -> None:
    verdict = policy.check("s", raw(call("delete_all", {"confirm": True})))
    assert verdict is not None and not verdict.allowed
    doc = json.loads(verdict.decision_docs[0])
    assert (doc["decision"], doc["final"]) == ("ask", "deny")


def test_escaped_method_cannot_slip_past_the_prefilter(policy: Policy) -> None:
    frame = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools\\/call",'
        b'"params":{"name":"write_file","arguments":{"path":"/etc/x"}}}'
    )
    verdict = policy.check("files", frame)
    assert verdict is not None and not verdict.allowed


def test_unparseable_frame_mentioning_tools_call_is_refused(policy: Policy) -> None:
    verdict = policy.check("files", b'{"jsonrpc":"2.0","id":3,"method":"tools/call",')
    assert verdict is not None and not verdict.allowed
    assert json.loads(verdict.reply)["error"]["code"] == -32700
    assert len(verdict.decision_docs) == 1


def test_notification_form_is_gated_without_a_reply(policy: Policy) -> None:
    message = call("write_file", {"path": "/etc/x"})
    del message["id"]
    verdict = policy.check("files", raw(message))
    assert verdict is not None and not verdict.allowed and verdict.reply is None
    assert json.loads(verdict.decision_docs[0])["rpc_id"] is None


def test_batch_with_one_denied_call_is_denied_whole(policy: Policy) -> None:
    batch = [
        call("write_file", {"path": "/etc/x"}, rpc_id=1),
        call("echo", {"message": "hi"}, rpc_id=2),
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
    ]
    verdict = policy.check("files", raw(batch))
    assert verdict is not None and not verdict.allowed
    replies = json.loads(verdict.reply)
    assert [r["id"] for r in replies] == [1, 2, 3]  # every request answered, notification not
    assert all(r["error"]["code"] == DENIED_CODE for r in replies)
    assert all(r["error"]["data"]["rule"] == "no-etc-writes" for r in replies)
    docs = [json.loads(d) for d in verdict.decision_docs]
    assert [(d["tool"], d["decision"], d["final"]) for d in docs] == [
        ("write_file", "deny", "deny"),
        ("echo", "allow", "deny"),
    ]
    assert [d["batch_index"] for d in docs] == [0, 1]


def test_batch_of_allowed_calls_is_forwarded_with_a_decision_each(policy: Policy) -> None:
    batch = [call("echo", {"m": 1}, rpc_id=1), call("read_x", {}, rpc_id=2)]
    verdict = policy.check("files", raw(batch))
    assert verdict is not None and verdict.allowed and verdict.reply is None
    assert [json.loads(d)["rule"] for d in verdict.decision_docs] == ["default", "reads-ok"]


def test_rules_can_gate_other_methods_by_exact_name() -> None:
    p = Policy.from_text(
        '[[rule]]\nid = "no-secrets"\ndecision = "deny"\nmethod = "resources/read"\n'
        'when = [{ arg = "uri", matches = "secret" }]\n'
    )
    frame = {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "s://secret"}}
    verdict = p.check(None, raw(frame))
    assert verdict is not None and not verdict.allowed
    assert json.loads(verdict.decision_docs[0])["method"] == "resources/read"
    assert p.check(None, raw(frame | {"params": {"uri": "s://public"}})).allowed


def test_missing_arguments_fingerprint_as_empty_object(policy: Policy) -> None:
    verdict = policy.check("files", raw(call("echo")))
    assert json.loads(verdict.decision_docs[0])["args_fingerprint"] == args_fingerprint({})


# -- malformed policies refuse to load, pointing at the line --------------------------------------


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ('default = "allow"\n[[rule]\nid = "x"\n', "2:", "invalid TOML"),
        ('default = "maybe"\n', "1:1:", "default must be"),
        (
            '\n[[rule]]\nid = "a"\ndecision = "allow"\n\n[[rule]]\nid = "b"\n  decison = "deny"\n',
            "8:3:",
            "unknown key 'decison'",
        ),
        ('[[rule]]\nid = "a"\ndecision = "permit"\n', "3:1:", "decision must be"),
        (
            '[[rule]]\nid = "a"\ndecision = "deny"\n[[rule.when]]\narg = "p"\nmatches = "(["\n',
            "6:1:",
            "bad regular expression",
        ),
        (
            '[[rule]]\nid = "a"\ndecision = "deny"\n[[rule]]\nid = "a"\ndecision = "deny"\n',
            "5:1:",
            "duplicate rule id",
        ),
        ('[[rule]]\ndecision = "deny"\n', "1:1:", "needs an id"),
        (
            '[[rule]]\nid = "a"\ndecision = "deny"\n'
            'when = [{ arg = "p", equals = 1, present = true }]\n',
            "4:1:",
            "exactly one of",
        ),
        ('[[rule]]\nid = "a"\ndecision = "deny"\nmethod = "tools/*"\n', "4:1:", "not globs"),
        ("colour = 1\n", "1:1:", "unknown key 'colour'"),
    ],
)
def test_malformed_policy_names_file_line_and_column(text: str, where: str, words: str) -> None:
    with pytest.raises(PolicyError) as info:
        Policy.from_text(text, "p.toml")
    message = str(info.value)
    assert message.startswith(f"p.toml:{where}"), message
    assert words in message


def test_load_reads_a_file_and_reports_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "policy.toml"
    path.write_text(POLICY)
    assert len(Policy.load(path).rules) == 4
    with pytest.raises(PolicyError, match="cannot read"):
        Policy.load(tmp_path / "absent.toml")
    bad = tmp_path / "latin1.toml"
    bad.write_bytes(b'default = "allow"\n# caf\xe9\n')
    with pytest.raises(PolicyError, match=r"latin1.toml:2:6: the file is not UTF-8"):
        Policy.load(bad)


def test_cli_policy_check(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(POLICY)
    runner = CliRunner()
    result = runner.invoke(main, ["policy", "check", str(good)])
    assert result.exit_code == 0, result.output
    assert "ok: 4 rule(s), default allow" in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "x"\ndecision = "nope"\n')
    result = runner.invoke(main, ["policy", "check", str(bad)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        f"blackbox: {bad}:3:1: rule 'x': decision must be allow, deny or ask, not 'nope'"
    ]


def test_present_false_matches_an_absent_argument() -> None:
    p = Policy.from_text(
        '[[rule]]\nid = "needs-reason"\ndecision = "deny"\ntool = "deploy"\n'
        'when = [{ arg = "reason", present = false }]\n'
    )
    assert p.evaluate(None, "tools/call", "deploy", {"env": "prod"}).rule == "needs-reason"
    assert p.evaluate(None, "tools/call", "deploy", {"reason": ""}).rule == "default"


def test_rule_cache_does_not_leak_between_targets(policy: Policy) -> None:
    # the same tool on two servers: the server glob must still be applied per server
    args = {"path": "/etc/x"}
    assert policy.evaluate("files", "tools/call", "write_file", args).rule == "no-etc-writes"
    assert policy.evaluate("other", "tools/call", "write_file", args).rule == "default"
    assert policy.evaluate("files", "tools/call", "write_file", args).rule == "no-etc-writes"


def test_a_malformed_policy_refuses_to_start_the_tap(
    tmp_path: Path, blackbox_env: dict[str, str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "x"\n  decison = "deny"\n')
    marker = tmp_path / "server-ran"
    proc = subprocess.run(
        [BLACKBOX, "record", "--policy", str(bad), "--", "touch", str(marker)],
        env=blackbox_env,
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.decode().strip() == (
        f"blackbox: {bad}:3:3: unknown key 'decison' in rule 1 "
        "(expected: decision, id, method, pin, reason, server, tool, when)"
    )
    assert not marker.exists()  # the server was never started


# -- ambiguous JSON: a key twice means one thing to us and another to a first-key parser ----------

AMBIGUOUS = {
    "two names": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file",'
        b'"name":"read_file","arguments":{"path":"/etc/passwd"}}}',
        '"name" in params',
    ),
    "two methods": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list",'
        b'"params":{"name":"write_file","arguments":{"path":"/etc/passwd"}}}',
        '"method"',
    ),
    "two methods, gated one last": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call",'
        b'"params":{"name":"read_file"}}',
        '"method"',
    ),
    "two params": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file",'
        b'"arguments":{"path":"/etc/passwd"}},"params":{"name":"read_file","arguments":{}}}',
        '"params"',
    ),
    "two argument keys": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file",'
        b'"arguments":{"path":"/etc/passwd","path":"/tmp/x"}}}',
        '"path" in params.arguments',
    ),
    "escaped key": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"write_file",'
        b'"na\\u006de":"read_file","arguments":{"path":"/etc/passwd"}}}',
        '"name" in params',
    ),
    "deep in the arguments": (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read_file",'
        b'"arguments":{"files":[{"path":"/a"},{"path":"/etc/x","path":"/b"}]}}}',
        '"path" in params.arguments.files[1]',
    ),
    "two ids": (
        b'{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call","params":{"name":"read_file"}}',
        '"id"',
    ),
}


@pytest.mark.parametrize("frame, where", AMBIGUOUS.values(), ids=AMBIGUOUS.keys())
def test_a_gated_request_with_a_duplicate_key_is_denied_as_ambiguous(
    policy: Policy, frame: bytes, where: str
) -> None:
    verdict = policy.check("files", frame)
    assert verdict is not None and not verdict.allowed
    (doc,) = [json.loads(d) for d in verdict.decision_docs]
    assert (doc["decision"], doc["final"], doc["decided_by"]) == ("deny", "deny", "rule")
    assert doc["rule"] == "ambiguous" and doc["method"] == "tools/call"
    assert f"duplicate key {where} (" in doc["reason"]
    reply = json.loads(verdict.reply)
    assert reply["error"]["code"] == DENIED_CODE
    assert reply["error"]["data"] == {
        "rule": "ambiguous",
        "decision": "deny",
        "policy_decision": "deny",
    }
    assert reply["error"]["message"].startswith("denied by policy rule ambiguous: ambiguous JSON")


def test_a_batch_with_one_ambiguous_request_is_denied_whole(policy: Policy) -> None:
    frame = (
        b'[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}},'
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write_file",'
        b'"arguments":{"path":"/etc/passwd","path":"/tmp/x"}}}]'
    )
    verdict = policy.check("files", frame)
    assert verdict is not None and not verdict.allowed
    docs = [json.loads(d) for d in verdict.decision_docs]
    assert [(d["batch_index"], d["rule"], d["decision"], d["final"]) for d in docs] == [
        (0, "default", "allow", "deny"),
        (1, "ambiguous", "deny", "deny"),
    ]
    replies = json.loads(verdict.reply)
    assert [(r["id"], r["error"]["data"]["rule"]) for r in replies] == [
        (1, "ambiguous"),
        (2, "ambiguous"),
    ]


@pytest.mark.parametrize(
    "frame",
    [
        # no interpretation of these holds a gated request: forwarded as before
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"ping","params":{}}',
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"t":"a\\nb","t":"c"}}',
        b'{"jsonrpc":"2.0","id":1,"result":{"text":"tools/call","text":"x"}}',
        # a method that is not a string names no method a server runs (used to raise)
        b'{"jsonrpc":"2.0","id":1,"method":["tools/call"]}',
        b'[{"jsonrpc":"2.0","id":1,"method":{"m":"tools/call"}}]',
    ],
)
def test_ungated_frames_with_duplicates_or_odd_methods_pass(policy: Policy, frame: bytes) -> None:
    assert policy.check("files", frame) is None


def test_frames_without_duplicates_are_decided_as_before(policy: Policy) -> None:
    # the same key in different objects is no duplicate
    args = {"name": "n", "id": 3, "path": "/home/a", "items": [{"path": "/x"}, {"path": "/y"}]}
    verdict = policy.check("files", raw(call("write_file", args)))
    assert verdict is not None and verdict.allowed
    assert json.loads(verdict.decision_docs[0])["rule"] == "default"
    verdict = policy.check("files", raw(call("write_file", {"path": "/etc/x", "name": "n"})))
    assert verdict is not None and not verdict.allowed
    assert json.loads(verdict.decision_docs[0])["rule"] == "no-etc-writes"


# -- path normalisation, opted into per condition -------------------------------------------------

NORMALISED = """\
[[rule]]
id = "no-etc"
decision = "deny"
tool = "write_*"
when = [{ arg = "path", matches = "^/etc/", normalize = "path" }]

[[rule]]
id = "no-shadow"
decision = "deny"
tool = "read_*"
[[rule.when]]
arg = "path"
equals = "/etc/shadow"
normalize = "path"
"""

SNEAKY_PATHS = [
    "/tmp/../etc/passwd",
    "//etc/passwd",
    "/./etc/passwd",
    "/home/u/../../etc/.",
    "/../etc/a",
]


@pytest.mark.parametrize("path", SNEAKY_PATHS)
def test_normalised_path_rules_see_through_dot_segments(path: str) -> None:
    normalised = Policy.from_text(NORMALISED)
    verdict = normalised.check("files", raw(call("write_file", {"path": path})))
    assert verdict is not None and not verdict.allowed
    assert json.loads(verdict.decision_docs[0])["rule"] == "no-etc"
    # without the option the rule compares the string as sent, as it always did
    plain = Policy.from_text(NORMALISED.replace(', normalize = "path"', ""))
    verdict = plain.check("files", raw(call("write_file", {"path": path})))
    assert verdict is not None and verdict.allowed


def test_normalised_equals_and_paths_that_stay_allowed() -> None:
    p = Policy.from_text(NORMALISED)
    assert p.evaluate(None, "tools/call", "read_file", {"path": "/tmp//../etc/./shadow"}).rule == (
        "no-shadow"
    )
    for path in ["/tmp/etc/passwd", "etc/passwd", "/tmp/x/../y", "/etcetera", 7]:
        assert p.evaluate(None, "tools/call", "write_file", {"path": path}).rule == "default"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/tmp/../etc/passwd", "/etc/passwd"),
        ("//etc//passwd", "/etc/passwd"),
        ("/a/./b/", "/a/b/"),
        ("/a/b/..", "/a/"),
        ("/..", "/"),
        ("a/../../b", "../b"),
        ("a/..", "."),
        ("", ""),
    ],
)
def test_normalize_path(path: str, expected: str) -> None:
    assert normalize_path(path) == expected


@pytest.mark.parametrize(
    ("cond", "words"),
    [
        ('{ arg = "p", matches = "^/etc/", normalize = "url" }', 'normalize must be "path"'),
        ('{ arg = "p", present = true, normalize = "path" }', "not present"),
    ],
)
def test_bad_normalize_options_are_refused_with_their_line(cond: str, words: str) -> None:
    with pytest.raises(PolicyError, match=rf"p.toml:4:1: .*{words}"):
        Policy.from_text(f'[[rule]]\nid = "a"\ndecision = "deny"\nwhen = [{cond}]\n', "p.toml")


@pytest.mark.parametrize("rule_id", ["ambiguous", "unparseable", "default"])
def test_the_gates_own_rule_ids_are_reserved(rule_id: str) -> None:
    with pytest.raises(PolicyError, match="is reserved"):
        Policy.from_text(f'[[rule]]\nid = "{rule_id}"\ndecision = "allow"\n')

"""One grammar for options, through the real commands: every option that takes a time reads
`500ms` and `2m` (a plain number is seconds), refuses a bad value with one error line naming the
option; every name filter is a shell glob, on both stores; filters apply before limits."""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterator

import click
import pytest
from blackbox.recorder.log import events
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.query import listing
from blackbox.recorder.store import open_store
from click.testing import CliRunner

from blackbox.cli.lifecycle_options import idle_after_seconds
from blackbox.cli.main import COMMAND_MODULES, load_command, main
from blackbox.cli.options import Age, Duration, Moment
from tests.fixtures.storekit import T0, frame, session_events

UPSTREAM = ["--upstream", "http://127.0.0.1:9/mcp"]

# (command path, the other arguments it needs, option, the parameter its value lands in)
DURATIONS = [
    (["replay"], ["last"], "--timeout", "timeout_s"),
    (["minimize"], ["last"], "--timeout", "timeout_s"),
    (["proxy"], UPSTREAM, "--timeout", "timeout"),
    (["proxy"], UPSTREAM, "--idle-gap", "idle_gap"),
    (["sql"], ["SELECT 1"], "--timeout", "timeout_s"),
    (["doctor"], ["last"], "--slow", "slow_s"),
    (["record"], ["true"], "--final-ship-seconds", "final_ship_seconds"),
    (["record"], ["true"], "--redact-budget", "redact_budget_s"),
    (["bridge"], ["http://127.0.0.1:9/mcp"], "--final-ship-seconds", "final_ship_seconds"),
    (["retention", "schedule"], [], "--every", "every_s"),
]
AGES = [
    (["retention", "apply"], [], "--older-than", "older_than"),
    (["retention", "apply"], [], "--idle", "idle"),
    (["retention", "schedule"], [], "--older-than", "older_than"),
]
MOMENTS = [
    (["sessions"], [], "--since", "since"),
    (["sessions"], [], "--until", "until"),
    (["report"], ["latency"], "--since", "since"),
    (["report"], ["latency"], "--until", "until"),
    (["export"], ["--out", "bundle"], "--since", "since"),
    (["export"], ["--out", "bundle"], "--until", "until"),
    (["otel", "export"], [], "--since", "since"),
    (["tools"], [], "--since", "since"),
    (["replay"], [], "--since", "since"),
]
# Options that take a time but are read when the command runs (the value may come from the
# environment, or be `off`): checked through the function the command calls.
READ_ON_USE = {("record", "--idle-after"), ("proxy", "--idle-after")}
NOT_TIMES = {("minimize", "--until")}  # what must still happen: fault, divergence or a text


def command_at(path: list[str]) -> click.Command:
    command = load_command(path[0])
    for name in path[1:]:
        assert isinstance(command, click.Group)
        sub = command.get_command(click.Context(command), name)
        assert sub is not None, path
        command = sub
    return command


def parsed(path: list[str], argv: list[str]) -> dict:
    """The values click hands the command for `blackbox PATH ARGV` (parsed, nothing run)."""
    return command_at(path).make_context(" ".join(path), list(argv)).params


def refused(argv: list[str], option: str) -> str:
    """Run `blackbox ARGV`, expect exit 2 and exactly one error line naming `option`."""
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [
        line for line in result.output.splitlines() if line.startswith(("Error", "blackbox:"))
    ]
    assert len(errors) == 1, result.output
    assert f"'{option}'" in errors[0], errors[0]
    return errors[0]


def _ids(cases: list) -> list[str]:
    return [f"{' '.join(path)} {option}" for path, _args, option, _param in cases]


@pytest.mark.parametrize(("path", "args", "option", "param"), DURATIONS, ids=_ids(DURATIONS))
@pytest.mark.parametrize(("text", "seconds"), [("500ms", 0.5), ("2m", 120.0), ("30", 30.0)])
def test_every_duration_option_reads_the_one_grammar(
    path: list[str], args: list[str], option: str, param: str, text: str, seconds: float
) -> None:
    assert parsed(path, [option, text, *args])[param] == pytest.approx(seconds)


@pytest.mark.parametrize(("path", "args", "option", "param"), DURATIONS, ids=_ids(DURATIONS))
def test_a_bad_duration_is_one_error_line_naming_the_option(
    path: list[str], args: list[str], option: str, param: str
) -> None:
    line = refused([*path, option, "3parsecs", *args], option)
    assert "unknown unit 'parsecs'" in line and "500ms, 30s, 2m, 1h" in line


@pytest.mark.parametrize("command", ["record", "proxy"])
def test_idle_after_reads_the_same_grammar(command: str) -> None:
    assert idle_after_seconds("500ms") == 0.5 and idle_after_seconds("2m") == 120.0
    assert idle_after_seconds("45") == 45.0 and idle_after_seconds("off") is None
    args = ["--", "true"] if command == "record" else UPSTREAM
    refused([command, "--idle-after", "3parsecs", *args], "--idle-after")


@pytest.mark.parametrize(("path", "args", "option", "param"), AGES, ids=_ids(AGES))
def test_ages_need_a_unit_and_refuse_a_bare_m(
    path: list[str], args: list[str], option: str, param: str
) -> None:
    assert parsed(path, [option, "90d", *args])[param] == "90d"
    assert parsed(path, [option, "2min", *args])[param] == "2min"
    line = refused([*path, option, "2m", *args], option)
    assert "'2m' is ambiguous: write 2min for minutes or 2mo for months" in line
    assert "is not an age" in refused([*path, option, "90", *args], option)


@pytest.mark.parametrize(("path", "args", "option", "param"), MOMENTS, ids=_ids(MOMENTS))
def test_points_in_time_are_ages_or_dates(
    path: list[str], args: list[str], option: str, param: str
) -> None:
    for text in ("500ms", "2min", "7d", "2026-11-30", "2026-11-30T12:00Z"):
        assert parsed(path, [option, text, *args])[param] == text
    assert "neither an age" in refused([*path, option, "last tuesday", *args], option)


def _every_option() -> Iterator[tuple[str, click.Option]]:
    def walk(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
        for param in command.params:
            if isinstance(param, click.Option):
                yield path, param
        if isinstance(command, click.Group):
            for name in command.list_commands(click.Context(command)):
                sub = command.get_command(click.Context(command), name)
                if sub is not None:
                    yield from walk(sub, f"{path} {name}")

    for name in sorted(COMMAND_MODULES):
        yield from walk(load_command(name), name)


TIME_WORDS = ("timeout", "idle", "every", "older", "since", "until", "slow", "seconds", "gap")


def test_no_time_option_escapes_the_grammar() -> None:
    """A new option that takes a time uses the one type (the lists above are every one there
    is), and no option reads a bare float of seconds."""
    covered = {(" ".join(p), o) for p, _a, o, _n in [*DURATIONS, *AGES, *MOMENTS]}
    for path, option in _every_option():
        name = option.opts[-1]
        if option.is_flag or (path.split()[0], name) in READ_ON_USE | NOT_TIMES:
            continue
        if isinstance(option.type, Duration | Age | Moment):
            assert (path, name) in covered, f"{path} {name}: add it to this test's lists"
            continue
        assert not any(word in name for word in TIME_WORDS), f"{path} {name} takes a time"
        if name != "--speed":  # a factor, not a time
            assert not isinstance(option.type, click.types.FloatParamType), f"{path} {name}"


# -- names are globs ----------------------------------------------------------------------------

NAMES = ["time", "time-utc", "weather", "Time", "t[1]", "50%_off", "a.b", "back\\slash", "^caret"]
NAMES += ["]x", "dash-y", "café"]


def fill(store_url: str) -> str:
    """One session per name in `NAMES`, the first oldest."""
    store = open_store(store_url)
    for n, name in enumerate(NAMES):
        start = T0 + n * 10**12
        store.append(session_events(new_session_id(start), calls=1, start_ns=start, name=name))
    store.close()
    return store_url


@pytest.fixture
def named_store(store_url: str) -> str:
    return fill(store_url)


def listed(store_url: str, *args: str) -> list[str]:
    result = CliRunner().invoke(main, ["sessions", "--store", store_url, "--format", "json", *args])
    assert result.exit_code == 0, result.output
    return [row["name"] for row in json.loads(result.output)]


def test_sessions_name_is_a_glob_applied_before_the_limit(named_store: str) -> None:
    assert listed(named_store, "--name", "time") == ["time"]
    assert sorted(listed(named_store, "--name", "time*")) == ["time", "time-utc"]
    assert listed(named_store, "--name", "t*e") == ["time"]  # case matters: not "Time"
    assert sorted(listed(named_store, "--name", "[!t]*")) == sorted(
        n for n in NAMES if not n.startswith("t")
    )
    # The only match is the oldest session: the limit counts matching sessions.
    assert listed(named_store, "--name", "tim?", "--limit", "1") == ["time"]


GLOBS = ["*", "t*", "*e", "?ime", "t[1]", "t[[]1]", "[!t]*", "[^t]*", "*[%_]*", "50%_off", "a?b"]
GLOBS += ["a.b", "a.*", "back\\slash", "*\\*", "^*", "[]]x", "[]x", "*-*", "[a-d]*", "caf?", "t[1"]


def test_the_sql_glob_matches_as_fnmatch_does_on_both_stores(named_store: str) -> None:
    store = open_store(named_store)
    try:
        for glob in GLOBS:
            filt = listing.SessionFilter(name=glob, limit=None)
            got = sorted(s.info.name or "" for s in listing.list_summaries(store, filt))
            assert got == sorted(n for n in NAMES if fnmatch.fnmatchcase(n, glob)), glob
    finally:
        store.close()


def test_export_server_is_a_glob(named_store: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "bundle"
    args = ["export", "--store", named_store, "--out", str(out), "--server", "time*"]
    result = CliRunner().invoke(main, [*args, "--format", "jsonl", "--no-redact"])
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    store = open_store(named_store)
    named = {i.session_id for i in store.list_sessions() if i.name in ("time", "time-utc")}
    store.close()
    assert set(manifest["sessions"]) == named and len(named) == 2


def test_report_server_is_a_glob(sqlite_url: str) -> None:
    argv = ["report", "latency", "--by", "server", "--server", "time*", "--format", "json"]
    result = CliRunner().invoke(main, [*argv, "--store", fill(sqlite_url)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)["sections"]["latency"]
    assert sorted(row["server"] for row in rows) == ["time", "time-utc"]


# -- tail: filters first, then -n ---------------------------------------------------------------


def _call_events(sid: str, tools: list[str]) -> list[NewEvent]:
    """A session calling `tools` in order, each answered at once."""
    docs = [(Kind.SESSION_STARTED, Direction.NONE, frame({"name": "s", "transport": "stdio"}))]
    for rpc_id, tool in enumerate(tools, start=1):
        call = {"name": tool, "arguments": {}}
        request = {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": call}
        docs.append((Kind.FRAME, Direction.CLIENT_TO_SERVER, frame(request)))
        answer = {"jsonrpc": "2.0", "id": rpc_id, "result": {"content": []}}
        docs.append((Kind.FRAME, Direction.SERVER_TO_CLIENT, frame(answer)))
    return [
        NewEvent(sid, seq, T0 + seq * 1000, seq * 1000, kind, direction, raw)
        for seq, (kind, direction, raw) in enumerate(docs, start=1)
    ]


def test_tail_counts_lines_after_its_filters(sqlite_url: str) -> None:
    sid = new_session_id(T0)
    store = open_store(sqlite_url)
    store.append(_call_events(sid, ["get_time", "get_zone", "get_time", *["echo"] * 40]))
    store.close()

    def tail(*args: str) -> list[str]:
        result = CliRunner().invoke(main, ["tail", sid, "--store", sqlite_url, *args])
        assert result.exit_code == 0, result.output
        return result.output.splitlines()

    lines = tail("-n", "2", "--tool", "get_*")
    assert len(lines) == 2, lines
    assert "get_zone" in lines[0] and "get_time" in lines[1]  # the last two that match
    jsonl = [
        json.loads(line) for line in tail("-n", "1", "--tool", "get_t?me", "--format", "jsonl")
    ]
    assert [(doc["tool"], doc["msg_type"]) for doc in jsonl] == [("get_time", "response")]
    assert len(tail("-n", "5")) == 5  # a call and its answer are one line
    assert tail("-n", "3", "--tool", "nothing") == []


def test_policy_history_server_is_a_glob(sqlite_url: str) -> None:
    store = open_store(sqlite_url)
    for n, name in enumerate(["github", "github-enterprise", "gitlab", "Github"]):
        start = T0 + n * 10**12
        sid = new_session_id(start)
        loaded = events.PolicyLoaded(sha256=f"{n:064x}", default="allow", trigger="start")
        docs = [
            (Kind.SESSION_STARTED, frame({"name": name, "transport": "stdio"})),
            (events.PolicyLoaded.KIND, events.encode(loaded)),
        ]
        store.append(
            [
                NewEvent(sid, seq, start + seq, seq, kind, Direction.NONE, raw)
                for seq, (kind, raw) in enumerate(docs, start=1)
            ]
        )
    store.close()

    def servers(glob: str) -> list[str]:
        argv = ["policy", "history", "--server", glob, "--format", "json"]
        result = CliRunner().invoke(main, [*argv, "--store", sqlite_url])
        assert result.exit_code == 0, result.output
        return sorted(row["server"] for row in json.loads(result.output))

    assert servers("github") == ["github"]  # a name without magic is still exact
    assert servers("github*") == ["github", "github-enterprise"]  # case matters: not "Github"
    assert servers("git[!h]*") == ["gitlab"]
    assert servers("?ithub") == ["Github", "github"]

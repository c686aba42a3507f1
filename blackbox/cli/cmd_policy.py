"""Commands of the permissions area: policy files (`policy check`, `policy test`), the Claude Code
hook (`hook claude-code`) and the generic way for any host to record its decisions
(`decision record`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from blackbox import config
from blackbox.cli.options import (
    NAME_GLOB_HELP,
    format_option,
    open_configured_store,
    store_option,
)
from blackbox.cli.output import render
from blackbox.recorder import BlackboxError
from blackbox.recorder.gate import (
    DECIDED_BY,
    DECISIONS,
    FINALS,
    MODES,
    SOURCES,
    HookError,
    Policy,
    PolicyError,
    evaluate_session,
    record_decision,
    run_hook,
)

POLICY_FILE = click.Path(dir_okay=False, path_type=Path)


@click.group("policy")
def policy_group() -> None:
    """Policy files: the allow/deny rules the taps and the enforce-mode hook apply.

    \b
    Examples:
      blackbox policy check policy.toml
      blackbox policy test policy.toml last
      blackbox record --policy policy.toml -- python -m my_server
    """


@policy_group.command("check")
@click.argument("file", type=POLICY_FILE)
def policy_check(file: Path) -> None:
    """Validate a policy file; problems are reported as FILE:LINE:COL.

    \b
    Example:
      blackbox policy check policy.toml
    """
    policy = Policy.load(file)
    click.echo(f"{file}: ok: {len(policy.rules)} rule(s), default {policy.default}")


@policy_group.command("test")
@click.argument("file", type=POLICY_FILE)
@click.argument("session")
@click.option(
    "--server", default=None, help="Server name to match rules on (default: the session's name)."
)
@store_option
@format_option()
def policy_test(
    file: Path, session: str, server: str | None, store_url: str | None, fmt: str
) -> None:
    """Show what a policy would decide for every tools/call of a recorded session, beside
    what was recorded at the time.

    \b
    Example:
      blackbox policy test policy.toml last --format json
    """
    policy = Policy.load(file)
    store = open_configured_store(store_url)
    try:
        rows = evaluate_session(policy, store, store.resolve(session), server)
    finally:
        store.close()
    click.echo(
        render(rows, fmt, ["seq", "id", "server", "tool", "decision", "rule", "recorded", "reason"])
    )


@policy_group.command("history")
@click.option(
    "--server",
    default=None,
    metavar="GLOB",
    help=f"Only the versions recorded for servers whose name matches ({NAME_GLOB_HELP}).",
)
@store_option
@format_option()
def policy_history_command(server: str | None, store_url: str | None, fmt: str) -> None:
    """List the policy versions the taps put in force, oldest first: each version's sha256,
    when it was first and last recorded, in how many sessions, who loaded it, and the loads
    that failed (the policy kept in force, and why).

    \b
    Example:
      blackbox policy history --server github
      blackbox policy history --server 'github*'
    """
    from blackbox.recorder.gate import policy_history

    store = open_configured_store(store_url)
    try:
        rows = policy_history(store, server)
    finally:
        store.close()
    for row in rows:
        row["first"] = _iso(row.pop("first_ns"))
        row["last"] = _iso(row.pop("last_ns"))
        row["status"] = "loaded" if row.pop("ok") else "failed, kept " + str(row["kept"])[:12]
        if fmt == "table":
            row["version"] = str(row["version"])[:12]
    columns = ["server", "version", "status", "first", "last", "sessions", "rules", "loaded_by"]
    click.echo(render(rows, fmt, [*columns, "error"] if any(r["error"] for r in rows) else columns))


def _iso(ns: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="seconds")


@click.group("hook")
def hook_group() -> None:
    """Host hooks that record (and can make) permission decisions."""


@hook_group.command("claude-code")
@click.option(
    "--mode",
    type=click.Choice(MODES),
    default="observe",
    show_default=True,
    help="observe: record only, never change the host's decision; "
    "enforce: answer PreToolUse from --policy.",
)
@click.option(
    "--policy", "policy_file", type=POLICY_FILE, default=None, help="Policy file (enforce mode)."
)
@store_option
def hook_claude_code(mode: str, policy_file: Path | None, store_url: str | None) -> None:
    """A Claude Code hook command: reads one hook event (JSON) on stdin and records the host's
    decision about the MCP tool call as a `decision` event in session `claude-code:<id>`.

    Observe mode prints nothing and always exits 0, even when the store is down (records wait
    in a local spool). Enforce mode answers PreToolUse with allow/deny/ask from the policy and
    exits 2 (Claude Code blocks the call) when it cannot decide.

    \b
    Example (.claude/settings.json):
      {"hooks": {"PreToolUse": [{"matcher": "mcp__.*",
        "hooks": [{"type": "command", "command": "blackbox hook claude-code"}]}]}}
    """
    data = b"" if sys.stdin.isatty() else sys.stdin.buffer.read()
    try:
        policy = Policy.load(policy_file) if mode == "enforce" and policy_file else None
        result = run_hook(
            data,
            mode=mode,
            policy=policy,
            open_store=lambda: open_configured_store(store_url, create=True),
            spool_dir=config.journal_dir(),
        )
    except (BlackboxError, Exception) as exc:  # the host must get a clean answer either way
        if mode == "observe":
            click.echo(f"blackbox hook: not recorded: {exc}", err=True)
            sys.exit(0)
        if isinstance(exc, PolicyError | HookError | BlackboxError):
            raise
        raise HookError(f"enforce mode could not decide ({type(exc).__name__}: {exc})") from exc
    for note in result.notes:
        click.echo(note, err=True)
    if result.stdout:
        sys.stdout.buffer.write(result.stdout + b"\n")
        sys.stdout.flush()
    sys.exit(result.exit_code)


@click.group("decision")
def decision_group() -> None:
    """Record permission decisions made by any host."""


@decision_group.command("record")
@click.option("--tool", required=True, help="Tool name: plain, or the host's mcp__SERVER__TOOL.")
@click.option("--decision", required=True, type=click.Choice(DECISIONS))
@click.option("--source", default="host", show_default=True, type=click.Choice(SOURCES))
@click.option("--decided-by", default="user", show_default=True, type=click.Choice(DECIDED_BY))
@click.option(
    "--final",
    type=click.Choice(FINALS),
    default=None,
    help="Final outcome (default: the decision, for allow/deny).",
)
@click.option(
    "--server", default=None, help="Server name (default: from an mcp__SERVER__TOOL name)."
)
@click.option(
    "--args",
    "args_json",
    default=None,
    metavar="JSON",
    help="The call's arguments, for the fingerprint.",
)
@click.option(
    "--fingerprint", default=None, help="A precomputed arguments fingerprint (sha256 hex)."
)
@click.option("--rule", default=None, help="The rule that decided, if any.")
@click.option("--rpc-id", default=None, help="The JSON-RPC id of the call, if known.")
@click.option(
    "--host",
    default="host",
    show_default=True,
    help="Host name (the session is HOST:HOST_SESSION).",
)
@click.option("--host-session", default=None, help="The host's own session id.")
@click.option("--reason", default=None)
@store_option
def decision_record(
    tool: str,
    decision: str,
    source: str,
    decided_by: str,
    final: str | None,
    server: str | None,
    args_json: str | None,
    fingerprint: str | None,
    rule: str | None,
    rpc_id: str | None,
    host: str,
    host_session: str | None,
    reason: str | None,
    store_url: str | None,
) -> None:
    """Record one decision a host made about a tool call; prints the session it went to.

    \b
    Example:
      blackbox decision record --tool mcp__fs__write_file --decision deny \\
        --decided-by user --args '{"path": "/etc/hosts"}' --host cursor --host-session abc
    """
    args = None
    if args_json is not None:
        try:
            args = json.loads(args_json)
        except ValueError as exc:
            raise BlackboxError(f"--args is not JSON: {exc}") from None
    store = open_configured_store(store_url, create=True)
    try:
        sid = record_decision(
            store,
            tool=tool,
            decision=decision,
            source=source,
            decided_by=decided_by,
            final=final,
            rule=rule,
            server=server,
            args=args,
            fingerprint=fingerprint,
            rpc_id=rpc_id,
            host=host,
            host_session=host_session,
            reason=reason,
        )
    finally:
        store.close()
    click.echo(sid)


COMMANDS = [policy_group, hook_group, decision_group]

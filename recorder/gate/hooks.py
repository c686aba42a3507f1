"""Claude Code hook events as host decisions: what the host decided about each MCP tool call,
and who decided it, recorded as `decision` records (source `host`) in one session per Claude
Code session (`claude-code:<session_id>`, transport `hook`).

Claude Code runs a hook command per event with one JSON document on stdin. No single event says
"the final decision was X, made by Y", so the hook records what each event tells and the rest
is inferred (docs/permissions.md has the table):

- `PreToolUse`: the call is proposed. Observe mode records it (no decision yet); enforce mode
  answers it from the policy file with allow/deny/ask and records that answer (decided_by
  `hook`). A hook's deny is final; its allow or ask still passes through Claude Code's rules.
- `PermissionRequest`: the permission dialog is shown, so the user is asked (decision `ask`).
- `PostToolUse` / `PostToolUseFailure`: the tool ran, so the call was allowed; by the user when
  they were asked, else by our hook when it allowed it, else by the settings (an allow rule or
  the permission mode).
- `PermissionDenied`: the auto-mode classifier denied the call.
- `Stop` / `SessionEnd`: Claude finished its turn. A proposed call that never ran and has no
  final decision was denied: by the user when they were asked, else by the settings (a deny
  rule). This is an inference (an interrupted turn looks the same) and is marked so.

The hook must never stall or break its host: observe mode answers nothing on stdout, always
exits 0, and keeps records in a local spool when the store is unreachable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.recorder import BlackboxError
from blackbox.recorder.gate.decisions import (
    append_host_records,
    args_fingerprint,
    drain_spool,
    open_host_session,
    session_started_doc,
    split_host_tool,
    spool_records,
)
from blackbox.recorder.gate.policy import Policy
from blackbox.recorder.log import Kind, encode_json, events
from blackbox.recorder.store import EventStore

HOST = "claude-code"
TOOL_EVENTS = (
    "PreToolUse",
    "PermissionRequest",
    "PostToolUse",
    "PostToolUseFailure",
    "PermissionDenied",
)
TURN_END_EVENTS = ("Stop", "SessionEnd")
MODES = ("observe", "enforce")


class HookError(BlackboxError):
    """A hook payload that cannot be understood."""


@dataclass(frozen=True)
class HookEvent:
    """One Claude Code hook event, as read from stdin."""

    event: str
    session_id: str
    cwd: str | None
    transcript_path: str | None
    permission_mode: str | None
    tool_name: str | None
    tool_input: object
    tool_use_id: str | None
    payload: dict

    @property
    def server(self) -> str | None:
        return split_host_tool(self.tool_name)[0] if self.tool_name else None

    @property
    def tool(self) -> str | None:
        return split_host_tool(self.tool_name)[1] if self.tool_name else None


@dataclass
class HookResult:
    """What the hook command prints and how it exits. `notes` go to stderr."""

    stdout: bytes = b""
    exit_code: int = 0
    session_id: str | None = None
    records: list[bytes] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parse_event(data: bytes) -> HookEvent:
    """Parse the JSON a hook gets on stdin; raises `HookError`."""
    try:
        payload = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HookError(f"hook input is not JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise HookError("hook input is not a JSON object")
    event = payload.get("hook_event_name")
    session_id = payload.get("session_id")
    if not isinstance(event, str) or not event:
        raise HookError("hook input has no hook_event_name")
    if not isinstance(session_id, str) or not session_id:
        raise HookError("hook input has no session_id")
    tool_name = payload.get("tool_name")
    tool_use_id = payload.get("tool_use_id")

    def text(key: str) -> str | None:
        value = payload.get(key)
        return value if isinstance(value, str) else None

    return HookEvent(
        event=event,
        session_id=session_id,
        cwd=text("cwd"),
        transcript_path=text("transcript_path"),
        permission_mode=text("permission_mode"),
        tool_name=tool_name if isinstance(tool_name, str) else None,
        tool_input=payload.get("tool_input"),
        tool_use_id=tool_use_id if isinstance(tool_use_id, str) else None,
        payload=payload,
    )


def session_name(event: HookEvent) -> str:
    return f"{HOST}:{event.session_id}"


def pre_tool_use_output(decision: str, reason: str | None) -> bytes:
    """The stdout JSON that answers a PreToolUse with allow, deny or ask."""
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason or f"blackbox policy: {decision}",
        }
    }
    return encode_json(out)


# -- inference over what the session already holds -------------------------------------------------


@dataclass
class _Use:
    """What the host session says about one tool use so far."""

    proposed: dict | None = None
    asked: bool = False
    hook_decision: str | None = None
    final: str | None = None


def _history(store: EventStore, name: str) -> dict[str, _Use]:
    sid = open_host_session(store, name)
    uses: dict[str, _Use] = {}
    if sid is None:
        return uses
    for ev in store.read_session(sid):
        if ev.kind != Kind.DECISION:
            continue
        doc = events.decode_dict(Kind.DECISION, ev.raw)
        if doc is None:
            continue
        key = doc.get("tool_use_id")
        if not key:
            continue
        use = uses.setdefault(key, _Use())
        event = doc.get("hook_event")
        if event == "PreToolUse":
            use.proposed = doc
            if doc.get("decided_by") == "hook":
                use.hook_decision = doc.get("decision")
        if doc.get("decision") == "ask":
            use.asked = True
        if doc.get("final"):
            use.final = doc["final"]
    return uses


def _use_key(event: HookEvent, uses: dict[str, _Use]) -> str | None:
    """The tool use an event is about: its tool_use_id, else (a PermissionRequest may lack one)
    the latest undecided proposal of the same tool and arguments."""
    if event.tool_use_id:
        return event.tool_use_id
    fp = args_fingerprint(event.tool_input)
    for key in reversed(list(uses)):
        use = uses[key]
        if (
            use.final is None
            and use.proposed is not None
            and use.proposed.get("args_fingerprint") == fp
            and use.proposed.get("host_tool") == event.tool_name
        ):
            return key
    return None


def _doc(
    event: HookEvent,
    *,
    decision: str | None,
    final: str | None,
    decided_by: str | None,
    reason: str | None,
    tool_use_id: str | None,
    rule: str | None = None,
    source: str = "host",
    extra: dict | None = None,
) -> bytes:
    return events.encode(
        events.Decision(
            decision=decision,  # None: a proposal, not a decision yet
            final=final,
            source=source,
            decided_by=decided_by,
            rule=rule,
            server=event.server,
            tool=event.tool,
            args_fingerprint=args_fingerprint(event.tool_input),
            host_session=event.session_id,
            reason=reason,
            extra={
                "host": HOST,
                "hook_event": event.event,
                "tool_use_id": tool_use_id,
                "host_tool": event.tool_name,
                "permission_mode": event.permission_mode,
                **(extra or {}),
            },
        )
    )


def _settled_by(use: _Use, event: HookEvent) -> tuple[str, str]:
    """Who allowed a call that ran, and why we think so."""
    if use.asked:
        return "user", "the user was asked and the tool ran"
    if use.hook_decision == "allow":
        return "hook", "a PreToolUse hook allowed it and the tool ran"
    mode = event.permission_mode
    if mode in ("bypassPermissions", "acceptEdits", "dontAsk"):
        return "settings", f"permission mode {mode}; the tool ran without asking"
    if mode == "auto":
        return "classifier", "auto mode; the tool ran without asking"
    return "settings", "an allow rule let it run without asking"


def decide(
    event: HookEvent, uses: dict[str, _Use], mode: str, policy: Policy | None
) -> tuple[list[bytes], bytes]:
    """The decision documents one hook event adds, and what to print on stdout."""
    name = event.event
    if name in TURN_END_EVENTS:
        docs = []
        for use_id, use in uses.items():
            if use.final is not None or use.proposed is None:
                continue
            who = "user" if use.asked else "settings"
            why = (
                "inferred: the user was asked and the tool never ran"
                if use.asked
                else "inferred: proposed, never asked, never ran (a deny rule or another hook)"
            )
            proposed = use.proposed
            docs.append(
                events.encode(
                    events.Decision(
                        decision="deny",
                        final="deny",
                        source="host",
                        decided_by=who,
                        server=proposed.get("server"),
                        tool=proposed.get("tool"),
                        args_fingerprint=proposed.get("args_fingerprint"),
                        host_session=event.session_id,
                        reason=why,
                        extra={
                            "host": HOST,
                            "hook_event": name,
                            "tool_use_id": use_id,
                            "host_tool": proposed.get("host_tool"),
                            "permission_mode": event.permission_mode,
                            "inferred": True,
                        },
                    )
                )
            )
        return docs, b""
    if name not in TOOL_EVENTS or event.tool_name is None:
        return [], b""
    key = _use_key(event, uses)
    use = uses.get(key or "", _Use())
    if name == "PreToolUse":
        if mode == "enforce" and policy is not None:
            outcome = policy.evaluate(event.server, "tools/call", event.tool, event.tool_input)
            reason = f"blackbox policy rule {outcome.rule}: {outcome.reason}"
            doc = _doc(
                event,
                decision=outcome.decision,
                final="deny" if outcome.decision == "deny" else None,
                decided_by="hook",
                rule=outcome.rule,
                reason=reason,
                tool_use_id=key,
                extra={"policy_sha256": policy.sha256},
            )
            return [doc], pre_tool_use_output(outcome.decision, reason)
        doc = _doc(
            event,
            decision=None,
            final=None,
            decided_by=None,
            reason="proposed",
            tool_use_id=key,
        )
        return [doc], b""
    if name == "PermissionRequest":
        return [
            _doc(
                event,
                decision="ask",
                final=None,
                decided_by="hook" if use.hook_decision == "ask" else "settings",
                reason="the permission dialog was shown to the user",
                tool_use_id=key,
            )
        ], b""
    if name in ("PostToolUse", "PostToolUseFailure"):
        who, why = _settled_by(use, event)
        extra = {"tool_outcome": "ok" if name == "PostToolUse" else "failed"}
        return [
            _doc(
                event,
                decision="allow",
                final="allow",
                decided_by=who,
                reason=why,
                tool_use_id=key,
                extra=extra,
            )
        ], b""
    # PermissionDenied: the auto-mode classifier said no.
    said = event.payload.get("reason")
    return [
        _doc(
            event,
            decision="deny",
            final="deny",
            decided_by="classifier",
            reason=said if isinstance(said, str) else "denied by the auto-mode classifier",
            tool_use_id=key,
        )
    ], b""


def run_hook(
    data: bytes,
    *,
    mode: str,
    policy: Policy | None,
    open_store: Callable[[], EventStore],
    spool_dir: Path,
) -> HookResult:
    """Handle one hook invocation: parse, decide, record; never raises in observe mode.

    Enforce mode without a policy, or with input it cannot parse, raises `HookError` (the CLI
    then exits 2, which Claude Code takes as "block this call": failing closed)."""
    if mode not in MODES:
        raise HookError(f"mode must be observe or enforce, not {mode!r}")
    if mode == "enforce" and policy is None:
        raise HookError("enforce mode needs --policy FILE")
    result = HookResult()
    try:
        event = parse_event(data)
    except HookError as exc:
        if mode == "enforce":
            raise
        result.notes.append(f"blackbox hook: ignored: {exc}")
        return result
    name = session_name(event)
    started = session_started_doc(
        name,
        HOST,
        cwd=event.cwd,
        host_session=event.session_id,
        extra={"transcript_path": event.transcript_path},
    )
    store: EventStore | None = None
    uses: dict[str, _Use] = {}
    try:
        store = open_store()
        drain_spool(store, spool_dir)
        uses = _history(store, name)
    except BlackboxError as exc:
        result.notes.append(f"blackbox hook: store unavailable ({exc}); spooling to {spool_dir}")
        store = None
    try:
        docs, result.stdout = decide(event, uses, mode, policy)
        result.records = docs
        records = [(str(Kind.DECISION), doc) for doc in docs]
        if event.event == "SessionEnd" and (records or uses):
            why = event.payload.get("reason")
            ended = events.SessionEnded(
                reason=why if isinstance(why, str) else "client_closed", outcome="ok"
            )
            records.append((str(Kind.SESSION_ENDED), events.encode(ended)))
        if not records:
            return result
        now = time.time_ns()
        if store is not None:
            try:
                result.session_id = append_host_records(store, name, started, records, now)
                return result
            except BlackboxError as exc:
                result.notes.append(f"blackbox hook: store refused the records ({exc}); spooled")
        try:
            spool_records(spool_dir, name, started, records, now)
        except OSError as exc:
            result.notes.append(f"blackbox hook: could not spool, decision dropped: {exc}")
        return result
    finally:
        if store is not None:
            store.close()

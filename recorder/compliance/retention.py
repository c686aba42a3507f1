"""Retention with legal hold: remove old sessions from the store, never without a verified archive.

`apply_retention` is the only caller of the store's one sanctioned removal path
(`EventStore.remove_sessions`; the append-only triggers stay on for everything else). It runs in
this order, so that no step loses data if the next one fails:

1. Idle sessions that were never sealed (a crashed host: no record newer than the idle threshold)
   are sealed first, with a `session_ended` record `{"reason": "abandoned", "outcome":
   "abandoned"}` dated at the session's last activity (when it really ended; the time of sealing
   is in the document as `sealed_at_ns`). The store adds the seal record.
2. Sessions are judged by when they ended: older than the cutoff, sealed, not on legal hold, and
   with an intact chain (a broken chain is evidence: it is kept and reported, never archived away).
   Sessions named `retention` (the audit trail of earlier runs) are never removed.
3. The candidates are exported, unredacted, into the archive directory, and the bundle is verified
   with `verify_export` (offline, like an auditor would); a bundle that does not verify stops the
   run before anything is removed.
4. The candidates are removed in one transaction (a hold added meanwhile makes the store refuse
   the whole removal), which first appends a `retention_applied` record, in a session of its own
   named `retention`, saying what is removed (each session with its leaves in the log's tree),
   the archive's path and its manifest's sha256, signed with the log's key
   (`trust.removal_note`; without a key nothing is removed): the
   store's triggers let a session's records be deleted only once such a record names it
   (`blackbox.recorder.store.removals`). A run that only sealed abandoned sessions records the same
   way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.recorder import BlackboxError
from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import ExportProgress, Selection, export_bundle, iso
from blackbox.recorder.log import Direction, Kind, NewEvent, SessionInfo, events, new_session_id
from blackbox.recorder.store import EventStore
from blackbox.recorder.trust import keys, removal_note, signing

RETENTION_SESSION = "retention"
DEFAULT_IDLE_NS = 24 * 3600 * 1_000_000_000


class RetentionError(BlackboxError):
    """Retention refused to remove anything (the message says why and what was kept)."""


@dataclass(slots=True)
class RetentionPlan:
    """What a run removes and keeps. Lists hold session ids."""

    now_ns: int
    cutoff_ns: int
    idle_cutoff_ns: int
    remove: list[SessionInfo] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    kept_open: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RetentionResult:
    plan: RetentionPlan
    dry_run: bool
    archive: Path | None = None
    archive_manifest_sha256: str | None = None
    records_removed: int = 0
    event_session: str | None = None

    @property
    def removed(self) -> list[str]:
        return [] if self.dry_run else [i.session_id for i in self.plan.remove]

    def as_dict(self) -> dict[str, object]:
        plan = self.plan
        return {
            "dry_run": self.dry_run,
            "cutoff": iso(plan.cutoff_ns),
            "sessions_removed": 0 if self.dry_run else len(plan.remove),
            "would_remove" if self.dry_run else "removed": [i.session_id for i in plan.remove],
            "records_removed": self.records_removed,
            "held_kept": plan.held,
            "abandoned_sealed": plan.abandoned,
            "broken_kept": plan.broken,
            "archive": str(self.archive) if self.archive else None,
            "archive_manifest_sha256": self.archive_manifest_sha256,
            "event_session": self.event_session,
        }


def _last_activity(info: SessionInfo) -> int:
    # SessionInfo.ended_ns is the session_ended time, else the last record's time.
    return info.ended_ns if info.ended_ns is not None else (info.started_ns or 0)


def plan_retention(
    store: EventStore,
    older_than_ns: int,
    idle_ns: int = DEFAULT_IDLE_NS,
    now_ns: int | None = None,
) -> RetentionPlan:
    """Judge every session (nothing is changed). Idle unsealed sessions are judged as if sealed
    as abandoned at their last activity."""
    if older_than_ns <= 0:
        raise RetentionError("--older-than must be a positive age, such as 90d")
    if idle_ns <= 0:
        raise RetentionError("--idle must be a positive age, such as 24h")
    now = now_ns if now_ns is not None else time.time_ns()
    plan = RetentionPlan(now_ns=now, cutoff_ns=now - older_than_ns, idle_cutoff_ns=now - idle_ns)
    held = {sid for sid, _reason, _ns in store.list_holds()}
    for info in sorted(store.list_sessions(), key=lambda i: (i.started_ns or 0, i.session_id)):
        last = _last_activity(info)
        if not info.sealed:
            if last >= plan.idle_cutoff_ns:
                plan.kept_open.append(info.session_id)
                continue
            plan.abandoned.append(info.session_id)
        if info.name == RETENTION_SESSION or last >= plan.cutoff_ns:
            continue
        if info.session_id in held:
            plan.held.append(info.session_id)
            continue
        plan.remove.append(info)
    return plan


def seal_abandoned(store: EventStore, session_id: str, now_ns: int, idle_ns: int) -> bool:
    """Append the `abandoned` end of an idle session (the store seals it); False when the
    session turned out not to be idle any more (a record arrived since it was judged)."""
    last_seq, _head = store.head(session_id)
    last = next(iter(store.read_session(session_id, after_seq=last_seq - 1)), None)
    if last is None or last.wall_ns >= now_ns - idle_ns or last.kind == Kind.SESSION_SEALED:
        return False
    raw = events.encode(
        events.SessionEnded(
            reason="abandoned",
            outcome="abandoned",
            sealed_by="retention",
            sealed_at_ns=now_ns,
            last_activity_ns=last.wall_ns,
            idle_ns=idle_ns,
        )
    )
    store.append(
        [
            NewEvent(
                session_id,
                last_seq + 1,
                last.wall_ns,
                last.mono_ns,
                Kind.SESSION_ENDED,
                Direction.NONE,
                raw,
            )
        ]
    )
    return store.session(session_id).sealed


def apply_retention(
    store: EventStore,
    older_than_ns: int,
    archive_dir: Path | None,
    dry_run: bool = False,
    idle_ns: int = DEFAULT_IDLE_NS,
    now_ns: int | None = None,
    archive_format: str = "parquet",
    progress: Callable[[str], None] | None = None,
    on_step: Callable[[str, int, int], None] | None = None,
) -> RetentionResult:
    """Seal abandoned sessions, archive the old unheld ones into a verified bundle in
    `archive_dir` (new or empty), remove them, and record a `retention_applied` event.
    With `dry_run`, only report what would happen. `progress` gets a line per phase; `on_step`
    (phase, done, total) as each session is checked, then archived."""
    say = progress or (lambda _msg: None)
    step = on_step or (lambda _phase, _done, _total: None)
    plan = plan_retention(store, older_than_ns, idle_ns, now_ns)
    result = RetentionResult(plan=plan, dry_run=dry_run)
    if dry_run:
        return result
    if plan.remove and archive_dir is None:
        raise RetentionError("retention needs an archive directory (--archive DIR)")
    signer = keys.configured_signer() if plan.remove else None
    if plan.remove and signer is None:
        raise RetentionError(
            "retention removes records only under the log's signing key, which signs what it "
            "removes: make one with `blackbox keys init` (or set BLACKBOX_KEY_FILE); nothing "
            "was removed"
        )
    sealed = [sid for sid in plan.abandoned if seal_abandoned(store, sid, plan.now_ns, idle_ns)]
    plan.kept_open.extend(sid for sid in plan.abandoned if sid not in sealed)
    plan.abandoned = sealed
    if sealed:
        say(f"sealed {len(sealed)} abandoned session(s)")
    candidates: list[SessionInfo] = []
    for done, info in enumerate(plan.remove):
        step("checking sessions", done, len(plan.remove))
        current = store.session(info.session_id)
        if not current.sealed:
            continue  # active again since it was judged: not ours to remove
        if store.verify(info.session_id):
            plan.broken.append(info.session_id)
        else:
            candidates.append(current)
    step("checking sessions", len(plan.remove), len(plan.remove))
    plan.remove = candidates
    if plan.broken:
        say(f"kept {len(plan.broken)} session(s) whose chain does not verify")
    if candidates:
        assert archive_dir is not None
        archive_dir = Path(archive_dir)
        say(f"archiving {len(candidates)} session(s) into {archive_dir}")

        def archived(p: ExportProgress) -> None:
            step("archiving sessions", p.sessions_done, p.sessions_total)
            say(f"archived {p.sessions_done}/{p.sessions_total} sessions, {p.records} records")

        exported = export_bundle(
            store,
            archive_dir,
            Selection(session_ids=tuple(i.session_id for i in candidates)),
            fmt=archive_format,
            sessions=candidates,
            # The archive proves its records are the log's, as any export does.
            checkpoint_note=signing.note_for_export(store),
            progress=archived,
        )
        report = verify_export(archive_dir)
        if not report.ok:
            first = report.findings[0].message()
            raise RetentionError(
                f"the archive in {archive_dir} does not verify ({first}); nothing was removed"
            )
        result.archive = archive_dir
        result.archive_manifest_sha256 = exported.manifest_sha256
        say(f"archive verified ({report.records_checked} records); removing")
        # The removal and its `retention_applied` record commit together: the store's triggers
        # let a session's records go only once such a record names it.
        result.event_session = new_session_id()
        assert signer is not None
        result.records_removed = store.remove_sessions(
            [i.session_id for i in candidates],
            _applied(result, older_than_ns, idle_ns, archive_format),
            record_session=result.event_session,
            authorise=lambda doc, store_id: removal_note.sign_removal(signer, doc, store_id),
        )
    elif plan.abandoned:
        result.event_session = _record_event(store, result, older_than_ns, idle_ns, archive_format)
    return result


def _applied(
    result: RetentionResult, older_than_ns: int, idle_ns: int, archive_format: str
) -> events.RetentionApplied:
    """The run's `retention_applied` document (the store fills in the removed ids and counts)."""
    plan = result.plan
    return events.RetentionApplied(
        older_than_ns=older_than_ns,
        cutoff_ns=plan.cutoff_ns,
        cutoff=iso(plan.cutoff_ns),
        idle_ns=idle_ns,
        removed=[i.session_id for i in plan.remove],
        sessions_removed=len(plan.remove),
        records_removed=result.records_removed,
        archive=str(result.archive) if result.archive else None,
        archive_format=archive_format if result.archive else None,
        archive_manifest_sha256=result.archive_manifest_sha256,
        held_kept=plan.held,
        abandoned_sealed=plan.abandoned,
        broken_kept=plan.broken,
    )


def _record_event(
    store: EventStore,
    result: RetentionResult,
    older_than_ns: int,
    idle_ns: int,
    archive_format: str,
) -> str:
    now = time.time_ns()
    sid = new_session_id(now)
    started = events.started_here(
        name=RETENTION_SESSION, transport=None, command=["blackbox", "retention", "apply"]
    )
    applied = _applied(result, older_than_ns, idle_ns, archive_format)
    ended = events.SessionEnded(reason="completed", outcome="ok", exit_code=0)
    docs = [
        started,
        applied,
        ended,
    ]
    store.append(
        [
            NewEvent(
                sid,
                seq,
                now + seq,
                seq,
                doc.KIND,
                Direction.NONE,
                events.encode(doc),
            )
            for seq, doc in enumerate(docs, start=1)
        ]
    )
    return sid


def add_hold(store: EventStore, ref: str, reason: str) -> str:
    """Put a session (id, unique prefix or `last`) on legal hold; returns its full id."""
    if not reason.strip():
        raise RetentionError("a hold needs a reason (--reason TEXT)")
    sid = store.resolve(ref)
    store.add_hold(sid, reason.strip())
    return sid


def remove_hold(store: EventStore, ref: str) -> str:
    """Release a session's legal hold; returns its full id."""
    sid = _resolve_held(store, ref)
    if not store.remove_hold(sid):
        raise RetentionError(f"session {sid} is not on hold")
    return sid


def _resolve_held(store: EventStore, ref: str) -> str:
    held = [sid for sid, _reason, _ns in store.list_holds()]
    if ref in held:
        return ref
    try:
        return store.resolve(ref)
    except BlackboxError:
        matches = [sid for sid in held if sid.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        raise


def list_holds(store: EventStore) -> list[dict]:
    """The legal holds as rows, oldest first."""
    return [
        {"session_id": sid, "reason": reason, "since": iso(created)}
        for sid, reason, created in store.list_holds()
    ]

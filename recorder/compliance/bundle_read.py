"""Read the sessions of an export bundle back as records, for tools that work from a bundle
committed to a repository instead of a store (the pytest plugin replays them in CI without a
database).

Only reading: `blackbox.recorder.compliance.bundle_check` is what checks a bundle. The records come
back as the store would give them (`StoredEvent`, seq order per session), so the replay side builds
its recording from them exactly as from a store.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path

from blackbox.recorder.compliance.bundle_check import load_manifest
from blackbox.recorder.compliance.export import FILES, ExportError, read_rows
from blackbox.recorder.log import StoredEvent


@dataclass
class BundleSession:
    session_id: str
    name: str | None
    replay_of: str | None
    records: list[StoredEvent] = field(default_factory=list)


def _event(row: dict) -> StoredEvent:
    raw_size = row.get("raw_size")
    return StoredEvent(
        position=int(row.get("position") or 0),
        session_id=str(row["session_id"]),
        seq=int(row["seq"]),
        wall_ns=int(row["wall_ns"]),
        mono_ns=int(row["mono_ns"]),
        kind=str(row["kind"]),
        direction=str(row["direction"]),
        raw=bytes(row["raw"]),
        raw_size=raw_size if isinstance(raw_size, int) else None,
        msg_type=row.get("msg_type"),
        method=row.get("method"),
        rpc_id=row.get("rpc_id"),
        rpc_id_type=row.get("rpc_id_type"),
        tool=row.get("tool"),
        is_error=row.get("is_error"),
        error_code=row.get("error_code"),
        era=row.get("era"),
        degraded=row.get("degraded"),
        hash=bytes.fromhex(str(row.get("hash") or "")),
    )


def read_bundle_sessions(path: Path) -> dict[str, BundleSession]:
    """Every session of the bundle in `path` with its records, in the bundle's order.

    Raises ExportError (one line) for a directory that is not a readable bundle."""
    path = Path(path)
    manifest, problem = load_manifest(path)
    if manifest is None:
        raise ExportError(f"{path} is not an export bundle: {problem.message() if problem else ''}")
    fmt = str(manifest["data_format"])
    by_role = {
        str(meta.get("role", name.split(".")[0])): name for name, meta in manifest["files"].items()
    }
    out: dict[str, BundleSession] = {}
    try:
        for row in read_rows(path / by_role["sessions"], FILES["sessions"], fmt):
            sid = str(row["session_id"])
            out[sid] = BundleSession(sid, row.get("name"), row.get("replay_of"))
        for row in read_rows(path / by_role["records"], FILES["records"], fmt):
            ev = _event(row)
            session = out.setdefault(ev.session_id, BundleSession(ev.session_id, None, None))
            session.records.append(ev)
    except (KeyError, ValueError, TypeError, OSError) as exc:
        raise ExportError(f"cannot read the bundle in {path}: {exc}") from None
    for session in out.values():
        session.records.sort(key=lambda e: e.seq)
    return out


def select_bundle_sessions(
    sessions: dict[str, BundleSession], refs: list[str] | None = None, name_glob: str | None = None
) -> list[BundleSession]:
    """Sessions named by id, unique id prefix or handle (the tail `blackbox sessions` prints), or
    by a name glob; all recorded sessions (not replays) when neither is given."""
    chosen: list[BundleSession] = []
    for ref in refs or []:
        hits = [s for sid, s in sessions.items() if sid.startswith(ref)]
        if ref not in sessions and 6 <= len(ref) <= 12 and "-" not in ref:  # as the store does
            hits += [
                s for sid, s in sessions.items() if sid.endswith(ref) and not sid.startswith(ref)
            ]
        if len(hits) != 1:
            what = "no session" if not hits else f"{len(hits)} sessions"
            raise ExportError(f"{what} in the bundle match {ref!r}")
        chosen.append(hits[0])
    if name_glob is not None or not refs:
        chosen += [
            s
            for s in sessions.values()
            if not s.replay_of
            and s.records
            and (name_glob is None or fnmatch.fnmatchcase(s.name or "", name_glob))
        ]
    return list({s.session_id: s for s in chosen}.values())

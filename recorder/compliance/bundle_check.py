"""verify-export: check a compliance bundle offline, with no access to the store.

An auditor runs this on a bundle they were handed. It recomputes every file's sha256 against the
manifest, re-walks every session's hash chain from the exported records with the recorder's own
chain code (`blackbox.recorder.log.chain`: genesis, link, verify_session — one implementation, not
two), checks each session ends at the head and sealed count the manifest states, re-derives the
indexed fields of unredacted frames, and checks the sessions and decisions files agree with the
records.

With the log's key it also checks the bundle's checkpoint and every record's inclusion proof
(`bundle_proof`), and the manifest's signature: the bundle must hold exactly the sessions, records,
leaves and files its signed manifest lists (`bundle_sign`). Without the key those lists are only
the unsigned manifest's word, and the report says so (`completeness_checked`).

Each finding names what is wrong: `file_missing`, `file_hash_mismatch`, `manifest_missing`,
`manifest_invalid`, `unreadable`, `row_count_mismatch`, the chain's own `modified` / `missing` /
`inserted` / `reordered` / `truncated`, `head_mismatch`, `session_missing`, `unexpected_session`,
`field_modified`, `redaction_mismatch`, `sessions_mismatch`, `decisions_mismatch`,
`broken_in_store` for a session the export itself marked as failing the store's checks, and for
completeness `manifest_unsigned`, `manifest_signature_invalid`, `record_missing`,
`unexpected_record`, `leaves_mismatch`, `counts_mismatch` and `checkpoint_mismatch`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import TypeGuard

from blackbox.recorder.compliance import bundle_proof, bundle_sign
from blackbox.recorder.compliance.export import (
    BUNDLE_FORMAT,
    DECISION_COLUMNS,
    FILES,
    MANIFEST,
    decision_row,
    read_rows,
    sha256_file,
)
from blackbox.recorder.log import DERIVED, Kind, StoredEvent, chain, classify, events, stored_agrees
from blackbox.recorder.trust import Verifier

# Derived fields an unredacted frame must agree on with `classify` of its raw bytes.
_INT_FIELDS = ("position", "seq", "wall_ns", "mono_ns")
_STR_FIELDS = ("session_id", "kind", "direction", "hash")


@dataclass(frozen=True, slots=True)
class ExportFinding:
    """One thing wrong with a bundle."""

    problem: str
    detail: str
    file: str | None = None
    session_id: str | None = None
    seq: int | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "problem": self.problem,
            "file": self.file,
            "session_id": self.session_id,
            "seq": self.seq,
            "detail": self.detail,
        }

    def message(self) -> str:
        """One line: where (file, session, seq), what, and the detail."""
        where = [self.file] if self.file else []
        if self.session_id:
            where.append(f"session {self.session_id}")
        if self.seq is not None:
            where.append(f"seq {self.seq}")
        head = f"{', '.join(where)}: " if where else ""
        return f"{head}{self.problem}: {self.detail}"


@dataclass(slots=True)
class ExportReport:
    """What verify-export checked and found. `ok` only when there are no findings."""

    path: Path
    findings: list[ExportFinding] = field(default_factory=list)
    files_checked: int = 0
    sessions_checked: int = 0
    records_checked: int = 0
    records_rehashed: int = 0
    records_attested: int = 0
    # Redacted records whose leaf was recomputed from what they show (their commitment) and
    # proven: what they show is the log's, though their chain hash is attested.
    records_redacted_proven: int = 0
    origin_checked: bool = False  # the checkpoint's signature checked with the log's key
    # The manifest's signature checked with the log's key: the bundle holds exactly what it lists.
    completeness_checked: bool = False

    @property
    def ok(self) -> bool:
        return not self.findings

    def as_dict(self) -> dict[str, object]:
        return {
            "path": str(self.path),
            "ok": self.ok,
            "files_checked": self.files_checked,
            "sessions_checked": self.sessions_checked,
            "records_checked": self.records_checked,
            "records_rehashed": self.records_rehashed,
            "records_attested": self.records_attested,
            "records_redacted_proven": self.records_redacted_proven,
            "origin_checked": self.origin_checked,
            "completeness_checked": self.completeness_checked,
            "findings": [f.as_dict() for f in self.findings],
        }


def load_manifest(path: Path) -> tuple[dict | None, ExportFinding | None]:
    """The bundle's manifest, or the finding that says why it cannot be used."""
    mpath = Path(path) / MANIFEST
    if not mpath.is_file():
        return None, ExportFinding("manifest_missing", f"no {MANIFEST} in {path}", MANIFEST)
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        return None, ExportFinding("manifest_invalid", f"not valid JSON: {exc}", MANIFEST)
    if not isinstance(manifest, dict) or manifest.get("format") != BUNDLE_FORMAT:
        return None, ExportFinding("manifest_invalid", f"not an {BUNDLE_FORMAT} manifest", MANIFEST)
    for key in ("files", "sessions", "data_format"):
        if key not in manifest:
            return None, ExportFinding("manifest_invalid", f"the manifest has no {key!r}", MANIFEST)
    return manifest, None


def verify_export(
    path: Path,
    progress: Callable[[int], None] | None = None,
    verifier: Verifier | None = None,
    allow_unsigned_manifest: bool = False,
) -> ExportReport:
    """Check the bundle in `path`; `progress` is called with the records checked so far. With
    `verifier` (the log's public key) the bundle's checkpoint must be signed by it and cover
    every record, and its manifest must be signed by it (`manifest.sig`) and list exactly what
    the bundle holds; without, its proofs are checked against it, which proves integrity only.
    `allow_unsigned_manifest` accepts a bundle with no manifest.sig (exported without a key, or
    before manifests were signed) with a key: then completeness is not checked."""
    path = Path(path)
    report = ExportReport(path, origin_checked=verifier is not None)
    manifest, problem = load_manifest(path)
    if manifest is None:
        assert problem is not None
        report.findings.append(problem)
        return report
    fmt = str(manifest["data_format"])
    by_role: dict[str, tuple[str, dict]] = {}
    for name, meta in manifest["files"].items():
        by_role[str(meta.get("role", name.split(".")[0]))] = (name, meta)
        fpath = path / name
        if not fpath.is_file():
            report.findings.append(
                ExportFinding("file_missing", "listed in the manifest, not in the bundle", name)
            )
            continue
        report.files_checked += 1
        actual = sha256_file(fpath)
        if actual != meta.get("sha256"):
            report.findings.append(
                ExportFinding(
                    "file_hash_mismatch",
                    f"sha256 {actual[:16]}… differs from the manifest's "
                    f"{str(meta.get('sha256'))[:16]}…",
                    name,
                )
            )
    for role in FILES:
        if role not in by_role:
            report.findings.append(
                ExportFinding("manifest_invalid", f"the manifest lists no {role} file", MANIFEST)
            )
    _check_marked_broken(manifest, report)
    # The leaves the proofs name, for the completeness check (with the key only).
    tally = bundle_sign.LeafTally() if verifier is not None else None
    counts: dict[str, int] | None = None
    records_name: str | None = None
    if "records" in by_role and (path / by_role["records"][0]).is_file():
        records_name = by_role["records"][0]
        rebuilt, counts = _check_records(path, fmt, manifest, by_role["records"], report, progress)
        if "sessions" in by_role and (path / by_role["sessions"][0]).is_file():
            _check_sessions(path, fmt, manifest, by_role["sessions"], report)
        if "decisions" in by_role and (path / by_role["decisions"][0]).is_file():
            _check_decisions(path, fmt, by_role["decisions"], rebuilt, report)
        _check_tree(path, fmt, manifest, records_name, verifier, report, tally)
    elif verifier is not None:
        _check_tree(path, fmt, manifest, None, verifier, report, tally)
    _check_complete(
        path,
        manifest,
        by_role,
        records_name,
        counts,
        tally,
        verifier,
        report,
        allow_unsigned_manifest,
    )
    return report


def _check_complete(
    path: Path,
    manifest: dict,
    by_role: dict[str, tuple[str, dict]],
    records_name: str | None,
    counts: dict[str, int] | None,
    tally: bundle_sign.LeafTally | None,
    verifier: Verifier | None,
    report: ExportReport,
    allow_unsigned: bool,
) -> None:
    """The manifest's signature and, with the key, the bundle against the manifest's lists
    (recorder/compliance/bundle_sign.py). Without the key only a manifest.sig that names another
    manifest is a finding: the rest is what verify-export always checked."""
    found, signed = bundle_sign.check_signature(path, manifest, verifier, allow_unsigned)
    tree = manifest.get("tree")
    if verifier is not None:
        if isinstance(tree, dict):
            for role in ("checkpoint", "proofs"):
                if role not in by_role:
                    found.append(
                        (
                            "file_missing",
                            f"the manifest's tree names {tree.get(role)!r}, its files list no "
                            f"{role} file",
                            MANIFEST,
                            None,
                        )
                    )
        found += bundle_sign.check_completeness(manifest, records_name, counts, tally)
    for problem, detail, name, sid in found:
        report.findings.append(ExportFinding(problem, detail, name, sid))
    report.completeness_checked = signed and not found


def _check_tree(
    path: Path,
    fmt: str,
    manifest: dict,
    records_name: str | None,
    verifier: Verifier | None,
    report: ExportReport,
    tally: bundle_sign.LeafTally | None = None,
) -> None:
    """The signed checkpoint and every record's inclusion proof
    (recorder/compliance/bundle_proof.py); `tally` gathers the leaves the proofs name."""
    rows = read_rows(path / records_name, FILES["records"], fmt) if records_name else iter(())
    proven: list[tuple[object, object]] = []
    try:
        found = bundle_proof.check(path, manifest, rows, verifier, tally, proven)
    except Exception as exc:  # a tampered records file: already a finding of its own
        found = [("proof_invalid", f"cannot check the proofs: {exc}", None, None)]
    report.records_redacted_proven = len(proven)
    for problem, detail, sid, seq in found:
        name = bundle_proof.CHECKPOINT_FILE if problem.startswith(("checkpoint", "no_")) else None
        report.findings.append(
            ExportFinding(
                problem,
                detail,
                name or bundle_proof.PROOFS_FILE,
                None if sid is None else str(sid),
                seq if isinstance(seq, int) else None,
            )
        )


def _check_marked_broken(manifest: dict, report: ExportReport) -> None:
    """A session the export marked as failing the store's own checks (exported only on
    `--include-broken`) fails the bundle, whatever its records say: a truncated session or an
    edited projection can leave the exported records consistent with each other."""
    sessions = manifest["sessions"] if isinstance(manifest["sessions"], dict) else {}
    for sid, meta in sessions.items():
        if not isinstance(meta, dict):
            continue
        found = meta.get("store_findings") or []
        if not found and meta.get("chain_intact_at_export") is not False:
            continue
        first = found[0] if found and isinstance(found[0], dict) else {}
        what = (
            f"{first.get('problem')}: {first.get('detail')}"
            if first
            else "its chain did not verify"
        )
        report.findings.append(
            ExportFinding(
                "broken_in_store",
                f"exported with --include-broken: the store's checks failed at export time "
                f"({len(found) or 1} finding(s); first: {what})",
                MANIFEST,
                str(sid),
                first.get("seq") if isinstance(first.get("seq"), int) else None,
            )
        )


# -- records -----------------------------------------------------------------------------------


def _check_records(
    path: Path,
    fmt: str,
    manifest: dict,
    entry: tuple[str, dict],
    report: ExportReport,
    progress: Callable[[int], None] | None,
) -> tuple[dict[tuple[str, object], bytes], dict[str, int] | None]:
    """Walk the records file session by session; returns the decision rows it implies and how
    many records each session has in the file (None when the file could not be read through)."""
    name, meta = entry
    expected: dict[str, dict] = manifest["sessions"]
    # (session, seq) -> digest of the decision row each decision record implies: compact, so a
    # bundle with millions of decisions is still checked in bounded memory.
    decisions: dict[tuple[str, object], bytes] = {}
    counts: dict[str, int] = {}
    done: set[str] = set()
    current: str | None = None
    rows: list[dict] = []
    total = 0

    def finish() -> None:
        if current is not None:
            _check_session(name, current, rows, expected.get(current), report)
            done.add(current)
            counts[str(current)] = counts.get(str(current), 0) + len(rows)

    try:
        for row in read_rows(path / name, FILES["records"], fmt):
            total += 1
            if progress is not None and total % 10_000 == 0:
                progress(total)
            sid = row.get("session_id")
            if sid != current:
                finish()
                if sid in done:
                    report.findings.append(
                        ExportFinding(
                            "reordered",
                            "records of this session appear again after other sessions",
                            name,
                            str(sid),
                            row.get("seq") if isinstance(row.get("seq"), int) else None,
                        )
                    )
                current, rows = sid, []
            rows.append(row)
            if row.get("kind") == Kind.DECISION and isinstance(row.get("raw"), bytes):
                decisions[(str(sid), row.get("seq"))] = _row_digest(
                    decision_row(str(sid), row.get("seq"), row.get("wall_ns"), row["raw"])
                )
        finish()
    except Exception as exc:  # any parse failure of a tampered file is a finding, not a crash
        report.findings.append(
            ExportFinding("unreadable", f"cannot read past row {total}: {exc}", name)
        )
        return decisions, None
    report.records_checked = total
    if total != meta.get("rows"):
        report.findings.append(
            ExportFinding(
                "row_count_mismatch", f"{total} rows, the manifest says {meta.get('rows')}", name
            )
        )
    for sid in expected:
        if sid not in done:
            report.findings.append(
                ExportFinding(
                    "session_missing", "listed in the manifest, no records in the bundle", name, sid
                )
            )
    return decisions, counts


def _events(
    name: str, sid: str, rows: list[dict], report: ExportReport
) -> Iterator[tuple[StoredEvent, bool]]:
    for row in rows:
        bad = [f for f in _INT_FIELDS if not _is_int(row.get(f))]
        bad += [f for f in _STR_FIELDS if not isinstance(row.get(f), str)]
        if not isinstance(row.get("raw"), bytes):
            bad.append("raw")
        digest: bytes | None = None
        if "hash" not in bad:
            try:
                digest = bytes.fromhex(row["hash"])
            except ValueError:
                bad.append("hash")
        if bad:
            report.findings.append(
                ExportFinding(
                    "modified",
                    f"field(s) {', '.join(bad)} missing or of the wrong type",
                    name,
                    sid,
                    row.get("seq") if _is_int(row.get("seq")) else None,
                )
            )
            continue
        assert digest is not None
        raw_size = row.get("raw_size")
        event = StoredEvent(
            position=row["position"],
            session_id=row["session_id"],
            seq=row["seq"],
            wall_ns=row["wall_ns"],
            mono_ns=row["mono_ns"],
            kind=row["kind"],
            direction=row["direction"],
            raw=row["raw"],
            raw_size=raw_size if _is_int(raw_size) else None,
            msg_type=row.get("msg_type"),
            method=row.get("method"),
            rpc_id=row.get("rpc_id"),
            rpc_id_type=row.get("rpc_id_type"),
            tool=row.get("tool"),
            is_error=row.get("is_error"),
            error_code=row.get("error_code"),
            era=row.get("era"),
            degraded=row.get("degraded"),
            hash=digest,
        )
        yield event, row.get("redacted") is True


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_session(
    name: str, sid: str, rows: list[dict], expect: dict | None, report: ExportReport
) -> None:
    report.sessions_checked += 1
    pairs = list(_events(name, sid, rows, report))
    if expect is None:
        report.findings.append(
            ExportFinding(
                "unexpected_session", "records of a session the manifest does not list", name, sid
            )
        )
        return
    seqs = [ev.seq for ev, _ in pairs]
    for a, b in pairwise(seqs):
        if b <= a:
            report.findings.append(
                ExportFinding("reordered", f"seq {b} comes after seq {a} in the file", name, sid, b)
            )
            break
    pairs.sort(key=lambda p: p[0].seq)
    events = [ev for ev, _ in pairs]
    redacted = {ev.seq for ev, is_redacted in pairs if is_redacted}
    report.records_attested += len(redacted)
    report.records_rehashed += len(events) - len(redacted)
    if redacted:
        findings = _verify_with_attested(sid, events, redacted, expect.get("sealed_count"))
    else:
        findings = chain.verify_session(sid, events, expect.get("sealed_count"))
    for f in findings:
        report.findings.append(ExportFinding(f.problem, f.detail, name, sid, f.seq))
    head = events[-1].hash.hex() if events else None
    if head != expect.get("head") or len(events) != expect.get("records"):
        last = events[-1].seq if events else 0
        if len(events) < int(expect.get("records") or 0) and last < int(
            expect.get("last_seq") or 0
        ):
            report.findings.append(
                ExportFinding(
                    "truncated",
                    f"ends at seq {last}, the manifest says seq {expect.get('last_seq')} "
                    f"({len(events)} of {expect.get('records')} records)",
                    name,
                    sid,
                    last + 1,
                )
            )
        elif not findings:
            report.findings.append(
                ExportFinding(
                    "head_mismatch",
                    f"chain head {str(head)[:16]}… with {len(events)} records; the manifest says "
                    f"{str(expect.get('head'))[:16]}… with {expect.get('records')}",
                    name,
                    sid,
                )
            )
    if len(redacted) != expect.get("redacted_records", 0):
        report.findings.append(
            ExportFinding(
                "redaction_mismatch",
                f"{len(redacted)} records marked redacted, the manifest says "
                f"{expect.get('redacted_records', 0)}",
                name,
                sid,
            )
        )
    for ev, is_redacted in pairs:
        if not is_redacted:
            wrong = _derived_mismatch(ev)
            if wrong:
                report.findings.append(
                    ExportFinding(
                        "field_modified",
                        f"{', '.join(wrong)} do(es) not match the raw bytes",
                        name,
                        sid,
                        ev.seq,
                    )
                )


def _verify_with_attested(
    sid: str, events: list[StoredEvent], redacted: set[int], sealed_count: int | None
) -> list[chain.Finding]:
    """The chain walk for a session with redacted records.

    `chain.verify_session` would take a redacted record for a modified one and, for each, scan
    the rest of the session for where the chain resyncs (quadratic in a long session). Here a
    redacted record's hash is attested: it is not recomputed, but the next record must link
    from it. Unredacted records are re-hashed with `chain.link` exactly as the store did; gaps,
    duplicates and the seal are checked as `verify_session` does.
    """
    findings: list[chain.Finding] = []
    prev = chain.genesis(sid)
    expected = 1
    seal: StoredEvent | None = None
    for ev in events:
        if ev.seq < expected:
            findings.append(chain.Finding(sid, ev.seq, "inserted", f"a second seq {ev.seq}"))
            continue
        if ev.seq > expected:
            span = f"{expected}" if ev.seq == expected + 1 else f"{expected}-{ev.seq - 1}"
            problem = "truncated" if ev.kind == Kind.SESSION_SEALED else "missing"
            findings.append(chain.Finding(sid, expected, problem, f"seq {span} removed"))
        elif ev.seq not in redacted and chain.link(prev, ev) != ev.hash:
            after = "a redacted record" if ev.seq - 1 in redacted else "its predecessor"
            findings.append(chain.Finding(sid, ev.seq, "modified", f"does not link from {after}"))
        if seal is not None:
            findings.append(chain.Finding(sid, ev.seq, "inserted", "record after the seal"))
        if ev.kind == Kind.SESSION_SEALED and seal is None:
            seal = ev
        prev, expected = ev.hash, ev.seq + 1
    if seal is not None and not findings:
        count = chain.seal_count(seal.raw)
        if count is not None and count != seal.seq - 1:
            findings.append(
                chain.Finding(sid, seal.seq, "truncated", f"sealed with {count} records")
            )
    elif seal is None and sealed_count is not None:
        findings.append(
            chain.Finding(
                sid,
                events[-1].seq + 1 if events else 1,
                "truncated",
                f"sealed with {sealed_count} records; the seal and the tail are gone",
            )
        )
    return findings


def _derived_mismatch(ev: StoredEvent) -> list[str]:
    """The derived fields of an unredacted record that disagree with its raw bytes."""
    if ev.kind == Kind.FRAME:
        c = classify(ev.raw)
        want = {f: getattr(c, f) for f in DERIVED}
    else:
        want = {f: None for f in DERIVED}
        want["method"], want["tool"], want["era"], want["degraded"] = events.derived_fields(ev.raw)
    # A record of an older version may hold a view since fitted (`stored_agrees`): no tampering.
    return [f for f in DERIVED if not stored_agrees(f, getattr(ev, f), want[f])]


# -- sessions and decisions files --------------------------------------------------------------


def _check_sessions(
    path: Path, fmt: str, manifest: dict, entry: tuple[str, dict], report: ExportReport
) -> None:
    name, _meta = entry
    expected: dict[str, dict] = manifest["sessions"]
    seen: set[str] = set()
    try:
        for row in read_rows(path / name, FILES["sessions"], fmt):
            sid = str(row.get("session_id"))
            seen.add(sid)
            expect = expected.get(sid)
            if expect is None:
                report.findings.append(
                    ExportFinding(
                        "sessions_mismatch", "a session the manifest does not list", name, sid
                    )
                )
                continue
            wrong = [
                key
                for key, mkey in (
                    ("records", "records"),
                    ("last_seq", "last_seq"),
                    ("head", "head"),
                    ("sealed_count", "sealed_count"),
                )
                if row.get(key) != expect.get(mkey)
            ]
            if wrong:
                report.findings.append(
                    ExportFinding(
                        "sessions_mismatch",
                        f"{', '.join(wrong)} differ(s) from the manifest",
                        name,
                        sid,
                    )
                )
    except Exception as exc:  # a tampered file that does not parse is a finding
        report.findings.append(ExportFinding("unreadable", str(exc), name))
        return
    for sid in expected:
        if sid not in seen:
            report.findings.append(
                ExportFinding(
                    "sessions_mismatch", "session missing from the sessions file", name, sid
                )
            )


def _row_digest(row: dict) -> bytes:
    return hashlib.sha256(json.dumps(row, sort_keys=True, default=str).encode()).digest()


def _check_decisions(
    path: Path,
    fmt: str,
    entry: tuple[str, dict],
    rebuilt: dict[tuple[str, object], bytes],
    report: ExportReport,
) -> None:
    name, _meta = entry
    have: dict[tuple[str, object], bytes] = {}
    try:
        for r in read_rows(path / name, DECISION_COLUMNS, fmt):
            have[(str(r.get("session_id")), r.get("seq"))] = _row_digest(r)
    except Exception as exc:  # a tampered file that does not parse is a finding
        report.findings.append(ExportFinding("unreadable", str(exc), name))
        return
    for key in sorted(set(rebuilt) | set(have), key=lambda k: (k[0], str(k[1]))):
        if rebuilt.get(key) != have.get(key):
            what = (
                "missing from the decisions file"
                if key not in have
                else "not a decision record in the records file"
                if key not in rebuilt
                else "differs from the decision record it comes from"
            )
            report.findings.append(
                ExportFinding(
                    "decisions_mismatch",
                    what,
                    name,
                    key[0],
                    key[1] if _is_int(key[1]) else None,
                )
            )

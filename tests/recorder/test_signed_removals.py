"""Retention cannot launder a deletion: a removal names each session with its leaves, is signed by
the log's key, and `verify` (with and without a checkpoint) refuses a kept leaf its record does not
name, a removal without the key's signature, a held session removed, and leaves kept or lost
outside retention. Each attack is what someone who can write the database, but does not hold the
key, does: triggers off, a session deleted after a checkpoint, a chained retention record of their
own, the victim's leaf hashes kept under it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from blackbox.recorder.compliance.retention import RetentionError, apply_retention
from blackbox.recorder.log import events as docs
from blackbox.recorder.log import merkle
from blackbox.recorder.log.model import Direction, Kind, NewEvent, new_session_id
from blackbox.recorder.store import EventStore, open_store, tree
from blackbox.recorder.store.synthetic import DAY_NS
from blackbox.recorder.trust import keys, removal_note
from blackbox.recorder.trust.checkpoint import Signer
from click.testing import CliRunner

from blackbox.cli.main import main
from tests.fixtures.storekit import (
    OF_S,
    T0,
    SignedLog,
    authorise,
    session_events,
    signed_log,
    signed_log_template,
    tamper,
)

ORIGIN = "example.com/audit"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@dataclass
class Log:
    store: EventStore
    url: str
    vkey: str
    outside: Path  # a checkpoint kept outside the database
    sids: list[str]  # victim, bystander, the one retention really removes


@pytest.fixture(scope="module")
def sqlite_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SignedLog]:
    return signed_log_template(tmp_path_factory, ORIGIN)


@pytest.fixture
def log(
    store_url: str, blackbox_env: dict[str, str], request: pytest.FixtureRequest
) -> Iterator[Log]:
    """Three sessions, the log's key, a checkpoint kept elsewhere."""
    home = Path(blackbox_env["BLACKBOX_HOME"])
    (vkey, _note, sids), outside = signed_log(
        store_url, home, ORIGIN, lambda: request.getfixturevalue("sqlite_log")
    )
    store = open_store(store_url)
    yield Log(store, store_url, vkey, outside, sids)
    store.close()


def verify(log: Log, *extra: str) -> tuple[int, str]:
    return run("verify", "--store", log.url, *extra)


def verify_checkpoint(log: Log) -> tuple[int, str]:
    return verify(log, "--checkpoint", str(log.outside), "--key", log.vkey)


def leaves_of(store: EventStore, sid: str) -> list[tree.Leaf]:
    with store.transaction() as conn:
        return tree.session_leaves(conn, sid)


def store_id(store: EventStore) -> str:
    with store.transaction(write=True) as conn:
        return tree.log_id(conn)


def forge_retention(store: EventStore, applied: docs.RetentionApplied) -> int:
    """A retention session appended as any writer can (chained, in the tree); the log position of
    its `retention_applied` record."""
    sid = new_session_id(T0 + 50 * 10**9)
    documents = [
        docs.started_here(name="retention", transport=None, command=["blackbox", "retention"]),
        applied,
        docs.SessionEnded(reason="completed", outcome="ok", exit_code=0),
    ]
    store.append(
        [
            NewEvent(sid, seq, T0 + 50 * 10**9 + seq, seq, d.KIND, Direction.NONE, docs.encode(d))
            for seq, d in enumerate(documents, start=1)
        ]
    )
    return next(ev.position for ev in store.read_session(sid) if ev.kind == Kind.RETENTION_APPLIED)


def delete_as_retention(log: Log, victim: str, removed_by: int, bound_to: str | None) -> None:
    """Triggers off: the victim's records and row deleted, its leaf hashes kept under the forged
    record (bound to `bound_to`), its removal listed against it."""
    kept = [(leaf.index, leaf.leaf_hash) for leaf in leaves_of(log.store, victim)]
    tamper(
        log.url,
        (f"DELETE FROM events WHERE {OF_S}", {"s": victim}),
        ("DELETE FROM sessions WHERE session_id = :s", {"s": victim}),
        *(
            (
                "INSERT INTO tree_removed_leaves (idx, leaf_hash, removed_by, session_id) "
                "VALUES (:i, :h, :by, :s)",
                {"i": i, "h": h, "by": removed_by, "s": bound_to},
            )
            for i, h in kept
        ),
        (
            "INSERT INTO retention_removals (session_id, removed_by) VALUES (:s, :by)",
            {"s": victim, "by": removed_by},
        ),
    )


def victim_named(log: Log, victim: str, **fields: object) -> docs.RetentionApplied:
    """A retention document that names the victim with its real leaves and record count."""
    ranges = merkle.leaf_ranges([leaf.index for leaf in leaves_of(log.store, victim)])
    return docs.RetentionApplied(
        removed=[victim],
        sessions_removed=1,
        records_removed=len(leaves_of(log.store, victim)),
        removed_leaves={victim: ranges},
        **fields,  # type: ignore[arg-type]
    )


def both_refuse(log: Log, *expected: str) -> None:
    """`verify` without and with the checkpoint kept elsewhere both exit 1 naming the attack."""
    for code, out in (verify(log), verify_checkpoint(log)):
        assert code == 1, out
        for text in expected:
            assert text in out, out


def test_a_kept_leaf_under_a_record_that_names_no_session_is_refused(log: Log) -> None:
    victim = log.sids[0]
    by = forge_retention(log.store, docs.RetentionApplied(removed=[], sessions_removed=0))
    delete_as_retention(log, victim, by, victim)
    both_refuse(log, f"which does not name session {victim} with that leaf")


def test_a_kept_leaf_under_a_record_that_names_another_session_is_refused(log: Log) -> None:
    victim, bystander = log.sids[0], log.sids[1]
    by = forge_retention(log.store, docs.RetentionApplied(removed=[bystander], sessions_removed=1))
    delete_as_retention(log, victim, by, victim)
    both_refuse(
        log,
        f"which does not name session {victim}",
        "unauthorised_removal",
        f"{bystander}: removed: the retention record at log position {by} names this session "
        "as removed, yet it is still in the log",
    )


def test_a_kept_leaf_bound_to_no_session_is_refused(log: Log) -> None:
    victim = log.sids[0]
    by = forge_retention(log.store, victim_named(log, victim))
    delete_as_retention(log, victim, by, None)
    both_refuse(log, "which does not name its session with that leaf")


def test_a_removal_that_names_the_victim_without_a_signature_is_refused(log: Log) -> None:
    victim = log.sids[0]
    by = forge_retention(log.store, victim_named(log, victim))
    delete_as_retention(log, victim, by, victim)
    both_refuse(log, "unauthorised_removal", "without naming their leaves under the log key's")


def test_a_removal_signed_by_another_key_under_the_logs_name_is_refused(log: Log) -> None:
    victim = log.sids[0]
    impostor = Signer.generate(ORIGIN)  # the same name, not the log's key
    doc = victim_named(log, victim)
    signed = removal_note.sign_removal(impostor, doc, store_id(log.store))
    by = forge_retention(log.store, victim_named(log, victim, authorisation=signed))
    delete_as_retention(log, victim, by, victim)
    both_refuse(log, "log: removal:", "is not authorised by the log's key", "refused")


def test_a_genuine_signature_replayed_for_another_removal_is_refused(
    log: Log, tmp_path: Path
) -> None:
    victim, removed = log.sids[0], log.sids[2]
    real = docs.RetentionApplied()
    log.store.remove_sessions([removed], real, authorise=authorise(keys.configured_signer()))
    genuine = next(d.authorisation for _, d in _retention_docs(log.store) if d.removed == [removed])
    by = forge_retention(log.store, victim_named(log, victim, authorisation=genuine))
    delete_as_retention(log, victim, by, victim)
    both_refuse(log, "does not say what the record says it removes")


def _retention_docs(store: EventStore) -> list[tuple[int, docs.RetentionApplied]]:
    out = []
    for info in store.list_sessions():
        for ev in store.read_session(info.session_id):
            if ev.kind == Kind.RETENTION_APPLIED:
                doc = docs.decode_as(docs.RetentionApplied, ev.raw)
                assert doc is not None
                out.append((ev.position, doc))
    return out


def test_retention_signs_its_removal_and_verifies_with_the_key(log: Log, tmp_path: Path) -> None:
    now = T0 + 100 * DAY_NS
    log.store.append(session_events(calls=1, start_ns=now - 10**9, name="recent"))
    result = apply_retention(log.store, 90 * DAY_NS, tmp_path / "archive", now_ns=now)
    assert sorted(result.removed) == sorted(log.sids)
    [(_, doc)] = _retention_docs(log.store)
    assert sorted(doc.removed_leaves or {}) == sorted(log.sids)
    assert doc.authorisation and doc.authorisation.startswith(removal_note.HEADER + "\n" + ORIGIN)
    assert f"archive {result.archive_manifest_sha256}\n" in doc.authorisation
    for code, out in (verify(log), verify_checkpoint(log)):
        assert code == 0, out
    code, out = verify(log, "--key", log.vkey, "--format", "json")
    assert code == 0, out
    assert json.loads(out)["signed_removals"]["signatures_checked"] == 1


def test_retention_without_the_key_removes_nothing(log: Log, tmp_path: Path) -> None:
    keys.key_file().unlink()
    now = T0 + 100 * DAY_NS
    with pytest.raises(RetentionError, match="signing key"):
        apply_retention(log.store, 90 * DAY_NS, tmp_path / "archive", now_ns=now)
    assert {i.session_id for i in log.store.list_sessions()} == set(log.sids)


def test_a_held_session_removed_is_named(log: Log) -> None:
    removed = log.sids[2]
    log.store.remove_sessions([removed], authorise=authorise(keys.configured_signer()))
    assert verify(log)[0] == 0
    tamper(
        log.url,
        (
            "INSERT INTO holds (session_id, reason, created_ns) VALUES (:s, 'litigation', 1)",
            {"s": removed},
        ),
    )
    both_refuse(log, "held", "while on legal hold")


def test_a_kept_leaf_deleted_after_a_removal_is_named(log: Log) -> None:
    removed = log.sids[2]
    log.store.remove_sessions([removed], authorise=authorise(keys.configured_signer()))
    first = leaves_of_kept(log)[0]
    tamper(log.url, ("DELETE FROM tree_removed_leaves WHERE idx = :i", {"i": first}))
    code, out = verify(log)
    assert code == 1 and f"names {len(leaves_of_kept(log)) + 1} leaves of this session" in out, out


def leaves_of_kept(log: Log) -> list[int]:
    with log.store.transaction() as conn:
        return [
            int(i)
            for i in conn.exec_driver_sql(
                "SELECT idx FROM tree_removed_leaves ORDER BY idx"
            ).scalars()
        ]


def test_a_removal_made_before_removals_were_signed_still_verifies(log: Log) -> None:
    """A store upgraded to migration 0008 signs removals from its next record on: the unsigned
    removals it already holds verify, and are said to be bound to their records only."""
    removed = log.sids[2]
    log.store.remove_sessions([removed])  # as before 0008: no signature
    assert verify(log)[0] == 1
    tamper(log.url, ("UPDATE signed_removals SET from_position = 1000000", {}))
    code, out = verify(log)
    assert code == 0, out
    assert "1 removal(s) were made before removals were signed" in out

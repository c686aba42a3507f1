"""Migrations: an empty store upgrades to exactly the models, and a newer schema is refused."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from blackbox.recorder.errors import SchemaTooNew
from blackbox.recorder.store import layout, migrate, open_store
from blackbox.recorder.store.schema import metadata
from sqlalchemy import create_engine, inspect, text


def engine_for(url: str):
    return create_engine(url.replace("postgresql:", "postgresql+psycopg:", 1))


def test_first_use_migrates_to_head_and_matches_the_models(store_url):
    open_store(store_url).close()
    engine = engine_for(store_url)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "target_metadata": metadata}
        )
        assert compare_metadata(context, metadata) == []
        tables = set(inspect(conn).get_table_names())
    assert {"events", "sessions", "holds", "retention_removals", "alembic_version"} <= tables
    engine.dispose()


def test_upgrade_is_idempotent(store_url):
    open_store(store_url).close()
    engine = engine_for(store_url)
    with engine.begin() as conn:
        assert migrate.upgrade(conn) is False
    engine.dispose()


def test_schema_newer_than_the_code_is_refused(store_url):
    open_store(store_url).close()
    engine = engine_for(store_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
    engine.dispose()
    with pytest.raises(SchemaTooNew, match="newer than this mcp-blackbox knows"):
        open_store(store_url)


def test_blackbox_db_upgrade_command(store_url):
    from click.testing import CliRunner

    from blackbox.cli.main import main

    result = CliRunner().invoke(main, ["db", "upgrade", "--store", store_url])
    assert result.exit_code == 0, result.output
    assert f"schema revision {migrate.head_revision()}" in result.output


def test_revision_list_matches_the_versions_directory():
    from alembic.script import ScriptDirectory

    from blackbox import migrations

    script = ScriptDirectory.from_config(migrate.alembic_config())
    walked = [rev.revision for rev in script.walk_revisions()][::-1]
    assert tuple(walked) == migrations.REVISIONS
    assert script.get_current_head() == migrations.HEAD


def open_all_at_once(urls: list[str]) -> list[str]:
    """Open (and so migrate) each of `urls` in a thread of its own, all released together; the
    failures, as text. Fails the test if an open hangs."""
    import threading

    start = threading.Barrier(len(urls))
    errors: list[str] = []

    def open_it(url: str) -> None:
        start.wait()
        try:
            open_store(url).close()
        except Exception as exc:  # collected and asserted by the caller
            errors.append(f"{url}: {exc}")

    threads = [threading.Thread(target=open_it, args=(url,)) for url in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a concurrent first open hung"
    return errors


def test_concurrent_first_opens_migrate_once(store_url):
    assert open_all_at_once([store_url] * 4) == []
    store = open_store(store_url)
    assert store.list_sessions() == []
    store.close()


def test_threads_migrating_different_stores_at_once_each_get_their_own_schema(tmp_path, pg_url):
    """Alembic migrates through process-wide proxies: two threads migrating two stores at once
    ran each other's operations on each other's connections ("table events already exists")."""
    urls = [f"sqlite:///{tmp_path / f'store{i}.db'}" for i in range(5)] + [pg_url]
    assert open_all_at_once(urls) == []
    for url in urls:
        with engine_for(url).connect() as conn:
            assert migrate.is_current(conn)
            assert {"events", "sessions"} <= set(inspect(conn).get_table_names())


def test_a_store_at_0001_upgrades_and_its_unchecked_grants_go(store_url):
    """Revision 0001's `retention_grants` let any writer authorise a DELETE. A store written at
    that revision, holding such a forged grant, upgrades on open: the grant goes with its table
    and the DELETE it would have allowed is refused. Downgrading restores revision 0001."""
    from alembic import command

    from tests.fixtures.storekit import session_events

    engine = engine_for(store_url)
    with engine.begin() as conn:
        command.upgrade(migrate.alembic_config(conn), "0001")
    store = open_store(store_url)  # upgrades, then appends at head
    events = session_events(calls=1)
    store.append(events)
    store.close()
    sid = events[0].session_id
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), "0001")
        conn.execute(text("INSERT INTO retention_grants (session_id) VALUES (:s)"), {"s": sid})
    store = open_store(store_url)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        assert "retention_grants" not in inspect(conn).get_table_names()
        with pytest.raises(Exception, match="append-only"):
            conn.execute(text("DELETE FROM events WHERE sid = :s"), {"s": layout.sid_bytes(sid)})
        conn.rollback()
    assert store.verify() == [] and len(list(store.read_session(sid))) == len(events) + 1
    store.close()
    engine.dispose()


def _tree_state(store) -> tuple[int, bytes, list[int], int]:
    """(size, root recomputed from the records, the leaves' log positions, leaves retained)."""
    from blackbox.recorder.store import tree, tree_check

    with store.transaction() as conn:
        recomputed = tree_check.recompute(conn)
        runs = conn.execute(tree.tree_runs.select().order_by("first_idx")).all()
    assert recomputed.findings == []
    positions = [r.first_position + k for r in runs for k in range(r.leaves)]
    return recomputed.size, recomputed.roots[recomputed.size], positions, recomputed.retained


def test_the_tree_leaves_round_trip_through_0004(store_url):
    """Revision 0005 replaced the row per leaf (`tree_leaves`) by runs of positions and the kept
    leaf hashes of removed records. A store with a tree, a late gap and a retention removal goes
    down to 0004, where every leaf is a row again (a live record's leaf hash its chain hash's),
    and back up: the same leaves, in the same order, the same root, every checkpoint intact."""
    from alembic import command
    from blackbox.recorder.store import tree
    from blackbox.recorder.trust.checkpoint import Signer
    from blackbox.recorder.trust.signing import issue

    from tests.fixtures.storekit import T0, authorise, session_events, tamper

    store = open_store(store_url)
    # A store from before 0011: no leaf carries a commitment (0011 refuses to go down over any).
    tamper(store_url, ("UPDATE commitment_keys SET first_leaf = :f", {"f": 2**62}))
    sessions = [session_events(calls=4, start_ns=T0 + i * 10**9) for i in range(4)]
    signer = Signer.generate("test/log")
    for events in sessions[:2]:
        store.append(events)
    first = issue(store, signer)
    for events in sessions[2:]:
        store.append(events)
    removed = sessions[1][0].session_id
    records = len(list(store.read_session(removed)))
    store.remove_sessions([removed], authorise=authorise(signer))
    second = issue(store, signer)
    before = _tree_state(store)
    assert before[3] == records  # the removed session's leaves are retained
    store.close()

    engine = engine_for(store_url)
    with engine.begin() as conn:
        command.downgrade(migrate.alembic_config(conn), "0004")
        leaves = conn.execute(
            text("SELECT idx, position, leaf_hash, removed_by FROM tree_leaves ORDER BY idx")
        ).all()
        hashes = dict(conn.execute(text("SELECT position, hash FROM events")).all())
    assert [r.idx for r in leaves] == list(range(before[0]))
    assert [r.position for r in leaves] == before[2]
    for r in leaves:
        if r.position in hashes:
            assert bytes(r.leaf_hash) == tree.merkle.leaf_hash(bytes(hashes[r.position]))
        else:
            assert r.removed_by is not None
    engine.dispose()

    store = open_store(store_url)  # upgrades to head again
    assert _tree_state(store) == before
    with store.transaction() as conn:
        assert tree.root_at(conn, first.size) == first.root
        assert tree.root_at(conn, second.size) == second.root
        proof = tree.consistency_proof(conn, first.size, second.size)
    assert tree.merkle.verify_consistency(first.size, second.size, first.root, second.root, proof)
    store.close()

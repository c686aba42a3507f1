"""Cost of signed removals (not a test: prints figures).

Two figures on SQLite stores, each against a baseline measured in the
same run:

- removing a batch of sessions signed (leaves named, a note signed with the log's key) against the
  same removal unsigned, on two identical stores filled the same way;
- `verify`'s removal checks on the store afterwards (the kept-leaf binding in the store, the notes
  checked with the key) against the whole `verify` of the same store.

    python bench/removals.py [--sessions 2000] [--remove 1000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from blackbox.recorder.store import EventStore, open_store, removals
from blackbox.recorder.store.synthetic import DAY_NS, record_session
from blackbox.recorder.trust import removal_note
from blackbox.recorder.trust.checkpoint import Signer

T = TypeVar("T")


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def filled(url: str, sessions: int) -> tuple[EventStore, list[str]]:
    store = open_store(url)
    ids = [record_session(store, 10**18 + i * DAY_NS, calls=8) for i in range(sessions)]
    return store, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--remove", type=int, default=1000)
    args = parser.parse_args()
    scratch = tempfile.TemporaryDirectory(prefix="removals-bench-")
    signer = Signer.generate("bench.example/log")

    def url(name: str) -> str:
        return f"sqlite:///{Path(scratch.name) / name}.db"

    plain, plain_ids = filled(url("plain"), args.sessions)
    signed, signed_ids = filled(url("signed"), args.sessions)
    records = sum(1 for _ in plain.read_session(plain_ids[0])) * args.sessions
    print(f"{args.sessions:,} sessions, {records:,} records; removing {args.remove:,} sessions")

    t_plain, _ = timed(lambda: plain.remove_sessions(plain_ids[: args.remove]))
    t_signed, _ = timed(
        lambda: signed.remove_sessions(
            signed_ids[: args.remove],
            authorise=lambda doc, sid: removal_note.sign_removal(signer, doc, sid),
        )
    )
    print(
        f"  removal: unsigned {t_plain:.2f} s, signed {t_signed:.2f} s ({t_signed / t_plain:.2f}x)"
    )

    t_verify, found = timed(signed.verify)
    assert found == [], found

    def removal_checks() -> None:
        with signed.transaction() as conn:
            assert removals.kept_leaf_findings(conn) == []
        report = removal_note.check_removals(signed, signer.verifier)
        assert report.findings == [] and report.signed_checked == 1

    t_checks, _ = timed(removal_checks)
    print(
        f"  verify: whole {t_verify:.2f} s; its removal checks {t_checks:.3f} s "
        f"({t_checks / t_verify:.3f}x of it)"
    )
    plain.close()
    signed.close()


if __name__ == "__main__":
    main()

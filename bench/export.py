"""Benchmark: compliance export and verify-export throughput, in records per second, against a
plain copy + sha256 of the bundle's largest file, measured in the same run.

    python bench/export.py            # 50,000 records (under a minute of CPU)
    python bench/export.py --quick    # 10,000 records
    python bench/export.py --records 500000 --store postgresql://postgres@127.0.0.1/bench
    python bench/export.py --signature-only   # only the signed manifest's cost (below)

The store is filled with realistic sessions (handshake, tool calls with arguments and results,
decisions, stderr, HTTP exchanges carrying secrets) through the store API; filling is not timed.
The baseline is copying the bundle's largest file (records.jsonl) and computing its sha256: the
least any export or verification must do. "vs baseline" is operation time / baseline time.

The signed manifest (`manifest.sig`, recorder/compliance/bundle_sign.py) is measured apart: a
JSONL export with a checkpoint and a proof per record, with the manifest signed and without,
alternating in the same run (`--rounds` each, best of; which goes first alternates too), and
`verify-export --key` of each (the unsigned one with `allow_unsigned_manifest`), printed as
ratios signed / unsigned. On a shared machine one export's CPU time varies by 20 %: read the
ratio with that in mind (the signature itself is one Ed25519 signature, under a millisecond).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from blackbox.recorder.compliance.bundle_check import verify_export
from blackbox.recorder.compliance.export import export_bundle
from blackbox.recorder.log.model import new_session_id
from blackbox.recorder.privacy.redact import Redactor
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import session_events
from blackbox.recorder.trust.checkpoint import Signer
from blackbox.recorder.trust.signing import issue


def fill(store, records: int) -> int:  # type: ignore[no-untyped-def]
    """Append sessions until about `records` records are stored; returns the count."""
    total = 0
    start = time.time_ns() - 30 * 86_400 * 1_000_000_000
    i = 0
    batch = []
    while total < records:
        sid = new_session_id(start + i * 1_000_000_000)
        events = session_events(
            sid,
            start + i * 1_000_000_000,
            era="2026-07-28" if i % 2 else "2025-11-25",
            secrets=i % 3 == 0,
            calls=20,
        )
        batch.extend(events)
        total += len(events) + 1  # + the seal the store adds
        i += 1
        if len(batch) >= 5000:
            store.append(batch)
            batch = []
    if batch:
        store.append(batch)
    return total


def timed(fn):  # type: ignore[no-untyped-def]
    """(seconds, value): CPU seconds of this process, steadier than wall time on a shared
    machine; the store's own work (SQLite in-process) is included, a PostgreSQL server's not."""
    t0 = time.process_time()
    value = fn()
    return time.process_time() - t0, value


def signature_cost(store, work: Path, count: int, rounds: int) -> None:  # type: ignore[no-untyped-def]
    """Export (JSONL, checkpoint and proofs) with the manifest signed and without, alternating,
    and verify-export --key of each; prints the best times and the ratios."""
    signer = Signer.generate("bench.example/log")
    note = issue(store, signer).note  # sequences the whole log once, not timed
    best: dict[str, float] = {}
    pair: list[tuple[str, Signer | None]] = [("unsigned", None), ("signed", signer)]
    for r in range(rounds):
        for label, who in pair if r % 2 == 0 else pair[::-1]:  # either may go first
            out = work / f"sig-{label}-{r}"
            secs, result = timed(
                lambda out=out, who=who: export_bundle(
                    store, out, fmt="jsonl", checkpoint_note=note, manifest_signer=who
                )
            )
            assert (result.signed_by is not None) == (who is not None)
            best[f"export {label}"] = min(secs, best.get(f"export {label}", secs))
            vsecs, report = timed(
                lambda out=out: verify_export(
                    out, verifier=signer.verifier, allow_unsigned_manifest=True
                )
            )
            assert report.ok, report.findings[:3]
            assert report.completeness_checked == (who is not None)
            best[f"verify {label}"] = min(vsecs, best.get(f"verify {label}", vsecs))
            shutil.rmtree(out)
    print(f"\nsigned manifest, {count} records, best of {rounds} alternating rounds (CPU s)\n")
    print("| operation | unsigned | signed | signed / unsigned |")
    print("|---|---:|---:|---:|")
    for op in ("export", "verify"):
        plain, signed = best[f"{op} unsigned"], best[f"{op} signed"]
        name = "export jsonl + proofs" if op == "export" else "verify-export --key"
        print(f"| {name} | {plain:.2f} | {signed:.2f} | {signed / plain:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="10,000 records")
    parser.add_argument("--store", default=None, help="store URL (default: a temporary SQLite)")
    parser.add_argument(
        "--signature-only", action="store_true", help="only the signed manifest's cost"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the signature comparison")
    args = parser.parse_args()
    n = 10_000 if args.quick else args.records
    work = Path(tempfile.mkdtemp(prefix="bb-bench-export-"))
    try:
        url = args.store or f"sqlite:///{work / 'store.db'}"
        store = open_store(url)
        print(f"filling {url.split('?')[0]} with ~{n} records ...", file=sys.stderr)
        fill_s, count = timed(lambda: fill(store, n))
        print(f"filled {count} records in {fill_s:.1f}s", file=sys.stderr)
        if args.signature_only:
            signature_cost(store, work, count, args.rounds)
            store.close()
            return

        rows: list[tuple[str, float, int]] = []
        for fmt in ("parquet", "jsonl", "csv"):
            out = work / f"bundle-{fmt}"
            secs, result = timed(lambda fmt=fmt, out=out: export_bundle(store, out, fmt=fmt))
            size = sum(p.stat().st_size for p in out.iterdir())
            rows.append((f"export {fmt}", secs, size))
            vsecs, report = timed(lambda out=out: verify_export(out))
            assert report.ok, report.findings[:3]
            rows.append((f"verify-export {fmt}", vsecs, size))
        out = work / "bundle-redacted"
        secs, result = timed(
            lambda: export_bundle(store, out, fmt="parquet", redactor=Redactor.default(key=b"b"))
        )
        rows.append(
            ("export parquet, redacted", secs, sum(p.stat().st_size for p in out.iterdir()))
        )
        vsecs, report = timed(lambda: verify_export(out))
        assert report.ok, report.findings[:3]
        rows.append(("verify-export parquet, redacted", vsecs, rows[-1][2]))
        signature_cost(store, work, count, args.rounds)
        store.close()

        # The baseline: what merely copying and hashing the largest bundle file costs.
        big = work / "bundle-jsonl" / "records.jsonl"

        def copy_and_hash() -> str:
            shutil.copyfile(big, work / "copy.jsonl")
            digest = hashlib.sha256()
            with (work / "copy.jsonl").open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
            return digest.hexdigest()

        base_s = min(timed(copy_and_hash)[0] for _ in range(3))  # tiny: the best of three
        rows.insert(0, ("baseline: copy + sha256 of records.jsonl", base_s, big.stat().st_size))

        print(f"\n{count} records ({result.manifest['counts']['sessions']} sessions)\n")
        print("| operation | CPU s | records/s | MB | vs baseline |")
        print("|---|---:|---:|---:|---:|")
        for name, secs, size in rows:
            ratio = f"{secs / base_s:.0f}x"
            print(f"| {name} | {secs:.2f} | {count / secs:,.0f} | {size / 1e6:.1f} | {ratio} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The compliance commands end to end: export, verify-export, retention apply, hold."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from blackbox.recorder.store import open_store
from blackbox.recorder.store.synthetic import DAY_NS, SECRETS, record_session
from click.testing import CliRunner

from blackbox.cli.main import main


@pytest.fixture
def cli(store_url: str, blackbox_env: dict[str, str]):
    store = open_store(store_url)
    now = time.time_ns()
    ids = {
        "old": record_session(store, now - 100 * DAY_NS, secrets=True, era="2026-07-28"),
        "held": record_session(store, now - 101 * DAY_NS),
        "new": record_session(store, now - DAY_NS, name="git"),
    }
    runner = CliRunner()

    def run(*args: str) -> object:
        return runner.invoke(main, [*args, "--store", store_url], catch_exceptions=False)

    def run_plain(*args: str) -> object:  # commands without --store
        return runner.invoke(main, list(args), catch_exceptions=False)

    yield run, run_plain, store, ids
    store.close()


def _raw_text(bundle: Path) -> bytes:
    out = b""
    for line in (bundle / "records.jsonl").read_text().splitlines():
        out += base64.b64decode(json.loads(line)["raw"])
    return out + b"".join(p.read_bytes() for p in bundle.iterdir())


def test_export_redacts_by_default_and_verifies(cli, tmp_path: Path, blackbox_env) -> None:
    run, run_plain, _store, ids = cli
    result = run("export", "--out", str(tmp_path / "b"), "--format", "jsonl")
    assert result.exit_code == 0, result.output
    assert "3 session(s)" in result.stdout and "redacted record(s)" in result.stdout
    assert "exported 3/3 sessions" in result.stderr
    text = _raw_text(tmp_path / "b")
    for secret in SECRETS.values():
        assert secret.encode() not in text
    (key_file,) = (Path(blackbox_env["BLACKBOX_HOME"]) / "keys").iterdir()
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"

    ok = run_plain("verify-export", str(tmp_path / "b"))
    assert ok.exit_code == 0 and ok.stdout.startswith("intact: 3 files, 3 session(s)")
    doc = json.loads(run_plain("verify-export", str(tmp_path / "b"), "--format", "json").stdout)
    assert doc["ok"] is True and doc["records_attested"] > 0

    # Fingerprints are keyed by the store's key: a second export joins with the first.
    c = run("export", "--out", str(tmp_path / "c"), "--format", "jsonl", "--session", ids["old"])
    assert c.exit_code == 0, c.output

    def first_redacted(bundle: Path) -> dict:
        docs = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
        return next(d for d in docs if d["redacted"])

    first, second = first_redacted(tmp_path / "b"), first_redacted(tmp_path / "c")
    assert first["raw"] == second["raw"] and first["redacted"]


def test_export_no_redact_keeps_payloads(cli, tmp_path: Path) -> None:
    run, _run_plain, _store, ids = cli
    result = run(
        "export", "--out", str(tmp_path / "b"), "--no-redact", "--format", "csv", "--since", "30d"
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert list(manifest["sessions"]) == [ids["new"]]
    result = run("export", "--out", str(tmp_path / "c"), "--no-redact", "--server", "time")
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert set(manifest["sessions"]) == {ids["old"], ids["held"]}
    assert manifest["counts"]["redacted_records"] == 0


def test_export_with_a_rules_file(cli, tmp_path: Path) -> None:
    run, _run_plain, _store, ids = cli
    rules = tmp_path / "rules.toml"
    rules.write_text('builtins = false\nkeys = ["timezone"]\n')
    result = run(
        "export",
        "--out",
        str(tmp_path / "b"),
        "--format",
        "jsonl",
        "--redact",
        str(rules),
        "--session",
        ids["new"],
    )
    assert result.exit_code == 0, result.output
    text = _raw_text(tmp_path / "b")
    assert b"Europe/Paris" not in text and b"[redacted:" in text


def test_verify_export_exit_codes_on_tampering(cli, tmp_path: Path) -> None:
    run, run_plain, _store, _ids = cli
    run("export", "--out", str(tmp_path / "b"), "--format", "jsonl", "--no-redact")
    (tmp_path / "b" / "decisions.jsonl").unlink()
    bad = run_plain("verify-export", str(tmp_path / "b"))
    assert bad.exit_code == 1
    assert "decisions.jsonl: file_missing" in bad.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["export", "--out", "{tmp}/x", "--since", "yesterday"], "neither an age"),
        (["export", "--out", "{tmp}/x", "--redact", "{tmp}/none.toml"], "does not exist"),
        (["export", "--out", "{tmp}/x", "--session", "zzzz"], "no session matches"),
        (["retention", "apply", "--older-than", "ninety"], "is not an age"),
        (["hold", "add", "zzzz", "--reason", "x"], "no session matches"),
    ],
)
def test_user_errors_are_one_line_exit_2(cli, tmp_path: Path, args, message) -> None:
    run, _run_plain, _store, _ids = cli
    result = run(*[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


def test_verify_export_of_a_directory_without_manifest(cli, tmp_path: Path) -> None:
    _run, run_plain, _store, _ids = cli
    (tmp_path / "empty").mkdir()
    result = run_plain("verify-export", str(tmp_path / "empty"))
    assert result.exit_code == 1 and "manifest_missing" in result.stdout


@pytest.mark.usefixtures("signing_key")
def test_retention_and_holds_from_the_command_line(cli, tmp_path: Path, blackbox_env) -> None:
    run, _run_plain, store, ids = cli
    assert run("hold", "add", ids["held"][:13], "--reason", "case 7").exit_code == 0
    listed = json.loads(run("hold", "list", "--format", "json").stdout)
    assert [(h["session_id"], h["reason"]) for h in listed] == [(ids["held"], "case 7")]

    dry = run("retention", "apply", "--older-than", "90d", "--dry-run", "--format", "json")
    assert dry.exit_code == 0, dry.output
    doc = json.loads(dry.stdout)
    assert doc["would_remove"] == [ids["old"]] and doc["held_kept"] == [ids["held"]]
    assert len(store.list_sessions()) == 3

    done = run("retention", "apply", "--older-than", "90d")
    assert done.exit_code == 0, done.output
    assert (
        "removed 1 session(s)" in done.stdout and "kept 1 session(s) on legal hold" in done.stdout
    )
    archives = list((Path(blackbox_env["BLACKBOX_HOME"]) / "archive").iterdir())
    assert len(archives) == 1 and (archives[0] / "manifest.json").is_file()
    remaining = {i.session_id for i in store.list_sessions()}
    assert ids["old"] not in remaining and {ids["held"], ids["new"]} <= remaining
    assert store.verify() == []

    assert run("hold", "remove", ids["held"]).exit_code == 0
    again = run("hold", "remove", ids["held"])
    assert again.exit_code == 2 and "not on hold" in again.stderr
    assert run("hold", "list").stdout.strip() == "(no rows)"

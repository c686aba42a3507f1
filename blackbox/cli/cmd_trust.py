"""Commands of the trust area: keys init|show, checkpoint, prove (verify --checkpoint lives with
verify in cmd_store). Each calls one library function: blackbox.recorder.trust.keys,
blackbox.recorder.trust.signing, blackbox.recorder.trust.logproof."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from blackbox.cli.options import format_option, open_configured_store, store_option
from blackbox.recorder.trust import keys as keyfile
from blackbox.recorder.trust import logproof, proofcheck, signing

key_file_option = click.option(
    "--key-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"The signing key's file (default: {keyfile.KEY_ENV}, else keys/checkpoint.key in the "
    "data directory).",
)


@click.group()
def keys() -> None:
    """The Ed25519 key that signs the log's checkpoints (kept outside the store)."""


@keys.command("init")
@click.option("--origin", default=None, help="The log's name (default: <host>/mcp-blackbox).")
@key_file_option
def keys_init(origin: str | None, key_file: Path | None) -> None:
    """Create the signing key (file mode 0600; an existing key is never overwritten). The last
    line printed is the verifier key: give it to whoever checks your checkpoints.

    \b
    Example:
      blackbox keys init --origin example.com/mcp-audit
    """
    path = keyfile.key_file(key_file)
    signer = keyfile.init_key(path, origin)
    click.echo(f"signing key written to {path} (keep it secret; never in the store)")
    click.echo(signer.vkey)


@keys.command("show")
@key_file_option
def keys_show(key_file: Path | None) -> None:
    """Print the verifier key of the signing key.

    \b
    Example:
      blackbox keys show
    """
    click.echo(keyfile.load_signer(keyfile.key_file(key_file)).vkey)


@click.command()
@store_option
@key_file_option
@click.option(
    "--publish",
    metavar="DIR|CMD",
    default=None,
    help="Also hand the checkpoint to this existing directory (checkpoint-<size>.txt and "
    "checkpoint.txt, the latest) or command (the note on its stdin): a place the database's "
    "administrator does not control. The latest checkpoint is handed on even when nothing new "
    "was signed; exit 1 when it cannot be (the checkpoint is still signed and kept).",
)
def checkpoint(store_url: str | None, key_file: Path | None, publish: str | None) -> None:
    """Sign a checkpoint (C2SP tlog-checkpoint) over the log as it stands, keep it in the store
    and in checkpoints/<log id>.txt in the data directory (one file per store), and print it.
    Refused when the log is not consistent with the last checkpoint signed.

    \b
    Example:
      blackbox checkpoint --publish /mnt/audit/checkpoints/
      blackbox checkpoint --publish "git -C ~/audit-log commit-checkpoint"
    """
    signer = keyfile.load_signer(keyfile.key_file(key_file))
    store = open_configured_store(store_url, create=True)
    try:
        issued = signing.issue(store, signer, keyfile.data_dir(), publish)
    except signing.PublishError as exc:
        # Signed and kept, not published: the note is printed, the failure said, exit 1.
        if exc.issued is not None:
            click.echo(exc.issued.note, nl=False)
        click.echo(f"blackbox: checkpoint signed and kept, but not published: {exc}", err=True)
        sys.exit(1)
    click.echo(issued.note, nl=False)


@click.command()
@click.argument("session")
@store_option
@click.option(
    "--checkpoint",
    "checkpoint_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    help="Prove against this checkpoint's tree size (default: the tree as it stands).",
)
@click.option(
    "--consistency-from",
    type=int,
    default=None,
    metavar="SIZE",
    help="Also prove the tree of SIZE records is a prefix of the checkpoint's.",
)
def prove(
    session: str,
    store_url: str | None,
    checkpoint_file: Path | None,
    consistency_from: int | None,
) -> None:
    """Print, as JSON, RFC 9162 inclusion proofs of a session's records in the log's Merkle tree
    (and a consistency proof on request), for anyone to check against a checkpoint.

    \b
    Example:
      blackbox prove last --checkpoint /mnt/audit/checkpoints/checkpoint.txt
      blackbox prove 01JQ --consistency-from 1200
    """
    store = open_configured_store(store_url)
    note = checkpoint_file.read_text(encoding="utf-8") if checkpoint_file else None
    doc = logproof.prove(store, store.resolve(session), note, consistency_from)
    click.echo(json.dumps(doc, indent=2))


@click.command("verify-proof")
@click.argument("proof_file", metavar="PROOF", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--checkpoint",
    "checkpoint_file",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The signed checkpoint (or file of them) the proof is checked against.",
)
@click.option("--key", "vkey", required=True, metavar="VKEY", help="The log's verifier key.")
@format_option(("table", "json"))
def verify_proof(proof_file: Path, checkpoint_file: Path, vkey: str, fmt: str) -> None:
    """Check a proof written by `blackbox prove` against a signed checkpoint, with the verifier
    key alone (no store): its inclusion proofs, and its consistency proof if it has one. Exit 0
    valid, 1 invalid or inconsistent, 2 a usage error (a file missing, a bad key).

    \b
    Example:
      blackbox prove last --checkpoint cp.txt > proof.json
      blackbox verify-proof proof.json --checkpoint cp.txt --key "$(cat audit.vkey)"
    """
    texts = []
    for name, path in (("PROOF", proof_file), ("--checkpoint", checkpoint_file)):
        try:
            texts.append(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise click.UsageError(f"{name}: cannot read {path}: {exc}") from exc
    verdict = proofcheck.check_proof(texts[0], texts[1], vkey)
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "valid": verdict.valid,
                    "tree_size": verdict.tree_size,
                    "inclusions": verdict.inclusions,
                    "consistency": verdict.consistency,
                    "findings": verdict.findings,
                }
            )
        )
    elif verdict.valid:
        what = f"{verdict.inclusions} inclusion proof(s)"
        if verdict.consistency:
            what += " and the consistency proof"
        click.echo(f"valid: {what} against the signed tree of {verdict.tree_size} records")
    else:
        for finding in verdict.findings:
            click.echo(f"invalid: {finding}")
    raise SystemExit(0 if verdict.valid else 1)


COMMANDS = [keys, checkpoint, prove, verify_proof]

"""Signed notes and transparency-log checkpoints, in the C2SP formats (c2sp.org/signed-note,
c2sp.org/tlog-checkpoint) that Go's checksum database, Sigstore and the transparency-dev tools use.

A checkpoint is the log's size and Merkle root (recorder/log/merkle.py) signed with an Ed25519 key
that lives outside the store, so a copy kept elsewhere lets anyone holding the public key check
that the log was neither rewritten nor cut. Keys use the same text forms as Go's
golang.org/x/mod/sumdb/note package, so its tools read ours. Parsing and opening return
(value, problem) and never raise: a forged note is a finding to report, not a crash.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from blackbox.recorder import BlackboxError
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ALG_ED25519 = 0x01
KEY_ID_SIZE = 4
ROOT_HASH_SIZE = 32
# The spec asks verifiers to accept at least 16 signatures; Go's note package refuses more than
# 100 so that a note cannot make a verifier spend forever. We take Go's limit.
MAX_SIGNATURES = 100
MAX_TREE_SIZE = (1 << 63) - 1  # Go parses the size as an int64; so do we.
EM_DASH = "\u2014"
_SIG_PREFIX = EM_DASH + " "
_PRIVATE_PREFIX = "PRIVATE+KEY+"
_DECIMAL = re.compile(r"0|[1-9][0-9]*", re.ASCII)


class CheckpointError(BlackboxError):
    """A key, note or checkpoint cannot be made as asked (a bad key name, a note text that does
    not end in a newline). Reading one that is bad is a problem value, not this error."""


# --- keys ---


def valid_key_name(name: str) -> bool:
    """A key name is non-empty, with no Unicode space, no plus and no control character."""
    return (
        isinstance(name, str)
        and name != ""
        and "+" not in name
        and not any(c.isspace() or c < " " for c in name)
    )


def key_id(name: str, public_key: bytes) -> bytes:
    """SHA-256(name || 0x0A || 0x01 || public key)[:4]: an Ed25519 key id (c2sp.org/signed-note)."""
    data = name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public_key
    return hashlib.sha256(data).digest()[:KEY_ID_SIZE]


def _b64decode(text: str) -> bytes | None:
    """Standard base64 with padding, nothing else allowed (Go's StdEncoding); None if not."""
    if not text.isascii():
        return None
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class Verifier:
    """A public key that can check signatures: its name, 4-byte key id and 32-byte Ed25519 key."""

    name: str
    key_id: bytes
    public_key: bytes

    @classmethod
    def of(cls, name: str, public_key: bytes) -> Verifier:
        if not valid_key_name(name):
            raise CheckpointError(f"{name!r} is not a key name: no spaces and no plus sign")
        if len(public_key) != 32:
            raise CheckpointError("an Ed25519 public key is 32 bytes")
        return cls(name, key_id(name, public_key), public_key)

    @property
    def vkey(self) -> str:
        """`<name>+<8 hex key id>+<base64(0x01 || public key)>`, the verifier key text."""
        material = _b64encode(bytes([ALG_ED25519]) + self.public_key)
        return f"{self.name}+{self.key_id.hex()}+{material}"

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Whether `signature` (64 bytes, no key id) is this key's signature of `message`."""
        if len(signature) != 64:
            return False
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True


def parse_vkey(vkey: str) -> tuple[Verifier | None, str | None]:
    """A verifier key text to a `Verifier`: (verifier, None) or (None, problem)."""
    if not isinstance(vkey, str):
        return None, "a verifier key is text"
    parts = vkey.split("+", 2)
    if len(parts) != 3:
        return None, "a verifier key has the form <name>+<8 hex digits key id>+<base64 key>"
    name, id_hex, material = parts
    if not valid_key_name(name):
        return None, f"the verifier key's name {name!r} is not a key name"
    if not re.fullmatch(r"[0-9a-f]{8}", id_hex, re.ASCII):
        return None, "a verifier key's id is 8 lowercase hex digits"
    raw = _b64decode(material)
    if raw is None or not raw:
        return None, "the verifier key's key part is not base64"
    if raw[0] != ALG_ED25519:
        return None, f"the verifier key is of signature type {raw[0]}; only Ed25519 (1) is known"
    if len(raw) != 33:
        return None, "the verifier key's Ed25519 public key is not 32 bytes"
    public_key = raw[1:]
    if key_id(name, public_key).hex() != id_hex:
        return None, "the verifier key's id does not match its name and key: it was altered"
    return Verifier(name, bytes.fromhex(id_hex), public_key), None


@dataclass(frozen=True)
class Signer:
    """A private key that signs notes. Its repr shows the public half only, so a signer that
    reaches a log line or a traceback does not take the secret with it."""

    name: str
    key_id: bytes
    _private: Ed25519PrivateKey = field(repr=False, compare=False)

    @classmethod
    def generate(cls, name: str) -> Signer:
        """A new random Ed25519 key under `name` (the checkpoint origin)."""
        return cls.from_seed(name, Ed25519PrivateKey.generate().private_bytes_raw())

    @classmethod
    def from_seed(cls, name: str, seed: bytes) -> Signer:
        if not valid_key_name(name):
            raise CheckpointError(f"{name!r} is not a key name: no spaces and no plus sign")
        if len(seed) != 32:
            raise CheckpointError("an Ed25519 private key seed is 32 bytes")
        private = Ed25519PrivateKey.from_private_bytes(seed)
        public_key = private.public_key().public_bytes_raw()
        return cls(name, key_id(name, public_key), private)

    @property
    def verifier(self) -> Verifier:
        return Verifier(self.name, self.key_id, self._private.public_key().public_bytes_raw())

    @property
    def vkey(self) -> str:
        return self.verifier.vkey

    def sign(self, message: bytes) -> bytes:
        """The 64-byte Ed25519 signature of `message` (deterministic, RFC 8032)."""
        return self._private.sign(message)

    def private_key_text(self) -> str:
        """`PRIVATE+KEY+<name>+<8 hex key id>+<base64(0x01 || 32-byte seed)>`, the form Go's
        note.GenerateKey writes and note.NewSigner reads. It is the secret: keep it in a file
        of mode 0600, never in the store."""
        seed = self._private.private_bytes_raw()
        material = _b64encode(bytes([ALG_ED25519]) + seed)
        return f"{_PRIVATE_PREFIX}{self.name}+{self.key_id.hex()}+{material}"


def parse_private_key(text: str) -> tuple[Signer | None, str | None]:
    """The text of `Signer.private_key_text` back to a `Signer`: (signer, None) or (None,
    problem). The problem never quotes the text, which is a secret."""
    if not isinstance(text, str) or not text.startswith(_PRIVATE_PREFIX):
        return None, "a private key starts with PRIVATE+KEY+"
    parts = text[len(_PRIVATE_PREFIX) :].split("+", 2)
    if len(parts) != 3:
        return None, "a private key has the form PRIVATE+KEY+<name>+<key id>+<base64 key>"
    name, id_hex, material = parts
    if not valid_key_name(name):
        return None, "the private key's name is not a key name"
    if not re.fullmatch(r"[0-9a-f]{8}", id_hex, re.ASCII):
        return None, "a private key's id is 8 lowercase hex digits"
    raw = _b64decode(material)
    if raw is None or not raw:
        return None, "the private key's key part is not base64"
    if raw[0] != ALG_ED25519:
        return None, f"the private key is of signature type {raw[0]}; only Ed25519 (1) is known"
    if len(raw) != 33:
        return None, "the private key's Ed25519 seed is not 32 bytes"
    signer = Signer.from_seed(name, raw[1:])
    if signer.key_id.hex() != id_hex:
        return None, "the private key's id does not match its key: it was altered"
    return signer, None


# --- signed notes ---


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: the key's name, its 4-byte id, and the signature bytes after the id."""

    name: str
    key_id: bytes
    signature: bytes

    @property
    def key(self) -> str:
        """`name+keyid`, how a reader names the key."""
        return f"{self.name}+{self.key_id.hex()}"

    def line(self) -> str:
        return f"{_SIG_PREFIX}{self.name} {_b64encode(self.key_id + self.signature)}\n"


@dataclass(frozen=True)
class Note:
    """An opened note: its text (to be trusted only because `verified` is not empty) and its
    signatures by known keys (`verified`) and by keys the reader does not know (`unverified`)."""

    text: str
    verified: tuple[NoteSignature, ...]
    unverified: tuple[NoteSignature, ...] = ()


def _text_problem(text: str) -> str | None:
    """Why `text` cannot be a note's text, or None."""
    if not text.endswith("\n"):
        return "a note's text ends with a newline"
    if any(c < " " and c != "\n" for c in text):
        return "a note holds no control characters other than newline"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a note is valid UTF-8"
    return None


def sign_note(text: str, *signers: Signer) -> str:
    """The signed note: `text`, a blank line, then one `— <name> <base64(key id || signature)>`
    line per signer. Raises `CheckpointError` for a text that cannot be a note's."""
    problem = _text_problem(text) if isinstance(text, str) else "a note's text is a string"
    if problem:
        raise CheckpointError(problem)
    if not signers:
        raise CheckpointError("a note is signed by at least one key")
    message = text.encode("utf-8")
    lines = [NoteSignature(s.name, s.key_id, s.sign(message)).line() for s in signers]
    return text + "\n" + "".join(lines)


def open_note(
    message: bytes | str, verifiers: Iterable[Verifier]
) -> tuple[Note | None, str | None]:
    """Check a signed note against the keys the reader trusts: (note, None) when at least one
    signature by a known key verifies and none by a known key fails, else (None, problem).

    As c2sp.org/signed-note says: a signature whose name and key id (both) do not match a known
    key is ignored; one that matches must verify, and a failure rejects the whole note."""
    if isinstance(message, str):
        try:
            data = message.encode("utf-8")
        except UnicodeEncodeError:
            return None, "the note is not valid UTF-8"
    else:
        data = bytes(message)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None, "the note is not valid UTF-8"
    if any(c < " " and c != "\n" for c in text):
        return None, "the note holds a control character other than newline"
    split = text.rfind("\n\n")
    if split < 0:
        return None, "the note has no blank line before its signatures: it is not signed"
    body, block = text[: split + 1], text[split + 2 :]
    if not block or not block.endswith("\n"):
        return None, "the note's signature block is empty or does not end with a newline"

    known: dict[tuple[str, bytes], list[Verifier]] = {}
    for verifier in verifiers:
        entries = known.setdefault((verifier.name, verifier.key_id), [])
        if verifier not in entries:
            entries.append(verifier)

    body_bytes = body.encode("utf-8")
    verified: list[NoteSignature] = []
    unverified: list[NoteSignature] = []
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        return None, f"the note carries more than {MAX_SIGNATURES} signatures"
    for number, line in enumerate(lines, start=1):
        sig = _parse_signature_line(line)
        if sig is None:
            return None, (
                f"signature line {number} is not '{EM_DASH} <key name> <base64 signature>': "
                "the note was edited after it was signed, or is not a signed note"
            )
        candidates = known.get((sig.name, sig.key_id))
        if not candidates:
            if sig not in unverified:
                unverified.append(sig)
            continue
        if len(candidates) > 1:
            return None, f"two different trusted keys are named {sig.key}: remove one"
        # Every signature by a known key is checked, a repeated one too (Go's note package
        # skips repeats): a bad line under a good one is still an edit to refuse.
        if not candidates[0].verify(body_bytes, sig.signature):
            return None, (
                f"the signature by key {sig.key} does not verify: the note was changed after "
                "it was signed, or it was signed by another key that claims this key's name and id"
            )
        if sig not in verified:
            verified.append(sig)
    if not verified:
        names = ", ".join(s.key for s in unverified)
        return None, f"the note is not signed by any trusted key (it is signed by {names})"
    return Note(body, tuple(verified), tuple(unverified)), None


def _parse_signature_line(line: str) -> NoteSignature | None:
    if not line.startswith(_SIG_PREFIX):
        return None
    name, space, encoded = line[len(_SIG_PREFIX) :].partition(" ")
    if not space or not valid_key_name(name):
        return None
    raw = _b64decode(encoded)
    if raw is None or len(raw) <= KEY_ID_SIZE:
        return None
    return NoteSignature(name, raw[:KEY_ID_SIZE], raw[KEY_ID_SIZE:])


# --- checkpoints ---


@dataclass(frozen=True)
class Checkpoint:
    """A log's tree head as c2sp.org/tlog-checkpoint writes it: origin, tree size, root hash,
    and optional extension lines (opaque; the spec advises against them)."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.origin, str) or not self.origin or _has_control(self.origin):
            raise CheckpointError("a checkpoint's origin is one non-empty line")
        if (
            not isinstance(self.size, int)
            or isinstance(self.size, bool)
            or not 0 <= self.size <= MAX_TREE_SIZE
        ):
            raise CheckpointError(f"a checkpoint's size is an integer from 0 to {MAX_TREE_SIZE}")
        if not isinstance(self.root_hash, bytes) or len(self.root_hash) != ROOT_HASH_SIZE:
            raise CheckpointError(f"a checkpoint's root hash is {ROOT_HASH_SIZE} bytes")
        for line in self.extensions:
            if not isinstance(line, str) or not line or _has_control(line):
                raise CheckpointError("a checkpoint's extension lines are non-empty lines")

    def text(self) -> str:
        """The note text: origin, size in decimal, base64 root, extension lines, each + newline."""
        lines = [self.origin, str(self.size), _b64encode(self.root_hash), *self.extensions]
        return "".join(line + "\n" for line in lines)


def _has_control(text: str) -> bool:
    return any(c < " " for c in text)


def parse_checkpoint(text: str) -> tuple[Checkpoint | None, str | None]:
    """A checkpoint's note text to a `Checkpoint`, strictly: (checkpoint, None) or (None,
    problem). The text alone proves nothing: open the signed note first (`open_checkpoint`)."""
    if not isinstance(text, str) or not text.endswith("\n"):
        return None, "a checkpoint's text ends with a newline"
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        return None, "a checkpoint has an origin line, a size line and a root hash line"
    origin, size_text, root_text, *extensions = lines
    if not origin:
        return None, "the checkpoint's origin line is empty"
    if not _DECIMAL.fullmatch(size_text):
        return None, (
            f"the checkpoint's size {size_text!r} is not a decimal number without leading zeros"
        )
    size = int(size_text)
    if size > MAX_TREE_SIZE:
        return None, f"the checkpoint's size {size_text} is larger than any log"
    root_hash = _b64decode(root_text)
    if root_hash is None or _b64encode(root_hash) != root_text:
        return None, "the checkpoint's root hash line is not canonical base64"
    if len(root_hash) != ROOT_HASH_SIZE:
        return None, f"the checkpoint's root hash is {len(root_hash)} bytes, not {ROOT_HASH_SIZE}"
    if any(not line for line in extensions):
        return None, "the checkpoint has an empty extension line"
    if _has_control(text.replace("\n", "")):
        return None, "the checkpoint holds a control character"
    return Checkpoint(origin, size, root_hash, tuple(extensions)), None


def sign_checkpoint(checkpoint: Checkpoint, *signers: Signer) -> str:
    """The checkpoint as a signed note, ready to store, publish or print."""
    return sign_note(checkpoint.text(), *signers)


def open_checkpoint(
    message: bytes | str, verifiers: Iterable[Verifier], origin: str | None = None
) -> tuple[Checkpoint | None, str | None]:
    """Verify a signed checkpoint with the trusted keys, then parse it: (checkpoint, None) or
    (None, problem). With `origin`, a checkpoint of another log is refused too."""
    note, problem = open_note(message, verifiers)
    if note is None:
        return None, problem
    checkpoint, problem = parse_checkpoint(note.text)
    if checkpoint is None:
        return None, problem
    if origin is not None and checkpoint.origin != origin:
        return None, f"the checkpoint is of log {checkpoint.origin!r}, not {origin!r}"
    return checkpoint, None

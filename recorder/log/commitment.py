"""Per-value commitments: what lets a redacted record still verify against the signed tree.

A record's chain hash covers its raw bytes, so a bundle that withholds a secret cannot recompute
it: before commitments, a redacted record's hash was attested, and its visible part could be
edited unnoticed by anyone who did not also hold the signed manifest. Now a tree leaf (from the
store's `commitment_keys.first_leaf` on) is `SHA256(0x00 || chain hash || C)`, where C commits to
the record's header and to each of its values with a salted hash, as SD-JWT commits to each
claim with a disclosure:

- the raw bytes are cut into *tokens* (JSON strings and bare words: numbers, literals, any run of
  text) and the *skeleton* between them (whitespace, brackets, commas, colons), by a lexical
  rule that takes any bytes, JSON or not, in linear time (`tokens`);
- token i has the salt `s_i = SHA256(r || i)`, where r is the record's salt, made from a key kept
  in the store (`record_salt`), and the digest `d_i = SHA256(s_i || token bytes)`;
- C hashes the header, the skeleton and the digests in order (`commitment`).

A bundle row discloses r for a record shown whole (the verifier recomputes everything from the
raw) and, for a redacted one, the salt of every token it shows and only the digest of every token
it withholds, which appears as a marker (`redact`): the leaf is recomputed from what is shown, so
an edit of any shown byte, the header or the order fails the inclusion proof, while a withheld
value cannot be guessed from its digest without its salt, which stays in the store. docs/trust.md
("Commitments") is the rule a third party implements.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import struct
from collections.abc import Sequence
from operator import itemgetter
from typing import NamedTuple

from blackbox.recorder.log.chain import ChainRecord, _prefix
from blackbox.recorder.log.model import NewEvent, StoredEvent

DOMAIN = b"mcp-blackbox/commit/v1\x00"
KEY_SIZE = 32
# One marker, as the redactor writes it (`[redacted:<16 hex of the secret's keyed fingerprint>]`):
# a withheld token shows as a JSON string of one or more of them and nothing else.
MARKER = rb"\[redacted:[0-9a-f]{16}\]"
# The lexical rule, as docs/trust.md writes it: a string token runs from a quote to the next quote
# no backslash escapes, or to the end of the raw bytes when there is none; a bare token is a run
# of bytes that are neither JSON whitespace, structural nor a quote; a string followed by a colon
# is an object key (skeleton, shown always, never hashed on its own) unless it is a marker (where
# a withheld value stood). The page states it as one token pattern with the keys taken out after;
# here it is one pattern of (skeleton, token) pairs, so that a frame is cut in one `findall` in C
# rather than a Python step per match (half the time, docs/performance.md): the skeleton
# group takes whitespace, structural bytes and keys, the token group a string or bare token, or
# the end. tests/test_independent_verifier.py holds it to the page's pattern on random bytes.
# Every quantifier is possessive, and a string always matches where a quote is, so no input makes
# the scan go back over what it passed (an unterminated string would, byte after byte).
_PAIR = re.compile(
    rb"((?:[ \t\n\r{}\[\],:]++"  # skeleton: whitespace and structural bytes,
    rb'|"(?!(?:' + MARKER + rb')+")[^"\\]*+(?:\\.[^"\\]*+)*+"[ \t\n\r]*+:)*+)'  # keys
    rb'("[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)'  # then a string token,
    rb'|[^ \t\n\r{}\[\],:"]++'  # a bare token,
    rb"|\Z)",  # or the end
    re.S,
)
_MARKERS = re.compile(rb'"(?:' + MARKER + rb')+"')
_HEADER = struct.Struct(">qqqq")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_sha256 = hashlib.sha256
_ENTRIES = ("salt", "digest")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
# uint32 i for the first token indexes, packed once: most frames have a few dozen tokens.
_INDEX = [_U32.pack(i) for i in range(1024)]


# A record as any layer holds it: the fields C covers are the chain's (`chain.canonical`) but
# `seq`, which the leaf must cover itself (a redacted record's chain hash cannot be recomputed).
Record = NewEvent | StoredEvent | ChainRecord


class Split(NamedTuple):
    """Raw bytes as skeleton and tokens: `skeleton` has one more element than `tokens`
    (raw = skeleton[0] + tokens[0] + skeleton[1] + ... + tokens[-1] + skeleton[-1])."""

    skeleton: list[bytes]
    tokens: list[bytes]

    def joined(self, tokens: Sequence[bytes] | None = None) -> bytes:
        """The bytes again, with `tokens` in place of the split's own when given."""
        parts = self.tokens if tokens is None else tokens
        return (
            b"".join(k + t for k, t in zip(self.skeleton, parts, strict=False))
            + (self.skeleton[-1])
        )


def tokens(raw: bytes) -> Split:
    """Cut raw bytes into skeleton and tokens (any bytes: a frame that is not JSON too)."""
    pairs = _PAIR.findall(raw)
    # The last pair is the trailing skeleton and the end; when that skeleton is not empty, the
    # scan matches the end once more, empty.
    if len(pairs) > 1 and not pairs[-2][1]:
        pairs.pop()
    # Not `zip(*pairs)`: a call with one argument a pair took 0.5 s for a frame of 500,000 tokens.
    found = list(map(_SECOND, pairs))
    found.pop()  # the end's empty token
    return Split(list(map(_FIRST, pairs)), found)


def record_salt(key: bytes, session_id: str, seq: int) -> bytes:
    """r: the record's salt, HMAC-SHA256 under the store's commitment key of its session id and
    seq. Only the store can make it; disclosing one record's r discloses nothing of another's."""
    message = session_id.encode("utf-8", "surrogatepass") + b"\x00" + _U64.pack(seq)
    return hmac.digest(key, message, "sha256")


def token_salt(r: bytes, index: int) -> bytes:
    """s_i = SHA256(r || uint32 i): token i's salt, which a bundle discloses for a shown token."""
    return _sha256(r + _U32.pack(index)).digest()


def token_digest(salt: bytes, token: bytes) -> bytes:
    """d_i = SHA256(s_i || token bytes)."""
    return _sha256(salt + token).digest()


def commitment(record: Record, split: Split, digests: Sequence[bytes]) -> bytes:
    """C = SHA256(domain || the record's header || uint32 n || each skeleton part as uint64
    length || bytes || d_0 ... d_(n-1))."""
    size = -1 if record.raw_size is None else record.raw_size
    pack = _U64.pack
    return _sha256(
        b"".join(
            (
                DOMAIN,
                _prefix(record.session_id, record.kind, record.direction),
                _HEADER.pack(record.seq, record.wall_ns, record.mono_ns, size),
                _U32.pack(len(digests)),
                *(pack(len(part)) + part for part in split.skeleton),
                *digests,
            )
        )
    ).digest()


def commit(record: Record, r: bytes) -> bytes:
    """C of a record shown whole (its raw bytes): every token's digest from its salt."""
    split = tokens(record.raw)
    count, sha256 = len(split.tokens), _sha256
    index = _INDEX if count <= len(_INDEX) else [_U32.pack(i) for i in range(count)]
    # token_digest(token_salt(r, i), token), inlined: this runs for every token of every record.
    digests = [
        sha256(sha256(r + index[i]).digest() + token).digest()
        for i, token in enumerate(split.tokens)
    ]
    return commitment(record, split, digests)


def leaf_input(chain_hash: bytes, c: bytes | None) -> bytes:
    """d(i): the chain hash, then C for a committed leaf (64 bytes); the chain hash alone for a
    leaf sequenced before the store had a commitment key (`c` None or empty)."""
    return chain_hash + c if c else chain_hash


# -- redacted rows ---------------------------------------------------------------------------


class Disclosure(NamedTuple):
    """A redacted record as a bundle shows it: the raw with each withheld token replaced by a
    marker, and per token of it either the salt (shown) or the digest (withheld)."""

    raw: bytes
    entries: list[tuple[str, bytes]]  # ("salt", s_i) or ("digest", d_i), one per token

    def as_json(self) -> list[list[str]]:
        return [[kind, value.hex()] for kind, value in self.entries]


def disclose(raw: bytes, r: bytes, withheld: set[int], markers: dict[int, str]) -> Disclosure:
    """The bundle's view of a record whose tokens `withheld` are hidden: each becomes the JSON
    string `markers[i]` (one or more `[redacted:<16 hex>]`), the others stay byte for byte."""
    split = tokens(raw)
    out = bytearray(split.skeleton[0])
    entries: list[tuple[str, bytes]] = []
    for i, token in enumerate(split.tokens):
        salt = token_salt(r, i)
        if i in withheld:
            out += b'"' + markers[i].encode("ascii") + b'"'
            entries.append(("digest", token_digest(salt, token)))
        else:
            out += token
            entries.append(("salt", salt))
        out += split.skeleton[i + 1]
    return Disclosure(bytes(out), entries)


class NotCommitted(ValueError):
    """A redacted row whose shown raw and disclosure do not fit together."""


def commitment_of_disclosure(shown: Record, entries: Sequence[Sequence[str]]) -> bytes:
    """C recomputed from a redacted row (`shown`: the record with the raw bytes the row shows):
    NotCommitted when the entries do not match the shown tokens one for one, or a withheld token
    is not a marker."""
    split = tokens(shown.raw)
    if len(entries) != len(split.tokens):
        raise NotCommitted(
            f"the row shows {len(split.tokens)} token(s) but discloses {len(entries)}"
        )
    digests = []
    for i, (entry, token) in enumerate(zip(entries, split.tokens, strict=True)):
        if not isinstance(entry, list | tuple) or len(entry) != 2 or entry[0] not in _ENTRIES:
            raise NotCommitted(f"disclosure {i} is neither a salt nor a digest")
        try:
            value = bytes.fromhex(entry[1])
        except (TypeError, ValueError):
            raise NotCommitted(f"disclosure {i} is not hex") from None
        if len(value) != 32:
            raise NotCommitted(f"disclosure {i} is not 32 bytes")
        if entry[0] == "salt":
            digests.append(token_digest(value, token))
        elif _MARKERS.fullmatch(token) is None:
            raise NotCommitted(f"token {i} is withheld but shown as {token[:40]!r}, not a marker")
        else:
            digests.append(value)
    return commitment(shown, split, digests)

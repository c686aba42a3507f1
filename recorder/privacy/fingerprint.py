"""Keyed fingerprints of secrets: the one place a secret becomes a stand-in that can be compared.

A plain hash of a short or guessable secret (a PIN, a dictionary password) is recovered by hashing
the candidates, so a fingerprint is HMAC-SHA256 under a key that is kept out of the store: a file
per store in the user's data directory (mode 0600, created on first use). The library never looks
the key up itself: callers (the CLI) pass the key, or a path made by `store_key_path`. Without a
key, `process_key()` is a random one: fingerprints then match only within one process.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from functools import lru_cache
from pathlib import Path

from blackbox.recorder import BlackboxError, create_private


class FingerprintKeyError(BlackboxError):
    """A fingerprint key file that cannot be read or created."""


def fingerprint(key: bytes, value: str | bytes, digits: int = 16) -> str:
    """The first `digits` hex digits of HMAC-SHA256(key, value): equal values, equal
    fingerprints under one key; nothing to learn about the value without the key."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return hmac.new(key, data, hashlib.sha256).hexdigest()[:digits]


@lru_cache(maxsize=1)
def process_key() -> bytes:
    """A random key for this process: for callers given no key (fingerprints still cannot be
    recovered by hashing candidates, and match within the process)."""
    return secrets.token_bytes(32)


def store_key_path(data_dir: Path, store_url: str) -> Path:
    """Where the fingerprint key of the store at `store_url` lives: one file per store, named by
    a hash of its URL without credentials, so two stores never share a key."""
    from blackbox.recorder.store import public_url  # only paid for by callers that name a store

    try:
        shown = public_url(store_url)  # the spelling a journal's store mark uses too
    except BlackboxError:
        shown = store_url
    if "@" in shown:  # the user name is not part of which store it is
        scheme, _, rest = shown.partition("://")
        shown = f"{scheme}://{rest.rpartition('@')[2]}"
    store_id = hashlib.sha256(shown.encode()).hexdigest()[:16]
    return Path(data_dir) / "keys" / f"fingerprint-{store_id}.key"


def load_or_create_key(path: Path) -> bytes:
    """The key in `path`; a new random one (written with mode 0600) if missing."""
    path = Path(path).expanduser()
    try:
        data = path.read_bytes().strip()
        if data:
            return data
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise FingerprintKeyError(f"cannot read fingerprint key file {path}: {exc}") from None
    try:
        data = secrets.token_hex(32).encode()
        # Created 0600 in one step: never readable by others, not even for a moment. keys/ and
        # a data directory made for it are 0700, and removed again if the key cannot be made.
        fd = create_private(path)
        with os.fdopen(fd, "wb") as out:
            out.write(data + b"\n")
    except FileExistsError:
        return path.read_bytes().strip()
    except OSError as exc:
        raise FingerprintKeyError(f"cannot create fingerprint key file {path}: {exc}") from None
    return data

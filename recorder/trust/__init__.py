"""Trust: proving the log to someone who does not trust the database.

Signed checkpoints in the C2SP formats (`checkpoint`), the signing key on disk (`keys`), signing
what the store committed (`signing`), and checking the log against checkpoints or proving a record
is in it (`logproof`). The incremental tree these sign lives in the store (`store.tree`), because
retention changes it in the same transaction as the records; its hashes are `log.merkle`.
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.trust import keys as keys
    from blackbox.recorder.trust import logproof as logproof
    from blackbox.recorder.trust import proofcheck as proofcheck
    from blackbox.recorder.trust import removal_note as removal_note
    from blackbox.recorder.trust import signing as signing
    from blackbox.recorder.trust.checkpoint import Checkpoint as Checkpoint
    from blackbox.recorder.trust.checkpoint import Signer as Signer
    from blackbox.recorder.trust.checkpoint import Verifier as Verifier
    from blackbox.recorder.trust.checkpoint import open_checkpoint as open_checkpoint
    from blackbox.recorder.trust.checkpoint import open_note as open_note
    from blackbox.recorder.trust.checkpoint import sign_note as sign_note
    from blackbox.recorder.trust.signing import AutoCheckpoints as AutoCheckpoints
    from blackbox.recorder.trust.signing import note_checkpoint as note_checkpoint
    from blackbox.recorder.trust.signing import split_notes as split_notes

_FACE: dict[str, tuple[str, str | None]] = {
    "AutoCheckpoints": ("blackbox.recorder.trust.signing", "AutoCheckpoints"),
    "Checkpoint": ("blackbox.recorder.trust.checkpoint", "Checkpoint"),
    "Signer": ("blackbox.recorder.trust.checkpoint", "Signer"),
    "Verifier": ("blackbox.recorder.trust.checkpoint", "Verifier"),
    "keys": ("blackbox.recorder.trust.keys", None),
    "logproof": ("blackbox.recorder.trust.logproof", None),
    "note_checkpoint": ("blackbox.recorder.trust.signing", "note_checkpoint"),
    "open_checkpoint": ("blackbox.recorder.trust.checkpoint", "open_checkpoint"),
    "open_note": ("blackbox.recorder.trust.checkpoint", "open_note"),
    "proofcheck": ("blackbox.recorder.trust.proofcheck", None),
    "removal_note": ("blackbox.recorder.trust.removal_note", None),
    "sign_note": ("blackbox.recorder.trust.checkpoint", "sign_note"),
    "signing": ("blackbox.recorder.trust.signing", None),
    "split_notes": ("blackbox.recorder.trust.signing", "split_notes"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

"""Privacy: secrets replaced before a record leaves the store, by every way out.

Redaction rules (`redact`) and the keyed fingerprints that stand in for a secret (`fingerprint`).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.privacy import fingerprint as fingerprint
    from blackbox.recorder.privacy.fingerprint import load_or_create_key as load_or_create_key
    from blackbox.recorder.privacy.fingerprint import store_key_path as store_key_path
    from blackbox.recorder.privacy.redact import Redactor as Redactor

_FACE: dict[str, tuple[str, str | None]] = {
    "Redactor": ("blackbox.recorder.privacy.redact", "Redactor"),
    "fingerprint": ("blackbox.recorder.privacy.fingerprint", None),
    "load_or_create_key": ("blackbox.recorder.privacy.fingerprint", "load_or_create_key"),
    "store_key_path": ("blackbox.recorder.privacy.fingerprint", "store_key_path"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

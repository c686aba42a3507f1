"""Compliance: what an auditor receives, and what the store may forget.

Export bundles (`export`) and their offline check (`bundle_check`, `bundle_proof`), the signed
manifest that makes a bundle complete under the log's key (`bundle_sign`), reading a bundle back
(`bundle_read`), and retention with legal holds, run by hand or on a timer (`retention`,
`retention_schedule`).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.compliance.bundle_check import verify_export as verify_export
    from blackbox.recorder.compliance.bundle_read import (
        read_bundle_sessions as read_bundle_sessions,
    )
    from blackbox.recorder.compliance.bundle_read import (
        select_bundle_sessions as select_bundle_sessions,
    )
    from blackbox.recorder.compliance.export import FORMATS as FORMATS
    from blackbox.recorder.compliance.export import ExportProgress as ExportProgress
    from blackbox.recorder.compliance.export import Selection as Selection
    from blackbox.recorder.compliance.export import export_bundle as export_bundle
    from blackbox.recorder.compliance.retention import DEFAULT_IDLE_NS as DEFAULT_IDLE_NS
    from blackbox.recorder.compliance.retention import add_hold as add_hold
    from blackbox.recorder.compliance.retention import apply_retention as apply_retention
    from blackbox.recorder.compliance.retention import list_holds as list_holds
    from blackbox.recorder.compliance.retention import remove_hold as remove_hold
    from blackbox.recorder.compliance.retention_schedule import apply_argv as apply_argv
    from blackbox.recorder.compliance.retention_schedule import has_systemd as has_systemd
    from blackbox.recorder.compliance.retention_schedule import install_systemd as install_systemd
    from blackbox.recorder.compliance.retention_schedule import make_schedule as make_schedule
    from blackbox.recorder.compliance.retention_schedule import retention_status as retention_status
    from blackbox.recorder.compliance.retention_schedule import systemd_user_dir as systemd_user_dir
    from blackbox.recorder.compliance.retention_schedule import write_last_run as write_last_run
    from blackbox.recorder.compliance.withhold import disclose as disclose

_FACE: dict[str, tuple[str, str | None]] = {
    "DEFAULT_IDLE_NS": ("blackbox.recorder.compliance.retention", "DEFAULT_IDLE_NS"),
    "ExportProgress": ("blackbox.recorder.compliance.export", "ExportProgress"),
    "FORMATS": ("blackbox.recorder.compliance.export", "FORMATS"),
    "Selection": ("blackbox.recorder.compliance.export", "Selection"),
    "add_hold": ("blackbox.recorder.compliance.retention", "add_hold"),
    "apply_argv": ("blackbox.recorder.compliance.retention_schedule", "apply_argv"),
    "apply_retention": ("blackbox.recorder.compliance.retention", "apply_retention"),
    "disclose": ("blackbox.recorder.compliance.withhold", "disclose"),
    "export_bundle": ("blackbox.recorder.compliance.export", "export_bundle"),
    "has_systemd": ("blackbox.recorder.compliance.retention_schedule", "has_systemd"),
    "install_systemd": ("blackbox.recorder.compliance.retention_schedule", "install_systemd"),
    "list_holds": ("blackbox.recorder.compliance.retention", "list_holds"),
    "make_schedule": ("blackbox.recorder.compliance.retention_schedule", "make_schedule"),
    "read_bundle_sessions": ("blackbox.recorder.compliance.bundle_read", "read_bundle_sessions"),
    "remove_hold": ("blackbox.recorder.compliance.retention", "remove_hold"),
    "retention_status": ("blackbox.recorder.compliance.retention_schedule", "retention_status"),
    "select_bundle_sessions": (
        "blackbox.recorder.compliance.bundle_read",
        "select_bundle_sessions",
    ),
    "systemd_user_dir": ("blackbox.recorder.compliance.retention_schedule", "systemd_user_dir"),
    "verify_export": ("blackbox.recorder.compliance.bundle_check", "verify_export"),
    "write_last_run": ("blackbox.recorder.compliance.retention_schedule", "write_last_run"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

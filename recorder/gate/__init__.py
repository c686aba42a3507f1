"""The gate: what a tap lets through, and the decisions it records.

Policy rules and their file (`policy_rules`), the gate itself (`policy`), live reload
(`policy_reload`), tool pins and drift (`pinning`, `tooldefs`, `tool_watch`), permission decisions
as log records (`decisions`) and the host hooks that report the host's own decisions (`hooks`).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.recorder.gate import pinning as pinning
    from blackbox.recorder.gate.decisions import DECIDED_BY as DECIDED_BY
    from blackbox.recorder.gate.decisions import DECISIONS as DECISIONS
    from blackbox.recorder.gate.decisions import FINALS as FINALS
    from blackbox.recorder.gate.decisions import SOURCES as SOURCES
    from blackbox.recorder.gate.decisions import args_fingerprint as args_fingerprint
    from blackbox.recorder.gate.decisions import record_decision as record_decision
    from blackbox.recorder.gate.hooks import MODES as MODES
    from blackbox.recorder.gate.hooks import HookError as HookError
    from blackbox.recorder.gate.hooks import run_hook as run_hook
    from blackbox.recorder.gate.pinning import approve as approve
    from blackbox.recorder.gate.pinning import pinner_of as pinner_of
    from blackbox.recorder.gate.policy import Policy as Policy
    from blackbox.recorder.gate.policy import PolicyError as PolicyError
    from blackbox.recorder.gate.policy import evaluate_session as evaluate_session
    from blackbox.recorder.gate.policy_reload import LivePolicy as LivePolicy
    from blackbox.recorder.gate.policy_reload import policy_history as policy_history
    from blackbox.recorder.gate.tool_watch import OwnSession as OwnSession
    from blackbox.recorder.gate.tool_watch import ToolWatch as ToolWatch
    from blackbox.recorder.gate.tool_watch import watch_name as watch_name

_FACE: dict[str, tuple[str, str | None]] = {
    "DECIDED_BY": ("blackbox.recorder.gate.decisions", "DECIDED_BY"),
    "DECISIONS": ("blackbox.recorder.gate.decisions", "DECISIONS"),
    "FINALS": ("blackbox.recorder.gate.decisions", "FINALS"),
    "HookError": ("blackbox.recorder.gate.hooks", "HookError"),
    "LivePolicy": ("blackbox.recorder.gate.policy_reload", "LivePolicy"),
    "MODES": ("blackbox.recorder.gate.hooks", "MODES"),
    "OwnSession": ("blackbox.recorder.gate.tool_watch", "OwnSession"),
    "Policy": ("blackbox.recorder.gate.policy", "Policy"),
    "PolicyError": ("blackbox.recorder.gate.policy", "PolicyError"),
    "SOURCES": ("blackbox.recorder.gate.decisions", "SOURCES"),
    "ToolWatch": ("blackbox.recorder.gate.tool_watch", "ToolWatch"),
    "approve": ("blackbox.recorder.gate.pinning", "approve"),
    "args_fingerprint": ("blackbox.recorder.gate.decisions", "args_fingerprint"),
    "evaluate_session": ("blackbox.recorder.gate.policy", "evaluate_session"),
    "pinner_of": ("blackbox.recorder.gate.pinning", "pinner_of"),
    "pinning": ("blackbox.recorder.gate.pinning", None),
    "policy_history": ("blackbox.recorder.gate.policy_reload", "policy_history"),
    "record_decision": ("blackbox.recorder.gate.decisions", "record_decision"),
    "run_hook": ("blackbox.recorder.gate.hooks", "run_hook"),
    "watch_name": ("blackbox.recorder.gate.tool_watch", "watch_name"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

"""Replay: re-drive a recorded session against a server and explain every divergence."""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.replay.era_bridge import ERAS as ERAS
    from blackbox.replay.era_bridge import bridged_recording as bridged_recording
    from blackbox.replay.inject import parse_injection as parse_injection
    from blackbox.replay.minimize import minimize_session as minimize_session
    from blackbox.replay.mock_server import serve_session as serve_session
    from blackbox.replay.recording import Recording as Recording
    from blackbox.replay.recording import build_recording as build_recording
    from blackbox.replay.replayer import ReplayOptions as ReplayOptions
    from blackbox.replay.replayer import default_target as default_target
    from blackbox.replay.replayer import replay_recording as replay_recording
    from blackbox.replay.replayer import replay_session as replay_session
    from blackbox.replay.report import render_json as render_json
    from blackbox.replay.report import render_text as render_text
    from blackbox.replay.results import ReplayResult as ReplayResult
    from blackbox.replay.safety import RiskyCall as RiskyCall
    from blackbox.replay.safety import check_replay_safety as check_replay_safety
    from blackbox.replay.safety import decide as decide
    from blackbox.replay.side_by_side import calls_at_risk as calls_at_risk
    from blackbox.replay.side_by_side import replay_side_by_side as replay_side_by_side
    from blackbox.replay.suite import SessionOutcome as SessionOutcome
    from blackbox.replay.suite import list_suites as list_suites
    from blackbox.replay.suite import load_suite as load_suite
    from blackbox.replay.suite import run_suite as run_suite
    from blackbox.replay.suite import save_suite as save_suite
    from blackbox.replay.suite import select_sessions as select_sessions
    from blackbox.replay.suite_report import redacted as redacted
    from blackbox.replay.suite_report import render as render
    from blackbox.replay.suite_report import summary_line as summary_line
    from blackbox.replay.suite_report import write_junit as write_junit

_FACE: dict[str, tuple[str, str | None]] = {
    "ERAS": ("blackbox.replay.era_bridge", "ERAS"),
    "Recording": ("blackbox.replay.recording", "Recording"),
    "ReplayOptions": ("blackbox.replay.replayer", "ReplayOptions"),
    "ReplayResult": ("blackbox.replay.results", "ReplayResult"),
    "RiskyCall": ("blackbox.replay.safety", "RiskyCall"),
    "SessionOutcome": ("blackbox.replay.suite", "SessionOutcome"),
    "bridged_recording": ("blackbox.replay.era_bridge", "bridged_recording"),
    "build_recording": ("blackbox.replay.recording", "build_recording"),
    "calls_at_risk": ("blackbox.replay.side_by_side", "calls_at_risk"),
    "check_replay_safety": ("blackbox.replay.safety", "check_replay_safety"),
    "decide": ("blackbox.replay.safety", "decide"),
    "default_target": ("blackbox.replay.replayer", "default_target"),
    "list_suites": ("blackbox.replay.suite", "list_suites"),
    "load_suite": ("blackbox.replay.suite", "load_suite"),
    "minimize_session": ("blackbox.replay.minimize", "minimize_session"),
    "parse_injection": ("blackbox.replay.inject", "parse_injection"),
    "redacted": ("blackbox.replay.suite_report", "redacted"),
    "render": ("blackbox.replay.suite_report", "render"),
    "render_json": ("blackbox.replay.report", "render_json"),
    "render_text": ("blackbox.replay.report", "render_text"),
    "replay_recording": ("blackbox.replay.replayer", "replay_recording"),
    "replay_session": ("blackbox.replay.replayer", "replay_session"),
    "replay_side_by_side": ("blackbox.replay.side_by_side", "replay_side_by_side"),
    "run_suite": ("blackbox.replay.suite", "run_suite"),
    "save_suite": ("blackbox.replay.suite", "save_suite"),
    "select_sessions": ("blackbox.replay.suite", "select_sessions"),
    "serve_session": ("blackbox.replay.mock_server", "serve_session"),
    "summary_line": ("blackbox.replay.suite_report", "summary_line"),
    "write_junit": ("blackbox.replay.suite_report", "write_junit"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

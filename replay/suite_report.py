"""A suite run as CI reads it: one line per session and a summary, JSON, GitHub Actions
annotations, and JUnit XML (the format every CI system and test dashboard imports).

JUnit: one `testcase` per session, named after the session's name and short id; a diverged
session has a `failure` whose message is the first divergence and whose body is the whole
explanation; a session that could not be replayed has an `error`. Each testcase's `properties`
carry what the recording held, as `blackbox sessions` counts it (`recorded.calls`,
`recorded.errors`, ..., `recorded.outcome`).

Every text a report carries came from recorded and replayed payloads; `redacted` passes it
through the redactor the command was given (the one `export` and `show` use) before any of it
is rendered.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Protocol

from blackbox.replay.suite import SessionOutcome, SuiteResult

JUNIT_SUITE = "blackbox replay"
JUNIT_CLASS = "blackbox.replay"


class Redaction(Protocol):
    """What a suite report asks of a redactor (`Redactor` of the privacy context)."""

    def redact_text(self, text: str) -> str: ...

    def redact_value(self, obj: object) -> object: ...


def redacted(result: SuiteResult, redactor: Redaction) -> SuiteResult:
    """The result with every session's name, first divergence, explanation and JSON report
    passed through `redactor`: what every rendering (table, JSON, GitHub, JUnit) prints."""
    text = redactor.redact_text

    def one(o: SessionOutcome) -> SessionOutcome:
        report = redactor.redact_value(o.report) if o.report is not None else None
        return dataclasses.replace(
            o,
            name=text(o.name) if o.name else o.name,
            first=text(o.first),
            explanation=text(o.explanation),
            report=report if isinstance(report, dict) else None,
        )

    # `counts` is made again from the outcomes (their statuses are unchanged).
    return dataclasses.replace(result, outcomes=[one(o) for o in result.outcomes], counts={})


def _line(o: SessionOutcome) -> str:
    mark = {"equivalent": "ok  ", "error": "ERR ", "diverged": "FAIL"}.get(o.status, "FAIL")
    text = f"{mark} {o.short_id}  {o.name or '-':<24} {o.status:<12} {o.duration_s:6.2f}s"
    return f"{text}  {o.first}" if o.first else text


def summary_line(result: SuiteResult) -> str:
    parts = [f"{n} {status}" for status, n in sorted(result.counts.items())]
    return (
        f"{len(result.outcomes)} session(s): {', '.join(parts)} "
        f"in {result.duration_s:.1f} s ({result.jobs} job(s))"
    )


def render_table(result: SuiteResult) -> str:
    lines = [_line(o) for o in result.outcomes]
    lines.append(summary_line(result))
    return "\n".join(lines)


def as_json(result: SuiteResult) -> dict:
    return {
        "exit_code": result.exit_code,
        "sessions": len(result.outcomes),
        "counts": result.counts,
        "jobs": result.jobs,
        "target": result.target,
        "duration_s": round(result.duration_s, 3),
        "results": [
            {
                "session": o.session_id,
                "handle": o.short_id,
                "name": o.name,
                "status": o.status,
                "first_divergence": o.first or None,
                "duration_s": round(o.duration_s, 3),
                "replay": o.replay_id,
                "report": o.report,
                "error": o.explanation if o.status == "error" else None,
                "recorded": o.recorded,
            }
            for o in result.outcomes
        ],
    }


def render_json(result: SuiteResult) -> str:
    return json.dumps(as_json(result), indent=2, default=str)


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render_github(result: SuiteResult) -> str:
    """GitHub Actions workflow commands: an error annotation per failed session (title: the
    session, message: the whole explanation), a notice with the summary."""
    lines = []
    for o in result.outcomes:
        if o.passed:
            continue
        title = f"replay {o.status}: {o.title}"
        lines.append(f"::error title={_escape_property(title)}::{_escape_data(o.explanation)}")
    level = "notice" if result.exit_code == 0 else "error"
    lines.append(f"::{level} title=blackbox replay::{_escape_data(summary_line(result))}")
    return "\n".join(lines)


def junit_tree(result: SuiteResult) -> ET.ElementTree:
    failures = sum(1 for o in result.outcomes if not o.passed and o.status != "error")
    errors = sum(1 for o in result.outcomes if o.status == "error")
    root = ET.Element("testsuites")
    suite = ET.SubElement(
        root,
        "testsuite",
        name=JUNIT_SUITE,
        tests=str(len(result.outcomes)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=f"{result.duration_s:.3f}",
    )
    for o in result.outcomes:
        case = ET.SubElement(
            suite, "testcase", classname=JUNIT_CLASS, name=o.title, time=f"{o.duration_s:.3f}"
        )
        if o.recorded:
            # Prefixed: a dashboard shows a property beside the test's own result, and the
            # recording's `outcome` is not the replay's verdict.
            props = ET.SubElement(case, "properties")
            for key, value in o.recorded.items():
                ET.SubElement(props, "property", name=f"recorded.{key}", value=str(value))
        if o.status == "error":
            ET.SubElement(case, "error", message=o.first, type="replay_error").text = o.explanation
        elif not o.passed:
            failure = ET.SubElement(case, "failure", message=o.first, type=o.status)
            failure.text = o.explanation
        if o.replay_id:
            ET.SubElement(case, "system-out").text = f"replay stored as session {o.replay_id}"
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(result: SuiteResult, path: Path) -> None:
    """Write the JUnit XML file (UTF-8, with an XML declaration)."""
    junit_tree(result).write(path, encoding="utf-8", xml_declaration=True)


def render(result: SuiteResult, fmt: str) -> str:
    if fmt == "json":
        return render_json(result)
    if fmt == "github":
        return render_github(result)
    return render_table(result)

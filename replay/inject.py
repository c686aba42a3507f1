"""Fault injection specs for `blackbox replay --inject`: reproduce transport faults on demand.

A spec is `ACTION@TARGET[:MS]`, where TARGET is a step number or a method name:

    delay@tools/call:250   wait 250 ms before sending every tools/call
    delay@3:1000           wait one second before step 3
    drop@4                 do not send step 4 (drop@tools/list drops every tools/list)
    corrupt@2              send step 2 truncated, as invalid JSON
    close-stdin@5          close the server's input after step 5 (HTTP: stop sending)
    cut@5                  cut the connection after step 5 (stdio: kill the server)
"""

from __future__ import annotations

from dataclasses import dataclass

from blackbox.replay.recording import ReplayError

ACTIONS = ("delay", "drop", "corrupt", "close-stdin", "cut")


@dataclass(frozen=True, slots=True)
class Injection:
    action: str
    step: int | None = None
    method: str | None = None
    delay_ms: float = 0.0

    def applies(self, step_number: int, method: str | None) -> bool:
        if self.step is not None:
            return step_number == self.step
        return method is not None and method == self.method

    def describe(self) -> str:
        target = f"step {self.step}" if self.step is not None else self.method
        extra = f" {self.delay_ms:g} ms" if self.action == "delay" else ""
        return f"{self.action}{extra} at {target}"


def parse_injection(spec: str) -> Injection:
    """Parse one --inject spec; a bad one is a one-line error naming the accepted forms."""
    action, sep, rest = spec.strip().partition("@")
    if not sep or action not in ACTIONS or not rest:
        raise ReplayError(
            f"bad --inject {spec!r}: use ACTION@STEP or ACTION@METHOD with ACTION one of "
            f"{', '.join(ACTIONS)} (e.g. delay@tools/call:250, drop@4, cut@5)"
        )
    target, _, arg = rest.partition(":")
    delay_ms = 0.0
    if action == "delay":
        try:
            delay_ms = float(arg.removesuffix("ms"))
        except ValueError:
            raise ReplayError(
                f"bad --inject {spec!r}: delay needs milliseconds, e.g. delay@3:250"
            ) from None
        if delay_ms < 0:
            raise ReplayError(f"bad --inject {spec!r}: a delay cannot be negative")
    elif arg:
        raise ReplayError(f"bad --inject {spec!r}: only delay takes a ':MS' argument")
    if target.isdigit():
        if int(target) < 1:
            raise ReplayError(f"bad --inject {spec!r}: steps are numbered from 1")
        return Injection(action, step=int(target), delay_ms=delay_ms)
    if action in ("close-stdin", "cut"):
        raise ReplayError(f"bad --inject {spec!r}: {action} takes a step number, e.g. {action}@5")
    return Injection(action, method=target, delay_ms=delay_ms)

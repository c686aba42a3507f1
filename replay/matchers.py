"""Matching a live request to a recorded one, vcrpy style: small predicates over two messages.

Used in two places: the replayer answers a server's own request (roots/list, sampling,
elicitation) with the recorded answer to the matching recorded request, and the mock server
answers a client's request with the recorded response to the matching recorded request. Ids and
`_meta` never take part (ids are renumbered by every client; `_meta` carries trace ids and client
identity). When nothing matches, `nearest` says which recorded request came closest and how it
differed, because a miss that does not say why is the classic complaint about record/replay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from blackbox.replay.compare import Difference, Masks, diff

Matcher = Callable[[dict, dict], bool]

# Handshake requests match on the method alone: another client sends another clientInfo and
# capabilities, and the recorded answer is still the right one to give.
METHOD_ONLY = frozenset({"initialize", "server/discover", "ping"})


def params_of(message: dict) -> dict:
    """A request's params without `_meta`."""
    params = message.get("params")
    if not isinstance(params, dict):
        return {}
    return {k: v for k, v in params.items() if k != "_meta"}


def method(recorded: dict, live: dict) -> bool:
    return recorded.get("method") == live.get("method")


def tool(recorded: dict, live: dict) -> bool:
    return params_of(recorded).get("name") == params_of(live).get("name")


def params(recorded: dict, live: dict) -> bool:
    if recorded.get("method") in METHOD_ONLY:
        return True
    # Semantic equality: key order never matters, JSON inside strings is compared as JSON.
    return not diff(params_of(recorded), params_of(live))


DEFAULT_MATCHERS: tuple[Matcher, ...] = (method, params)


def matches(recorded: dict, live: dict, matchers: Sequence[Matcher] = DEFAULT_MATCHERS) -> bool:
    return all(m(recorded, live) for m in matchers)


@dataclass(frozen=True, slots=True)
class Nearest:
    """The recorded request closest to a live one, and what differed."""

    index: int
    message: dict
    differences: list[Difference]
    same_method: bool

    def explain(self) -> str:
        name = self.message.get("method")
        if not self.same_method:
            return f"nearest recorded request is {name} (method differs)"
        shown = "; ".join(
            f"{d.path}: recorded {_short(d.recorded)}, got {_short(d.replayed)}"
            for d in self.differences[:3]
        )
        more = f" (+{len(self.differences) - 3} more)" if len(self.differences) > 3 else ""
        return f"nearest recorded {name} differs at {shown}{more}"


def _short(value: object) -> str:
    from blackbox.replay.compare import summarize

    return summarize(value, 60)


def nearest(live: dict, candidates: Sequence[dict]) -> Nearest | None:
    """The candidate most like `live`: same method first, then fewest differing params paths."""
    best: Nearest | None = None
    best_score: tuple[int, int] | None = None
    for index, candidate in enumerate(candidates):
        same = candidate.get("method") == live.get("method")
        differences = diff({"params": params_of(candidate)}, {"params": params_of(live)}, Masks())
        score = (0 if same else 1, len(differences))
        if best_score is None or score < best_score:
            best, best_score = Nearest(index, candidate, differences, same), score
    return best

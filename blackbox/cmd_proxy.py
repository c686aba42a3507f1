"""Commands of the proxy area (filled in by the work on that area)."""

from __future__ import annotations

COMMANDS: list = []

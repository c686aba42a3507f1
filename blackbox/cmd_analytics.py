"""Commands of the analytics area (filled in by the work on that area)."""

from __future__ import annotations

COMMANDS: list = []

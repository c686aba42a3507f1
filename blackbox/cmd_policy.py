"""Commands of the policy area (filled in by the work on that area)."""

from __future__ import annotations

COMMANDS: list = []

"""Hosts: reading and rewriting the MCP hosts' own config files for `blackbox attach`."""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.hosts import attach as attach
    from blackbox.hosts.attach_bridge import env_headers as env_headers
    from blackbox.hosts.attach_index import attached_configs as attached_configs

_FACE: dict[str, tuple[str, str | None]] = {
    "attach": ("blackbox.hosts.attach", None),
    "attached_configs": ("blackbox.hosts.attach_index", "attached_configs"),
    "env_headers": ("blackbox.hosts.attach_bridge", "env_headers"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

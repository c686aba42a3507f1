"""Hosts: reading and rewriting the MCP hosts' own config files for `blackbox attach`."""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING

if _TYPE_CHECKING:
    from blackbox.hosts import attach as attach
    from blackbox.hosts.attach_index import attached_configs as attached_configs

_FACE: dict[str, tuple[str, str | None]] = {
    "attach": ("blackbox.hosts.attach", None),
    "attached_configs": ("blackbox.hosts.attach_index", "attached_configs"),
}


def __getattr__(name: str) -> object:
    try:
        module, attr = _FACE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    found = _importlib.import_module(module)
    return found if attr is None else getattr(found, attr)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_FACE))


# --- end of the public face ---

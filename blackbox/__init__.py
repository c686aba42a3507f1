"""mcp-blackbox: a flight recorder for the Model Context Protocol.

The one import name the distribution installs. The repository's folders recorder/, replay/,
analytics/ and migrations/ are installed as its subpackages; blackbox/ itself holds the shell
around them: the `blackbox` command (`cli`, the only package that imports click), the hosts'
config files (`hosts`), the web UI (`ui`), the configuration and the pytest plugin.
docs/architecture.md has the map.
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox import config as config
    from blackbox.config import data_dir as data_dir
    from blackbox.proxy_service import DEFAULT_PORT_BASE as DEFAULT_PORT_BASE
    from blackbox.proxy_service import PORT_WINDOW as PORT_WINDOW
    from blackbox.proxy_service import free_port as free_port
    from blackbox.proxy_service import is_installed as is_installed
    from blackbox.proxy_service import proxy_command as proxy_command
    from blackbox.proxy_service import proxy_url as proxy_url
    from blackbox.proxy_service import unit_name as unit_name
    from blackbox.proxy_service import unit_text as unit_text

_FACE: dict[str, tuple[str, str | None]] = {
    "DEFAULT_PORT_BASE": ("blackbox.proxy_service", "DEFAULT_PORT_BASE"),
    "PORT_WINDOW": ("blackbox.proxy_service", "PORT_WINDOW"),
    "config": ("blackbox.config", None),
    "data_dir": ("blackbox.config", "data_dir"),
    "free_port": ("blackbox.proxy_service", "free_port"),
    "is_installed": ("blackbox.proxy_service", "is_installed"),
    "proxy_command": ("blackbox.proxy_service", "proxy_command"),
    "proxy_url": ("blackbox.proxy_service", "proxy_url"),
    "unit_name": ("blackbox.proxy_service", "unit_name"),
    "unit_text": ("blackbox.proxy_service", "unit_text"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

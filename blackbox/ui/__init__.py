"""`blackbox ui`: the local web app that shows the record while it is written.

`app` holds the route table and builds the app, `routes_pages` and `routes_api` the routes (module
functions over the app's `context`), `data` the paged reads from the store, `pages` the HTML
shells, `security` the guard (token, Host by the rule the proxy shares, same-origin, CSP),
`server` how it is served; `static/` is the one script and the one stylesheet, served from the
package (no CDN, no build step).
"""

# --- the public face: all that other contexts import from this one ---
# Other contexts import these names from the package, never from its modules
# (tests/test_architecture.py); they resolve lazily (PEP 562), so the face costs nothing
# until a name is used.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from blackbox.recorder import lazy_face as _lazy_face

if _TYPE_CHECKING:
    from blackbox.ui.server import run_ui as run_ui
    from blackbox.ui.server import split_listen as split_listen

_FACE: dict[str, tuple[str, str | None]] = {
    "run_ui": ("blackbox.ui.server", "run_ui"),
    "split_listen": ("blackbox.ui.server", "split_listen"),
}

__getattr__, __dir__ = _lazy_face(__name__, _FACE, globals)


# --- end of the public face ---

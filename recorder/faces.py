"""The lazy name lookup behind every context's public face.

A context's package declares, in `_FACE`, the names other contexts may import from it and the
module each comes from; `lazy_face` turns that table into the package's `__getattr__` and
`__dir__` (PEP 562), so a name's module is imported when the name is first used, not when the
package is. One implementation for every face (docs/architecture.md, "Public faces").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

Face = Mapping[str, tuple[str, str | None]]  # name -> (module, attribute; None: the module)


def lazy_face(
    package: str, face: Face, own: Callable[[], dict[str, object]]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, whose own names are `own()` (its globals)."""

    def __getattr__(name: str) -> object:
        try:
            module, attr = face[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        found = importlib.import_module(module)
        return found if attr is None else getattr(found, attr)

    def __dir__() -> list[str]:
        return sorted(set(own()) | set(face))

    return __getattr__, __dir__

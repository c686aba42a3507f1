"""The machinery under every record document: the base class, field declarations, the schema
as data (field specs) and the one JSON encoder.

recorder/log/events.py is the schema itself: one frozen dataclass per record kind, the upgrade steps
and `decode`. This module is what those classes are built from and encoded with, kept apart so that
the schema stays one readable page as kinds are added; events.py re-exports every public name, so
callers keep writing `events.encode(...)`.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

import orjson
from blackbox.recorder.log.jsonrpc import encode_json

#: Any JSON value (objects, arrays, strings, numbers, booleans, null).
JSON = Any


def doc_field(
    doc: str, *, required: bool = False, optional: bool = False, default: Any = None
) -> Any:
    """A document field. `required`: a decoded document without it is a problem. `optional`:
    left out of the encoded document when None (fields one producer writes and others do not)."""
    meta = {"doc": doc, "required": required, "optional": optional}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def extra_field() -> Any:
    return field(default_factory=dict, metadata={"doc": "", "extra": True})


@dataclass(frozen=True, slots=True)
class Document:
    """Base of every record document. `extra` keeps the keys a producer added beyond the schema
    (a fault's evidence, a tap's own settings): a decoded document never loses a key."""

    KIND: ClassVar[str]
    VERSION: ClassVar[int] = 1

    if TYPE_CHECKING:
        # Every kind declares `extra` as its last field (`extra_field()`); the base has no fields.
        @property
        def extra(self) -> Mapping[str, JSON]: ...


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """One field of a document kind, as the schema states it."""

    name: str
    types: tuple[type, ...]  # the JSON types it may hold (object for any)
    annotation: str
    doc: str
    required: bool
    optional: bool


def _runtime_types(hint: object) -> tuple[type, ...]:
    if hint is Any:
        return (object,)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return tuple(t for arg in typing.get_args(hint) for t in _runtime_types(arg))
    if hint is type(None):
        return (type(None),)
    if hint is float:
        return (float, int)
    if origin is not None:
        return (dict,) if origin in (dict, Mapping) else (origin,)
    return (cast(type, hint),)  # neither Any, a union nor generic: a class


_TYPE_WORDS = {
    "Mapping[str, JSON]": "object",
    "dict[str, JSON]": "object",
    "list[JSON]": "array",
    "list[str]": "array of strings",
    "JSON": "any JSON value",
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "None": "null",
    "|": "or",
}
_TYPE_TOKEN = re.compile("|".join(re.escape(code) for code in _TYPE_WORDS))


def _plain_type(annotation: str) -> str:
    """A field's annotation in the words of JSON, for the written schema."""
    return _TYPE_TOKEN.sub(lambda m: _TYPE_WORDS[m.group()], annotation)


def _build_specs(cls: type[Document]) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.metadata.get("extra"):
            continue
        annotation = _plain_type(str(f.type))
        out.append(
            FieldSpec(
                f.name,
                _runtime_types(hints[f.name]),
                annotation,
                f.metadata["doc"],
                f.metadata["required"],
                f.metadata["optional"],
            )
        )
    return tuple(out)


_PerClass = TypeVar("_PerClass", bound=Callable[[type[Document]], object])


def _per_class(fn: _PerClass) -> _PerClass:
    """`functools.cache`, typed as the function it wraps: mypy does not count a class as Hashable,
    which the cache wrapper asks of its arguments (python/mypy#11470)."""
    return cast(_PerClass, functools.cache(fn))


@_per_class
def specs_of(cls: type[Document]) -> tuple[FieldSpec, ...]:
    """The fields of a document class, in schema order (computed once per class)."""
    return _build_specs(cls)


def _default_makers(cls: type[Document]) -> dict[str, Callable[[], JSON]]:
    makers: dict[str, Callable[[], JSON]] = {}
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            makers[f.name] = f.default_factory
        else:

            def maker(value: JSON = f.default) -> JSON:
                return value

            makers[f.name] = maker
    return makers


@_per_class
def _defaults_of(cls: type[Document]) -> dict[str, Callable[[], JSON]]:
    # Each field's default, as a maker (a fresh list or dict each time), for `encode_fields`.
    return _default_makers(cls)


@_per_class
def _layout_of(cls: type[Document]) -> tuple[tuple[str, bool], ...]:
    # The encoder's layout per class: (name, left out when None), in schema order.
    return tuple((s.name, s.optional) for s in specs_of(cls))


# -- encoding ------------------------------------------------------------------------------------


def _fragments(value: object) -> object:
    """`value` with every integer beyond 64 bits as an orjson fragment of its exact digits."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not -(2**63) <= value < 2**64:
        return orjson.Fragment(str(value))
    if isinstance(value, dict):
        return {k: _fragments(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fragments(v) for v in value]
    return value


def dumps(value: object) -> bytes:
    """Compact UTF-8 JSON by the one encoder of record documents (orjson: several times faster
    than `json`, and one spelling of every float). Integers beyond 64 bits keep their digits."""
    try:
        return orjson.dumps(value)  # the common case, without the slower option below
    except TypeError:
        pass
    try:
        return orjson.dumps(_fragments(value), option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # a lone surrogate a peer sent (orjson refuses it): written as its escape
        return encode_json(value)


def as_dict(doc: Document) -> dict[str, JSON]:
    """The document as the JSON object `encode` writes, with its `"v"` first."""
    out: dict[str, JSON] = {"v": doc.VERSION}
    for name, optional in _layout_of(type(doc)):
        value = getattr(doc, name)
        if optional and value is None:
            continue
        out[name] = value
    for key, value in doc.extra.items():
        out.setdefault(key, value)
    return out


def encode(doc: Document) -> bytes:
    """The raw bytes of a record document."""
    return dumps(as_dict(doc))


def encode_fields(cls: type[Document], /, **values: JSON) -> bytes:
    """The bytes `encode(cls(**values))` gives, without building the frozen object: for producers
    on a hot path (building a frozen dataclass of many fields is not free, and the proxy writes
    one exchange document a request). Unknown names are refused as the class would refuse them."""
    layout, defaults = _layout_of(cls), _defaults_of(cls)
    if not values.keys() <= defaults.keys():
        unknown = ", ".join(sorted(values.keys() - defaults.keys()))
        raise TypeError(f"{cls.__name__} has no field {unknown}")
    extra = values.pop("extra", None) or {}
    out: dict[str, JSON] = {"v": cls.VERSION}
    for name, optional in layout:
        value = values[name] if name in values else defaults[name]()
        if optional and value is None:
            continue
        out[name] = value
    for key, value in extra.items():
        out.setdefault(key, value)
    return dumps(out)

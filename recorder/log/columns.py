"""Arrow column lists derived from the record types, so no column list is spelled twice.

The export files and the Parquet analytics copy both hold records
(`blackbox.recorder.log.model.StoredEvent`) and columns taken from record documents
(`blackbox.recorder.log.events`). Their Arrow types are worked out here from the fields'
annotations: a new field in the record or a document reaches every file that derives from it, and a
writer and a reader cannot disagree on a column's type.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable

import pyarrow as pa
from blackbox.recorder.log.events import FieldSpec

# The Arrow type of each Python type a record field may hold (None only marks a nullable field).
_ARROW = {
    int: pa.int64(),
    str: pa.string(),
    bytes: pa.binary(),
    bool: pa.bool_(),
    float: pa.float64(),
}


def _arrow_type(hint: object) -> pa.DataType:
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if len(args) != 1 or args[0] not in _ARROW:
        raise TypeError(f"no single Arrow type for {hint!r}")
    return _ARROW[args[0]]


def arrow_columns(record: type, **override: pa.DataType) -> tuple[tuple[str, pa.DataType], ...]:
    """(name, Arrow type) of a record dataclass's fields, in their order; `override` names the
    columns a file stores otherwise (a hash as hex text)."""
    hints = typing.get_type_hints(record)
    return tuple(
        (f.name, override.get(f.name) or _arrow_type(hints[f.name]))
        for f in dataclasses.fields(record)
    )


def arrow_fields(record: type, **override: pa.DataType) -> list[pa.Field]:
    """`arrow_columns` as Arrow fields, nullable where the annotation admits None."""
    hints = typing.get_type_hints(record)
    return [
        pa.field(name, typ, nullable=type(None) in typing.get_args(hints[name]))
        for name, typ in arrow_columns(record, **override)
    ]


def document_columns(fields: Iterable[FieldSpec]) -> tuple[tuple[str, pa.DataType], ...]:
    """(name, Arrow type) of a document's fields: integers as int64, anything else as text (a
    JSON value that is not a string is written as its JSON)."""
    out = []
    for spec in fields:
        kinds = set(spec.types) - {type(None)}
        out.append((spec.name, pa.int64() if kinds == {int} else pa.string()))
    return tuple(out)

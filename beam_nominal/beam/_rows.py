"""Schema'd wide rows: a ``beam.Row`` or NamedTuple with one timestamp field and one field per
channel, as Beam YAML, Beam SQL and the DataFrame API's ``to_pcollection`` hand them over, e.g.
``Row(t=..., rpm=..., oil=..., mode='A')``, read as the wide record ``(ts, {channel: value}, tags)``.

* :class:`RowOptions` says which field is the timestamp (default: a field named ``timestamp``,
  else the one field named ``time`` or ``t`` or of a timestamp type), which are channels
  (default: every other field but ``tags``), which fields' values become tags, and a prefix for
  channel names; checked when WriteToNominal is made.
* :func:`schema_fields` reads a PCollection's schema (its element type), where Beam knows it; a
  field's type then decides its values' type: int64 stays int64 (never through a double), a
  double field's integers become doubles only if exact, text stays text; ``None`` is no point.
* :func:`layout` resolves the options against one set of field names (and the schema, if known),
  raising a :class:`RowSchemaError` naming the field and the fix; WriteToNominal calls it at
  expand when the schema is known, the reader per row class otherwise.
* :func:`row_reader` appends rows of one layout to a PointBatch; :func:`record` gives one row's
  wide record.

Rows of another shape (a point ``(channel, timestamp, value)``, a series, a nested wide record)
are not read here: :func:`is_wide` says which are, and the element readers keep the rest.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.errors import ElementError, InputError, InvalidTypeError, InvalidValueError
from beam_nominal.model import is_missing

__all__ = [
    "TIMESTAMP_NAMES",
    "Field",
    "RowLayout",
    "RowOptions",
    "RowSchemaError",
    "is_wide",
    "layout",
    "record",
    "fixed_reader",
    "row_reader",
    "rows_by_names",
    "schema_fields",
]

#: Names a timestamp field is found by when ``timestamp_field`` is not given.
TIMESTAMP_NAMES = ("timestamp", "time", "t")


class RowSchemaError(ElementError):
    """Rows whose fields the options cannot be applied to; ``field`` names the field."""


def _names(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(f"{what} must be a list of field names, got {value!r:.80}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{what} must hold non-empty field names, got {name!r:.80}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a field twice: {list(names)!r:.200}")
    return names


@dataclasses.dataclass(frozen=True)
class RowOptions:
    """How wide rows become points; checked at construction, the bad value in the message.

    Attributes:
        timestamp_field: the timestamp field; ``None``: a field named ``timestamp``, else the
            one field named ``time`` or ``t`` or of a timestamp type (several: refused).
        channel_fields: the fields that are channels; ``None``: every field but the timestamp,
            the tag fields and a ``tags`` mapping.
        tag_fields: fields whose values (text or integers) become tags of the row's points.
        channel_prefix: put before every channel name (``"engine."``).
    """

    timestamp_field: str | None = None
    channel_fields: tuple[str, ...] | None = None
    tag_fields: tuple[str, ...] = ()
    channel_prefix: str = ""

    def __post_init__(self) -> None:
        if self.timestamp_field is not None and (not isinstance(self.timestamp_field, str) or not self.timestamp_field):
            raise ValueError(f"timestamp_field must be a non-empty string, got {self.timestamp_field!r}")
        channels = _names(self.channel_fields, "channel_fields")
        if channels == ():
            raise ValueError("channel_fields is empty: name at least one field, or leave it unset for all the others")
        object.__setattr__(self, "channel_fields", channels)
        tags = _names(self.tag_fields, "tag_fields") or ()
        object.__setattr__(self, "tag_fields", tags)
        if not isinstance(self.channel_prefix, str):
            raise TypeError(f"channel_prefix must be a string, got {self.channel_prefix!r:.80}")
        both = set(channels or ()) & set(tags)
        if both:
            raise ValueError(f"fields {sorted(both)} are in both channel_fields and tag_fields; name each in one")
        ts = self.timestamp_field
        if ts is not None and (ts in (channels or ()) or ts in tags):
            raise ValueError(f"timestamp_field {ts!r} is also in channel_fields or tag_fields; name it in one only")

    @property
    def shaping(self) -> bool:
        """Whether channel_fields, tag_fields or channel_prefix was given (only wide rows take them)."""
        return self.channel_fields is not None or bool(self.tag_fields) or bool(self.channel_prefix)


@dataclasses.dataclass(frozen=True)
class Field:
    """One schema field: its name, its value type (``int64``, ``double``, ``string``, ``bool``,
    ``bytes``, ``timestamp``, or ``None`` for any other) and whether it may be null."""

    name: str
    kind: str | None
    optional: bool = False


def _kind(hint: Any) -> tuple[str | None, bool]:
    optional = False
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        if len(args) != 1:
            return None, optional
        hint = args[0]
    if not isinstance(hint, type):
        return None, optional
    if issubclass(hint, (bool, np.bool_)):
        return "bool", optional
    if issubclass(hint, (int, np.integer)):
        return "int64", optional
    if issubclass(hint, (float, np.floating)):
        return "double", optional
    if issubclass(hint, str):
        return "string", optional
    if issubclass(hint, bytes):
        return "bytes", optional
    if hint.__name__ == "Timestamp" or hint.__name__ == "datetime":
        return "timestamp", optional
    return None, optional


def schema_fields(element_type: Any) -> tuple[Field, ...] | None:
    """The fields of a schema'd PCollection's element type (a Beam row type or a NamedTuple
    class), or None where Beam knows no schema (``Any``, tuples, dicts ...)."""
    from apache_beam.typehints.row_type import RowTypeConstraint
    from apache_beam.typehints.schemas import named_fields_from_element_type

    is_named = isinstance(element_type, type) and issubclass(element_type, tuple) and hasattr(element_type, "_fields")
    if not (isinstance(element_type, RowTypeConstraint) or is_named):
        return None
    try:
        if is_named:
            # Resolved, where Beam reads __annotations__ as written (text under postponed evaluation).
            hints = typing.get_type_hints(element_type)
            if set(hints) != set(element_type._fields):
                return None  # a namedtuple without annotations: no schema
            named = [(name, hints[name]) for name in element_type._fields]
        else:
            named = named_fields_from_element_type(element_type)
    except (TypeError, ValueError, KeyError, NameError):
        return None
    return tuple(Field(name, *_kind(hint)) for name, hint in named)


def is_wide(names: Sequence[str], options: RowOptions) -> bool:
    """Whether rows with these fields are flat wide records (read here) rather than points,
    series or nested wide records (read by the element readers)."""
    fields = set(names)
    if "channel" in fields:
        return False
    if options.channel_fields is not None:
        return True
    if "value" in fields or "timestamps" in fields:
        return False
    # A nested wide record: a timestamp, a values (or channels) mapping and maybe tags.
    nested = len(fields & {"values", "channels"}) == 1 and len(fields - {"tags"}) == 2
    return not nested


def _to_double(value: Any) -> Any:
    if type(value) is float:
        return value
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        exact = int(value)  # compared as Python ints: numpy may compare int64 through a double
        try:
            as_float = float(exact)
        except OverflowError:
            as_float = float("inf")  # refused below, as any integer a double cannot hold
        if as_float in (float("inf"), float("-inf")) or int(as_float) != exact:
            raise InvalidValueError(f"{value} has no exact double; make the field int64 or round it first")
        return as_float
    raise InvalidTypeError(f"expected a double, got {type(value).__name__} {value!r:.80}")


def _to_int64(value: Any) -> Any:
    if type(value) is int:
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    raise InvalidTypeError(f"expected an int64, got {type(value).__name__} {value!r:.80}")


def _to_string(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise InvalidTypeError(f"expected a string, got {type(value).__name__} {value!r:.80}")


_CONVERTERS: dict[str | None, Callable[[Any], Any]] = {
    "double": _to_double,
    "int64": _to_int64,
    "string": _to_string,
}


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """Where a row's parts are: its timestamp field, its channels ``(field, channel name,
    converter or None)``, its tag fields and whether a ``tags`` field holds a mapping of tags."""

    timestamp: str
    channels: tuple[tuple[str, str, Callable[[Any], Any] | None], ...]
    tags: tuple[str, ...]
    tags_mapping: bool


def _timestamp_field(names: Sequence[str], options: RowOptions, kinds: Mapping[str, Field]) -> str:
    shown = list(names)
    if options.timestamp_field is not None:
        if options.timestamp_field not in names:
            raise RowSchemaError(
                options.timestamp_field,
                f"timestamp_field {options.timestamp_field!r} is not a field of the rows; fields {shown}",
            )
        return options.timestamp_field
    taken = set(options.channel_fields or ()) | set(options.tag_fields)
    if "timestamp" in names and "timestamp" not in taken:
        return "timestamp"  # the name every element shape uses: other fields stay channels
    candidates = [n for n in names if n not in taken and (n in TIMESTAMP_NAMES or _field_kind(kinds, n) == "timestamp")]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise RowSchemaError(
            "timestamp_field",
            f"no timestamp field: none is named {', '.join(TIMESTAMP_NAMES)} or has a timestamp type; "
            f"fields {shown}; give timestamp_field='<the field>'",
        )
    raise RowSchemaError(
        "timestamp_field",
        f"fields {candidates} could each be the timestamp; give timestamp_field= one of them "
        "(and channel_fields if the others are channels)",
    )


def _field_kind(kinds: Mapping[str, Field], name: str) -> str | None:
    f = kinds.get(name)
    return f.kind if f is not None else None


def layout(names: Sequence[str], options: RowOptions, schema: Sequence[Field] | None = None) -> RowLayout:
    """Resolve ``options`` for rows with fields ``names`` (typed by ``schema`` if it has the same
    names).

    Raises:
        RowSchemaError: a named field is missing, no or several timestamp candidates, no
            channel, or a tag field of a type tags cannot hold; naming the field and the fix.
    """
    kinds = {f.name: f for f in schema} if schema is not None and [f.name for f in schema] == list(names) else {}
    shown = list(names)
    ts = _timestamp_field(names, options, kinds)
    for name in options.tag_fields:
        if name not in names:
            raise RowSchemaError(name, f"tag_fields names {name!r}, which is not a field of the rows; fields {shown}")
        if _field_kind(kinds, name) not in (None, "string", "int64"):
            raise RowSchemaError(
                name,
                f"tag field {name!r} is {_field_kind(kinds, name)}; tags hold text or integers: "
                "leave it out of tag_fields",
            )
    if options.channel_fields is not None:
        for name in options.channel_fields:
            if name not in names:
                raise RowSchemaError(
                    name, f"channel_fields names {name!r}, which is not a field of the rows; fields {shown}"
                )
            if name == ts:
                raise RowSchemaError(name, f"{name!r} is the timestamp field and cannot also be a channel")
        channel_names = list(options.channel_fields)
        tags_mapping = "tags" in names and "tags" not in options.channel_fields and "tags" not in options.tag_fields
    else:
        tags_mapping = "tags" in names and "tags" not in options.tag_fields
        channel_names = [
            n for n in names if n != ts and n not in options.tag_fields and not (tags_mapping and n == "tags")
        ]
    if not channel_names:
        raise RowSchemaError(
            "channel_fields", f"rows with fields {shown} have no channel field besides the timestamp {ts!r} and tags"
        )
    channels = tuple(
        (name, options.channel_prefix + name, _CONVERTERS.get(_field_kind(kinds, name))) for name in channel_names
    )
    return RowLayout(ts, channels, tuple(options.tag_fields), tags_mapping)


def _tag_value(name: str, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return str(int(value))
    raise ElementError(
        name, f"tag field {name!r} holds {type(value).__name__} {value!r:.80}; tags are text or integers"
    )


def record(m: Mapping[str, Any], lay: RowLayout) -> tuple[Any, dict[str, Any], dict[str, str] | None]:
    """One row's fields (``m``) as the wide record ``(timestamp, {channel: value}, tags)``.

    Raises:
        ElementError: a value of the wrong type for its field, or a tag value tags cannot hold.
    """
    values: dict[str, Any] = {}
    for name, channel, convert in lay.channels:
        value = m[name]
        if convert is not None and not is_missing(value):
            try:
                value = convert(value)
            except InputError as exc:
                raise ElementError(name, f"field {name!r}: {exc}") from None
        values[channel] = value
    tags: dict[str, str] | None = None
    if lay.tags_mapping and m["tags"]:
        tags = dict(m["tags"])
    for name in lay.tags:
        value = m[name]
        if value is not None:
            if tags is None:
                tags = {}
            tags[name] = _tag_value(name, value)
    return m[lay.timestamp], values, tags


def row_reader(
    batch: PointBatch, lay: RowLayout, fields_of: Callable[[Any], Mapping[str, Any]]
) -> Callable[[Any], None]:
    """A reader appending rows of layout ``lay`` to ``batch`` as wide records."""
    add_record = batch.add_record

    def read(element: Any) -> None:
        ts, values, tags = record(fields_of(element), lay)
        add_record(ts, values, tags)

    return read


def rows_by_names(
    batch: PointBatch,
    options: RowOptions,
    schema: Sequence[Field] | None,
    fields_of: Callable[[Any], Mapping[str, Any]],
    other: Callable[[Any], None],
) -> Callable[[Any], None]:
    """A reader for a class whose instances may have different fields (``beam.Row``, dicts):
    each set of field names gets its layout once; rows that are not wide go to ``other``
    (a point is known by its ``channel`` field at the cost of one lookup)."""
    add_record = batch.add_record
    layouts: dict[tuple[str, ...], RowLayout | RowSchemaError | None] = {}

    def read(element: Any) -> None:
        m = fields_of(element)
        if "channel" in m:
            other(element)
            return
        names = tuple(m)
        if names in layouts:
            lay = layouts[names]
        else:
            try:
                lay = layout(names, options, schema) if is_wide(names, options) else None
            except RowSchemaError as exc:
                lay = exc
            layouts[names] = lay
        if lay is None:
            if options.shaping:
                raise _not_wide(names)
            other(element)
        elif isinstance(lay, RowSchemaError):
            raise RowSchemaError(lay.field, str(lay).partition(": ")[2])
        else:
            ts, values, tags = record(m, lay)
            add_record(ts, values, tags)

    return read


def _not_wide(names: Sequence[str]) -> ElementError:
    return ElementError(
        "channel_fields",
        f"channel_fields, tag_fields and channel_prefix apply to wide rows (a timestamp and a field per "
        f"channel); rows with fields {list(names)} are points or series: leave those options unset",
    )


def fixed_reader(
    batch: PointBatch,
    names: Sequence[str],
    options: RowOptions,
    schema: Sequence[Field] | None,
    fields_of: Callable[[Any], Mapping[str, Any]],
) -> Callable[[Any], None] | None:
    """The reader for a class whose instances all have fields ``names`` (a NamedTuple), or None
    if they are not wide rows (the element readers read them).

    Raises:
        RowSchemaError: see :func:`layout`; ElementError: shaping options on rows that are not wide.
    """
    if not is_wide(names, options):
        if options.shaping:
            raise _not_wide(names)
        return None
    return row_reader(batch, layout(names, options, schema), fields_of)

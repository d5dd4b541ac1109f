"""Element readers: one small function per element shape, each appending to a PointBatch.

Shapes (README.md, "Element shapes"):

* point: ``(channel, timestamp, value[, tags])`` as a tuple, NamedTuple, dict or ``beam.Row``;
* series: ``(channel, timestamps, values[, tags])`` with array/sequence columns;
* wide record: ``(timestamp, {channel: value}[, tags])``, a dict/Row/NamedTuple with a
  ``values`` (or ``channels``) mapping and a timestamp field, or a flat one with a timestamp field
  and one field per channel (``None`` is a gap), optionally a ``tags`` field;
* a table: a pyarrow ``Table``/``RecordBatch``, a pandas or polars DataFrame, a pandas Series
  or anything with ``__arrow_c_stream__``, with a timestamp column (a pandas one: or index) and
  one column per channel.

:func:`reader_for` picks a reader by an element's class, once per class (the caller keeps them
in a dict by type), and binds it to one batch. A reader raises :class:`ElementError` naming the
field for an element it cannot read; the batch raises for a bad value (see
:mod:`beam_nominal._pipeline.staging`). Either way nothing of the element was appended.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from beam_nominal._pipeline.frames import is_frame
from beam_nominal._pipeline.staging import PointBatch, is_column
from beam_nominal.beam import _rows
from beam_nominal.errors import ElementError, InputError

__all__ = ["ELEMENT_ERRORS", "SHAPE_FIELDS", "ElementError", "FailedElement", "is_point_fields", "is_row", "reader_for"]

#: Field names the shapes give a meaning of their own: no timestamp field may take one.
SHAPE_FIELDS = frozenset({"channel", "channels", "tags", "timestamps", "value", "values"})

#: What a reader or the batch raises for a bad element: an InputError (ElementError,
#: InvalidValueError, InvalidTypeError, SeriesTypeError), raised on purpose by a check of the
#: user's element or value. Anything else, a plain TypeError or ValueError included, is a fault
#: of ours: it fails the bundle, which the runner retries, rather than passing as the element's.
ELEMENT_ERRORS = (InputError,)

Reader = Callable[[Any], None]


class FailedElement(NamedTuple):
    """An element WriteToNominal could not write, on the ``failed`` output.

    It keeps the element's own timestamp and windows.

    Attributes:
        element: the element as it arrived.
        error: the exception class name (``ElementError``, ``SeriesTypeError`` ...).
        reason: what was wrong, naming the field and, where known, the channel.
    """

    element: Any
    error: str
    reason: str


def describe(element: Any) -> str:
    text = repr(element)
    return text if len(text) <= 200 else text[:197] + "..."


def failed(element: Any, exc: Exception) -> FailedElement:
    return FailedElement(element, type(exc).__name__, f"element {describe(element)}: {exc}")


_POINT, _SERIES, _WIDE_NESTED, _WIDE_FLAT = "point", "series", "wide_nested", "wide_flat"


def _kind_of_fields(names: Any, timestamp_field: str) -> str:
    if "channel" in names:
        if "timestamps" in names and "values" in names:
            return _SERIES
        if timestamp_field in names and "value" in names:
            return _POINT
        raise ElementError(
            "fields",
            f"has a channel but neither ({timestamp_field}, value) nor (timestamps, values); fields {sorted(names)}",
        )
    if "value" in names or "timestamps" in names:
        # Point- or series-shaped but nameless: a field called "value" is not taken as a channel.
        raise ElementError("channel", f"element has no channel field; fields {sorted(names)}")
    if timestamp_field in names:
        rest = set(names) - {timestamp_field, "tags"}
        if rest in ({"values"}, {"channels"}):
            return _WIDE_NESTED
        return _WIDE_FLAT
    raise ElementError(
        "fields",
        f"no {timestamp_field!r} field and no channel: not a point, series or wide record; fields {sorted(names)}",
    )


def is_point_fields(fields: Sequence[str], timestamp_field: str) -> bool:
    """Whether a NamedTuple class with these fields holds ``(channel, timestamp, value)``
    points as they are, in that order: what ``add_fast`` can take unchanged."""
    return tuple(fields) == ("channel", timestamp_field, "value")


def is_row(element: Any) -> bool:
    """Whether ``element`` is a ``beam.Row`` (whose fields are its ``vars``)."""
    cls = type(element)
    return cls.__name__ == "Row" and cls.__module__.startswith("apache_beam")


def reader_for(
    element: Any,
    batch: PointBatch,
    timestamp_field: str,
    rows: _rows.RowOptions | None = None,
    schema: tuple[_rows.Field, ...] | None = None,
) -> Reader:
    """The reader for elements of ``type(element)``, appending to ``batch``.

    A reader may assume the fast path already refused the element when it is a plain tuple
    (``_dofn.WriteDoFn.process`` tries that first). With ``rows``, wide ``beam.Row`` and
    NamedTuple elements (and dicts, if ``rows`` shapes them) are read by :mod:`._rows`, typed
    by ``schema`` where it has their fields; points and series keep their readers.

    Raises:
        ElementError: the class is not an element shape.
    """
    cls = type(element)
    if cls is tuple or cls is list:
        return _tuple_reader(batch)
    if cls is dict:
        if rows is not None and rows.shaping:
            return _rows.rows_by_names(batch, rows, schema, dict, _mapping_reader(batch, timestamp_field, None))
        return _mapping_reader(batch, timestamp_field, None)
    if isinstance(element, Mapping):
        # Read as a plain dict: looking a key up in some mappings adds it (defaultdict).
        return _mapping_reader(batch, timestamp_field, dict)
    if is_frame(element):
        # pyarrow Tables and RecordBatches, pandas and polars DataFrames, a pandas Series,
        # anything with __arrow_c_stream__ (frames.as_table).
        return lambda table: batch.add_table(table, timestamp_field)
    if isinstance(element, tuple) and hasattr(cls, "_fields"):
        if rows is not None:
            wide = _rows.fixed_reader(batch, cls._fields, rows, schema, _asdict)
            if wide is not None:
                return wide
        return _named_reader(batch, list(cls._fields), timestamp_field)
    if is_row(element):
        # A Row's fields are its __dict__: read in place, where as_dict() would copy them.
        if rows is not None:
            # One class for Rows of any fields: the layout is found per set of field names.
            return _rows.rows_by_names(batch, rows, schema, vars, _mapping_reader(batch, timestamp_field, vars))
        return _mapping_reader(batch, timestamp_field, vars)
    raise ElementError(
        "element",
        f"unsupported element type {cls.__name__}: expected a point, series or wide record (tuple, dict, "
        "NamedTuple, beam.Row) or a table (pyarrow Table, pandas or polars DataFrame, pandas Series); "
        "README.md, 'Element shapes'",
    )


def _asdict(e: Any) -> Any:
    return e._asdict()


def _tuple_reader(batch: PointBatch) -> Reader:
    def read(e: Sequence[Any]) -> None:
        n = len(e)
        if n in (2, 3) and (type(e[1]) is dict or isinstance(e[1], Mapping)):  # type() first: no ABC check
            batch.add_record(e[0], e[1], e[2] if n == 3 else None)
            return
        if n not in (3, 4):
            raise ElementError(
                "element",
                f"a tuple of {n} items is not (channel, timestamp, value[, tags]), "
                "(channel, timestamps, values[, tags]) or (timestamp, {channel: value}[, tags])",
            )
        tags = e[3] if n == 4 else None
        if is_column(e[1]):
            batch.add_series(e[0], e[1], e[2], tags)
        else:
            batch.add_point(e[0], e[1], e[2], tags)

    return read


def _mapping_reader(batch: PointBatch, ts_field: str, fields_of: Callable[[Any], Any] | None) -> Reader:
    add_fast, add_point, add_record = batch.add_fast, batch.add_point, batch.add_record
    skip = (ts_field, "tags")

    def read(element: Any) -> None:
        m = element if fields_of is None else fields_of(element)
        # A point, the common case, is known by its three keys: looked up once each, where
        # testing for them first would look each up twice. Anything else is classified.
        try:
            point = (m["channel"], m[ts_field], m["value"])
        except KeyError:
            pass
        else:
            tags = m.get("tags")
            if tags is not None or not add_fast(*point):
                add_point(*point, tags)
            return
        kind = _kind_of_fields(m, ts_field)
        if kind == _SERIES:
            batch.add_series(m["channel"], m["timestamps"], m["values"], m.get("tags"))
        elif kind == _WIDE_NESTED:
            add_record(m[ts_field], m["values"] if "values" in m else m["channels"], m.get("tags"))
        elif kind == _WIDE_FLAT:
            add_record(m[ts_field], m, m.get("tags"), skip)
        else:  # pragma: no cover - _POINT is handled above
            raise AssertionError(kind)

    return read


def _named_reader(batch: PointBatch, fields: list[str], ts_field: str) -> Reader:
    kind = _kind_of_fields(fields, ts_field)
    idx = {name: i for i, name in enumerate(fields)}
    ti = idx.get("tags")
    if kind == _POINT:
        ci, tsi, vi = idx["channel"], idx[ts_field], idx["value"]
        add_fast, add_point = batch.add_fast, batch.add_point
        if is_point_fields(fields, ts_field):
            # (channel, timestamp, value) in that order: the point itself.
            def read_plain(e: Any) -> None:
                if not add_fast(e[0], e[1], e[2]):
                    add_point(e[0], e[1], e[2], None)

            return read_plain

        def read_point(e: Any) -> None:
            point = (e[ci], e[tsi], e[vi])
            tags = e[ti] if ti is not None else None
            if tags is not None or not add_fast(*point):
                add_point(*point, tags)

        return read_point
    if kind == _SERIES:
        ci, tsi, vi = idx["channel"], idx["timestamps"], idx["values"]
        return lambda e: batch.add_series(e[ci], e[tsi], e[vi], e[ti] if ti is not None else None)
    read_mapping = _mapping_reader(batch, ts_field, None)
    return lambda e: read_mapping(e._asdict())

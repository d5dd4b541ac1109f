"""DataFrames as Arrow: pandas and polars DataFrames, pandas Series, Index and arrays, and
anything with ``__arrow_c_stream__``, turned into the pyarrow forms the batch reads.

One rule for missing values, the container's own: what pandas calls missing (``isna``: ``NA``,
``NaT``, ``None``, and ``NaN`` in a numpy float column, as ``df.to_parquet`` writes it) and Arrow
or polars null is no point. A NaN anywhere else (a Python or numpy float, an Arrow or polars NaN,
a NaN a nullable ``Float64`` holds apart from ``NA``) is a value and lands as NaN.

Conversion is pyarrow's own, exact: nullable ``Int64``/``UInt64`` stay integers (never through
float), tz-aware columns keep every nanosecond, categoricals become dictionaries (decoded to their
values), pandas' string dtypes (``string``, pandas 3's ``str``) and polars' strings become Arrow
strings. Nothing here imports pandas or polars: objects are known by their module.
"""

from __future__ import annotations

from typing import Any

from beam_nominal.errors import InvalidTypeError, InvalidValueError

__all__ = ["as_table", "is_frame", "is_pandas", "pandas_column"]


def is_pandas(obj: Any) -> bool:
    """Whether ``obj`` is a pandas object (DataFrame, Series, Index, array)."""
    return type(obj).__module__.startswith("pandas")


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is a table the batch reads: a pyarrow ``Table``/``RecordBatch``, a pandas
    DataFrame or Series, or anything exporting an Arrow stream (polars, DuckDB ...)."""
    cls = type(obj)
    if cls.__module__.startswith("pyarrow"):
        return cls.__name__ in ("Table", "RecordBatch")
    if cls.__module__.startswith("pandas"):
        return cls.__name__ in ("DataFrame", "Series")
    return hasattr(cls, "__arrow_c_stream__") or (
        cls.__module__.startswith("polars") and cls.__name__ == "DataFrame"
    )


def pandas_column(obj: Any) -> Any:
    """A pandas Series, Index or array as an Arrow array, by pandas' missing rule (``isna`` is
    null). A timezone-aware DatetimeIndex keeps its zone; a naive one stays naive (the batch
    then localizes or refuses it)."""
    import pyarrow as pa

    try:
        return pa.array(obj, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidTypeError(f"pandas {type(obj).__name__} of dtype {getattr(obj, 'dtype', '?')}: {exc}") from None


def as_table(obj: Any, timestamp_column: str) -> tuple[Any, str]:
    """``obj`` as a pyarrow Table or RecordBatch, and which kind of container it was
    (``"arrow"`` or ``"pandas"``, for the fix a naive timestamp column is told of).

    A pandas DataFrame's timestamps are its ``timestamp_column`` column or, without one, its
    index when that is a DatetimeIndex or is named ``timestamp_column``; any other index is not
    data and is left out. A pandas Series is one channel named by the Series' name, its index the
    timestamps.

    Raises:
        ValueError: no timestamps, a name that is not a str, a Series without a name.
        TypeError: a column pandas or Arrow cannot convert, or an object that is no table.
    """
    import pyarrow as pa

    cls = type(obj)
    if cls.__module__.startswith("pyarrow") and cls.__name__ in ("Table", "RecordBatch"):
        return obj, "arrow"
    if is_pandas(obj) and cls.__name__ == "Series":
        if obj.name is None or not isinstance(obj.name, str):
            raise InvalidValueError(
                f"a pandas Series is one channel, named by its name, which is {obj.name!r}: "
                "give it one (series.rename('engine.rpm'))"
            )
        obj = obj.to_frame()
        cls = type(obj)
    if is_pandas(obj) and cls.__name__ == "DataFrame":
        return _from_pandas(obj, timestamp_column), "pandas"
    try:
        if hasattr(cls, "__arrow_c_stream__"):
            return _without_views(pa.table(obj)), "arrow"
        if hasattr(obj, "to_arrow"):  # a polars DataFrame older than the Arrow PyCapsule protocol
            return _without_views(obj.to_arrow()), "arrow"
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidTypeError(f"{cls.__name__} could not be read as an Arrow table: {exc}") from None
    raise InvalidTypeError(
        f"{cls.__name__} is not a table: give a pyarrow Table/RecordBatch, a pandas or polars DataFrame, "
        "or an object with __arrow_c_stream__"
    )


def _from_pandas(df: Any, timestamp_column: str) -> Any:
    import pyarrow as pa

    names = list(df.columns)
    for name in names:
        if not isinstance(name, str):
            raise InvalidValueError(
                f"DataFrame column {name!r} is not named by a str (a channel name): "
                "rename the columns (df.columns = df.columns.astype(str)) or flatten a MultiIndex"
            )
    if timestamp_column not in names:
        index = df.index
        if type(index).__name__ != "DatetimeIndex" and index.name != timestamp_column:
            raise InvalidValueError(
                f"DataFrame has no {timestamp_column!r} column and its index is a {type(index).__name__}, "
                f"not a DatetimeIndex; columns {names[:20]}: name the time column (timestamp_column=...) "
                f"or make it the index (df.set_index('time'))"
            )
        df = df.reset_index(names=timestamp_column)
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
        raise InvalidTypeError(f"DataFrame could not be converted to Arrow exactly: {exc}") from None


def _without_views(table: Any) -> Any:
    """``table`` with string views (polars' strings, which some pyarrow kernels do not take)
    cast to large strings, inside dictionaries and lists too: the same text."""
    import pyarrow as pa

    is_view = getattr(pa.types, "is_string_view", None)
    if is_view is None:  # a pyarrow without views cannot have imported one
        return table

    def plain(t: Any) -> Any:
        if is_view(t):
            return pa.large_string()
        if pa.types.is_dictionary(t):
            return pa.dictionary(t.index_type, plain(t.value_type))
        if pa.types.is_large_list(t):
            return pa.large_list(plain(t.value_type))
        if pa.types.is_list(t):
            return pa.list_(plain(t.value_type))
        if pa.types.is_struct(t):
            return pa.struct([f.with_type(plain(f.type)) for f in t])
        return t

    schema = pa.schema([f.with_type(plain(f.type)) for f in table.schema], metadata=table.schema.metadata)
    return table if schema.equals(table.schema) else table.cast(schema)

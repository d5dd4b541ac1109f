"""Value conversion, in one place: every value a stream or an element reader accepts is checked
and normalised here, to the form ``SeriesBatch`` holds (see ``_wire/batch.py``).

* scalars: :func:`convert_scalar` (type and normalised value of a first value) and the per-type
  converters in ``SCALAR_CONVERTERS`` (raise :class:`Mismatch` for a value of another type);
* text: :func:`check_texts` (no lone surrogates: such a string would fail its whole request at
  encode time), :func:`struct_json` (compact JSON, sorted keys);
* array values: :func:`float_row`, :func:`float_array_row`, :func:`float_rows`,
  :func:`double_rows_column`, :func:`string_row`;
* columns: :func:`column` (numpy arrays and sequences), :func:`arrow_column` (pyarrow arrays),
  checked against the series' pinned type;
* sizes: :func:`value_bytes`, the packer's estimate of a column's encoded value bytes.
"""

from __future__ import annotations

import itertools
import json
import operator
import struct
import sys
from array import array as _array
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal._pipeline import blocks
from beam_nominal._pipeline.sizes import (
    ARRAY_ROW_BYTES,
    DOUBLE_BYTES,
    FIXED_VALUE_BYTES,
    STRING_ITEM_BYTES,
    TEXT_VALUE_BYTES,
)
from beam_nominal.errors import InvalidTypeError, InvalidValueError, SeriesTypeError
from beam_nominal.model import ValueType

join_into: Callable[[list[Any], Any], int] | None
try:
    from beam_nominal._pipeline._fastpath import join_into
except ImportError:  # built without the C extension
    join_into = None

__all__ = [
    "SCALAR_CONVERTERS",
    "UNCHECKED_TYPES",
    "Mismatch",
    "arrow_column",
    "check_pin",
    "check_texts",
    "column",
    "conflict",
    "convert_scalar",
    "describe",
    "double_rows_column",
    "float_array_row",
    "float_row",
    "float_rows",
    "string_row",
    "text_bytes",
    "struct_json",
    "type_name",
    "value_bytes",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT64_MAX = 2**64 - 1

#: Per value type, the Python types every value of which converts to it exactly, with no check
#: (a Python int needs a range check, a str a UTF-8 check; these need none).
UNCHECKED_TYPES: dict[ValueType, frozenset[type]] = {
    ValueType.DOUBLE: frozenset({float, np.float64, np.float32, np.float16}),
    ValueType.INT64: frozenset({bool, np.bool_, np.int64, np.int32, np.int16, np.int8, np.uint32, np.uint16, np.uint8}),
    ValueType.UINT64: frozenset({np.uint64}),
}



class Mismatch(Exception):
    """Internal: a value does not belong to the type being checked."""


def check_texts(channel: str, what: str, values: Iterable[str]) -> None:
    """Raise ValueError for a str that cannot be encoded as UTF-8 (a lone surrogate).

    Checked at enqueue: the same string found by the encoder would fail its whole request, i.e.
    other series' points too. ASCII strings (the usual case) cost one ``isascii`` each.
    """
    if isinstance(values, list) and len(values) > 2 and "".join(values).isascii():
        return  # one C-level pass for a column of ASCII strings
    for v in values:
        if not v.isascii():
            try:
                v.encode()
            except UnicodeEncodeError as exc:
                raise InvalidValueError(
                    f"channel {channel!r}: {what} {v!r:.80} is not valid Unicode text ({exc.reason})"
                ) from None


def struct_json(channel: str, mapping: Mapping[str, Any]) -> str:
    """Serialise a struct value as compact JSON text with sorted keys.

    Sorted keys make equal mappings produce equal bytes, so a retried bundle produces identical
    requests (and idempotency keys). NaN and infinities are rejected: they are not JSON.
    """
    if not isinstance(mapping, Mapping):
        raise InvalidTypeError(f"struct value of channel {channel!r} must be a mapping, got {type(mapping).__name__}")
    try:
        text = json.dumps(mapping, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"struct value of channel {channel!r} is not JSON-serialisable: {exc}") from None
    check_texts(channel, "struct", (text,))
    return text


def _to_double(v: Any) -> float:
    if type(v) is float:
        return v
    if isinstance(v, (float, np.floating)):
        return float(v)
    raise Mismatch


def _to_int64(v: Any) -> int:
    t = type(v)
    if t is int:
        if _INT64_MIN <= v <= _INT64_MAX:
            return v  # type: ignore[no-any-return]
        raise Mismatch
    if t is bool or isinstance(v, (np.bool_, np.signedinteger)):
        return int(v)
    if isinstance(v, np.unsignedinteger) and v.dtype.itemsize < 8:  # fits int64 (as of_dtype)
        return int(v)
    raise Mismatch


def _to_uint64(v: Any) -> int:
    # Non-negative Python ints are accepted into a uint64 series even when they would also fit
    # int64: otherwise a counter that starts above 2**63 could never take a small value.
    if (type(v) is int or isinstance(v, np.unsignedinteger)) and 0 <= v <= _UINT64_MAX:
        return int(v)
    raise Mismatch


def _to_string(v: Any) -> str:
    if isinstance(v, str):
        if not v.isascii():
            v.encode()  # UnicodeEncodeError for a lone surrogate; callers name the channel
        return v
    raise Mismatch


SCALAR_CONVERTERS: dict[ValueType, Callable[[Any], Any]] = {
    ValueType.DOUBLE: _to_double,
    ValueType.INT64: _to_int64,
    ValueType.UINT64: _to_uint64,
    ValueType.STRING: _to_string,
}


def convert_scalar(channel: str, value: Any) -> tuple[ValueType, Any]:
    """The value type of a scalar and its normalised Python value (structs become JSON text)."""
    try:
        vt = ValueType.of_scalar(value)
    except TypeError as exc:
        raise InvalidTypeError(f"channel {channel!r}: {exc}") from None
    if vt is ValueType.STRUCT:
        return vt, struct_json(channel, value)
    if vt is ValueType.STRING:
        check_texts(channel, "string", (value,))
    return vt, SCALAR_CONVERTERS[vt](value)


def type_name(value: Any) -> str:
    try:
        return ValueType.of_scalar(value).value
    except TypeError:
        return type(value).__name__


def text_bytes(texts: Iterable[str]) -> int:
    """UTF-8 bytes of some strings: their length when ASCII (one C pass), else encoded."""
    joined = "".join(texts)
    return len(joined) if joined.isascii() else len(joined.encode("utf-8", "surrogatepass"))


def value_bytes(vtype: ValueType, values: Any) -> int:
    """Estimated encoded bytes of a column's values (timestamps not included), in SeriesBatch
    form (a double-array column: a list of 1-D arrays, or one matrix)."""
    if vtype is ValueType.STRING or vtype is ValueType.STRUCT:
        return text_bytes(values) + TEXT_VALUE_BYTES * len(values)
    if vtype is ValueType.DOUBLE_ARRAY:
        doubles = values.size if isinstance(values, np.ndarray) else sum(map(len, values))
        return doubles * DOUBLE_BYTES + ARRAY_ROW_BYTES * len(values)
    if vtype is ValueType.STRING_ARRAY:
        # One join over every row's strings: a text_bytes call per row cost more than its row.
        texts = text_bytes(itertools.chain.from_iterable(values))
        return texts + STRING_ITEM_BYTES * sum(map(len, values)) + ARRAY_ROW_BYTES * len(values)
    return FIXED_VALUE_BYTES[vtype] * len(values)


def float_rows(channel: str, rows: Any) -> tuple[list[npt.NDArray[np.float64]], int]:
    """Normalise double-array rows: a 2-D array or a sequence of 1-D sequences."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        if rows.dtype.kind not in "fiu":
            raise InvalidTypeError(f"channel {channel!r}: double-array rows must be numeric, got dtype {rows.dtype}")
        if rows.dtype.kind in "iu" and rows.size and (int(rows.max()) > _EXACT_INT or int(rows.min()) < -_EXACT_INT):
            _check_exact_ints(channel, rows.ravel().tolist())
        arr = np.array(rows, dtype=np.float64, order="C")  # a copy: callers may reuse their array
        return list(arr), value_bytes(ValueType.DOUBLE_ARRAY, arr)
    out = [float_array_row(channel, r) for r in rows]
    return out, value_bytes(ValueType.DOUBLE_ARRAY, out)


_BYTES_ONLY = {bytes}


def double_rows_column(rows: list[Any]) -> Any:
    """A tail of double-array rows as a column: one (rows, width) float64 matrix when every row
    is a :func:`float_row` of one width (the common case of ``enqueue_float_array`` with lists:
    one join instead of an ndarray per row, and the encoders take the matrix in one piece), else
    a list of 1-D float64 arrays, as ``SeriesBatch`` also allows."""
    # Types and lengths tested in C passes over the rows, not a generator step a row.
    if rows and set(map(type, rows)) == _BYTES_ONLY and len(set(map(len, rows))) == 1:
        size = len(rows[0])
        if size:
            matrix = blocks.empty(len(rows) * (size // 8), np.float64)
            if join_into is None:
                matrix.view(np.uint8)[:] = np.frombuffer(b"".join(rows), dtype=np.uint8)
            else:
                join_into(rows, matrix)
            return matrix.reshape(len(rows), size // 8)
    return [np.frombuffer(r, dtype=np.float64) if type(r) is bytes else r for r in rows]


def float_row(channel: str, row: Any) -> Any:
    """One double-array value for a series' tail, copied (the caller may reuse its list).

    A list becomes its doubles packed in native order, as ``bytes``: checked and converted in C,
    several times cheaper than an ndarray for short rows, and a spilled tail of them becomes one
    2-D column (:func:`double_rows_column`). Anything else becomes a fresh 1-D float64 ndarray.
    (``bytes`` is never a double-array value as given: :func:`float_array_row` refuses it.)
    """
    if type(row) is list:  # the common case, without the slower abstract-type checks
        n = len(row)
        packer = _ROW_PACKERS.get(n) or _row_packer(n)
        try:
            # struct converts a list of numbers with array('d', row)'s rules (__float__, then
            # __index__) at less cost.
            packed = packer(*row)
        except struct.error as exc:
            raise _not_numbers(channel, row, exc) from None
        # Prove that no int lost precision: an int beyond 2**53 (a Python or a numpy one) becomes
        # a double of magnitude 2**53 or more. A double's top byte holds its sign and the top
        # seven bits of its exponent, so one C-level pass over the top bytes finds every double
        # of 2**49 or more (NaN and inf too), and only a row holding one is looked at element
        # by element. (A list comparison missed numpy ints, which compare with floats lossily.)
        if packed[_TOP_BYTE::8].translate(None, _TOP_BYTES_BELOW_2_49):
            _check_exact_ints(channel, row)
        # Kept as bytes: an array('d') of them would cost as much again as the packing.
        # Not checked here, as it would cost a pass over the row: a numpy complex number, which
        # struct packs as its real part (numpy warns ComplexWarning).
        # Tuples, ndarrays and every other sequence are checked (float_array_row).
        return packed
    return float_array_row(channel, row)


#: Where a packed double's sign-and-exponent byte is, and the values it has for a magnitude
#: under 2**49 (biased exponent under 0x430: 0x43 in its top seven bits).
_TOP_BYTE = 7 if sys.byteorder == "little" else 0
_TOP_BYTES_BELOW_2_49 = bytes(b for b in range(256) if (b & 0x7F) < 0x43)
#: Row length -> its struct packer ("<n>d"), for the row lengths seen (at most _PACKERS_KEPT).
_ROW_PACKERS: dict[int, Callable[..., bytes]] = {}
_PACKERS_KEPT = 4096


def _not_numbers(channel: str, row: list[Any], exc: Exception) -> InvalidTypeError:
    """The error for a row struct refused: array('d')'s message where it has one (struct's
    says only "required argument is not a float", also for an int too large)."""
    try:
        _array("d", row)
    except (TypeError, ValueError, OverflowError) as better:
        exc = better
    return InvalidTypeError(f"channel {channel!r}: a double array must be a sequence of numbers: {exc}")


def _complex(channel: str, row: Any) -> InvalidTypeError:
    bad = next((v for v in row if isinstance(v, (complex, np.complexfloating))), None)
    got = f"complex {bad!r:.80}" if bad is not None else "complex numbers"
    return InvalidTypeError(f"channel {channel!r}: a double array must hold real numbers, got {got}")


def _row_packer(n: int) -> Callable[..., bytes]:
    pack = struct.Struct(f"={n}d").pack
    if len(_ROW_PACKERS) < _PACKERS_KEPT:
        _ROW_PACKERS[n] = pack
    return pack


#: Integers up to this magnitude are exact as doubles (a double array holds doubles).
_EXACT_INT = 2**53


def _check_exact_ints(channel: str, row: Sequence[Any]) -> None:
    """Refuse an int the double array would round: beyond 2**53 and not a double itself (2**63
    is one, and passes). An int is anything converted by ``__index__`` (Python and numpy ints,
    pyarrow int scalars, 0-d int arrays), as struct and numpy convert those."""
    for v in row:
        if isinstance(v, (float, np.floating, bool, np.bool_)):
            continue
        if isinstance(v, (complex, np.complexfloating)):
            raise _complex(channel, row)
        try:
            i = operator.index(v)
        except TypeError:
            continue  # converted by __float__ (Decimal, Fraction ...): not an int
        if abs(i) > _EXACT_INT and float(i) != i:
            raise InvalidTypeError(
                f"channel {channel!r}: integer {i} in a double array is not exact as a double "
                f"(beyond 2**53); send it as its own int64/uint64 series or as a float"
            )


def float_array_row(channel: str, row: Any) -> npt.NDArray[np.float64]:
    """One double-array value as a fresh 1-D float64 array (the caller may reuse its list)."""
    if isinstance(row, (str, bytes, Mapping)):
        raise InvalidTypeError(f"channel {channel!r}: a double array must be a sequence of numbers, got {row!r:.80}")
    if isinstance(row, np.ndarray) and row.dtype.kind in "iu":
        if row.size and (int(row.max()) > _EXACT_INT or int(row.min()) < -_EXACT_INT):
            _check_exact_ints(channel, row.ravel().tolist())
    elif isinstance(row, np.ndarray) and row.dtype.kind == "c":
        raise InvalidTypeError(f"channel {channel!r}: a double array must hold real numbers, got dtype {row.dtype}")
    elif isinstance(row, np.ndarray) and row.dtype.kind == "O":
        _check_exact_ints(channel, row.ravel().tolist())
    elif not isinstance(row, (np.ndarray, _array)):
        _check_exact_ints(channel, row)
    refuse_masked(channel, "a double array", row)
    try:
        arr = np.array(row, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidTypeError(f"channel {channel!r}: a double array must be a sequence of numbers: {exc}") from None
    if not (isinstance(row, np.ndarray) and row.dtype.kind in "fiu") and np.isnan(arr).any():
        # numpy makes None NaN: only a NaN given as a float is one.
        items = row.ravel().tolist() if isinstance(row, np.ndarray) else list(row)
        missing = next((i for i, v in enumerate(items) if v is None), None)
        if missing is not None:
            raise InvalidTypeError(
                f"channel {channel!r}: a double array holds None at index {missing}: a missing element has no "
                "double; give float('nan') if NaN is meant, or drop the point"
            )
    if arr.ndim != 1:
        raise InvalidTypeError(f"channel {channel!r}: a double array must be 1-D, got shape {arr.shape}")
    return arr


def string_row(channel: str, row: Any) -> tuple[str, ...]:
    """One string-array value as a fresh tuple of str (the caller may reuse its list).

    A tuple, not a list: the garbage collector stops tracking a tuple of strs at its first
    collection, where it walks a list's strings at every collection for as long as the row is
    buffered (docs/benchmarks.md, "Measurements behind design choices").
    """
    out: tuple[Any, ...]
    if type(row) is list or type(row) is tuple:
        out = tuple(row)
    elif isinstance(row, np.ndarray):
        out = tuple(row.tolist())
    elif isinstance(row, (str, bytes, Mapping)) or not isinstance(row, Sequence):
        raise InvalidTypeError(f"channel {channel!r}: a string array must be a sequence of str, got {row!r:.80}")
    else:
        out = tuple(row)
    try:
        joined = "".join(out)  # one C-level pass: refuses non-str elements
    except TypeError:
        bad = next(v for v in out if not isinstance(v, str))
        raise InvalidTypeError(f"channel {channel!r}: string array element {bad!r:.80} is not a str") from None
    if not joined.isascii():
        check_texts(channel, "string array element", out)
    return out


def describe(value: Any) -> str:
    try:
        vt = ValueType.of_scalar(value).value
    except TypeError:
        vt = type(value).__name__
    return f"{vt} value {value!r:.80}"


_F64 = np.dtype(np.float64)
_I64 = np.dtype(np.int64)
_DOUBLE = ValueType.DOUBLE


_MASKED_ARRAY = np.ma.MaskedArray
#: What to do with a numpy masked array, whose mask numpy's conversions drop.
_MASKED = "numpy drops the mask when converting; pass the unmasked points (e.g. values[~values.mask])"


def refuse_masked(channel: str, what: str, values: Any) -> None:
    """A masked numpy array with a masked element is refused: converting it would land the
    masked slots' data."""
    if isinstance(values, _MASKED_ARRAY) and np.ma.getmaskarray(values).any():
        raise InvalidValueError(f"channel {channel!r}: {what} with masked elements: {_MASKED}")


def column(channel: str, values: Any, pinned: ValueType | None) -> tuple[ValueType, Any, int]:
    """Normalise a batch of values: (value type, values in SeriesBatch form, value bytes)."""
    refuse_masked(channel, "values", values)
    if type(values) is np.ndarray and values.dtype == _F64 and values.ndim == 1:
        # The common numpy case first, without the general dispatch below.
        check_pin(channel, pinned, ValueType.DOUBLE)
        return ValueType.DOUBLE, values.copy(), values.size * 8
    if isinstance(values, np.ndarray):
        if values.ndim == 2:
            rows, nbytes = float_rows(channel, values)
            return check_pin(channel, pinned, ValueType.DOUBLE_ARRAY), rows, nbytes
        if values.ndim != 1:
            raise InvalidTypeError(f"channel {channel!r}: values must be 1-D or 2-D, got shape {values.shape}")
        if values.dtype.kind != "O":
            try:
                vt = ValueType.of_dtype(values.dtype)
            except TypeError as exc:
                raise InvalidTypeError(f"channel {channel!r}: {exc}") from None
            if vt is ValueType.INT64 and pinned is ValueType.UINT64 and values.dtype.kind in "iu":
                if values.size and values.min() < 0:
                    raise conflict(channel, pinned, "negative int64 values")
                vt = ValueType.UINT64
            vt = check_pin(channel, pinned, vt)
            if vt is ValueType.STRING:
                out = values.astype(str).tolist()
                check_texts(channel, "string", out)
                return vt, out, value_bytes(vt, out)
            arr = np.array(values, dtype=vt.numpy_dtype, copy=True)
            return vt, arr, value_bytes(vt, arr)
        values = values.tolist()
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Sequence, np.ndarray)):
        if not hasattr(values, "__len__") or isinstance(values, (str, bytes, Mapping)):
            raise InvalidTypeError(
                f"channel {channel!r}: values must be a sequence or numpy array, got {type(values).__name__}"
            )
        values = list(values)
    if not len(values):
        return pinned or ValueType.DOUBLE, np.empty(0), 0
    first = values[0]
    if isinstance(first, Mapping):
        vt = check_pin(channel, pinned, ValueType.STRUCT)
        out = [struct_json(channel, v) for v in values]
        return vt, out, value_bytes(vt, out)
    if isinstance(first, np.ndarray) or (isinstance(first, Sequence) and not isinstance(first, (str, bytes))):
        inner = first[0] if len(first) else None
        if isinstance(inner, str):
            vt = check_pin(channel, pinned, ValueType.STRING_ARRAY)
            srows = [string_row(channel, r) for r in values]
            return vt, srows, value_bytes(vt, srows)
        vt = check_pin(channel, pinned, ValueType.DOUBLE_ARRAY)
        frows, nbytes = float_rows(channel, values)
        return vt, frows, nbytes
    try:
        vt = ValueType.of_scalar(first)
    except TypeError as exc:
        raise InvalidTypeError(f"channel {channel!r}: values[0]: {exc}") from None
    if vt is ValueType.INT64 and pinned is ValueType.UINT64:
        vt = ValueType.UINT64
    elif vt is ValueType.INT64 and pinned is None and type(first) is int:
        # A Python int column is int64 unless some value needs uint64.
        try:
            np.array(values, dtype=np.int64)
        except OverflowError:
            vt = ValueType.UINT64
        except (TypeError, ValueError):
            pass  # a value that is no int: the conversion below names it
    vt = check_pin(channel, pinned, vt)
    conv = SCALAR_CONVERTERS[vt]
    try:
        out = [conv(v) for v in values]
    except UnicodeEncodeError:
        check_texts(channel, "string", values)
        raise
    except Mismatch:
        for i, v in enumerate(values):
            try:
                conv(v)
            except Mismatch:
                raise SeriesTypeError(
                    f"channel {channel!r}: values[{i}] is a {describe(v)} in a {vt.value} column"
                ) from None
        raise  # pragma: no cover
    if vt is ValueType.STRING:
        return vt, out, value_bytes(vt, out)
    arr = np.array(out, dtype=vt.numpy_dtype)
    return vt, arr, value_bytes(vt, arr)


def conflict(channel: str, pinned: ValueType, got: str) -> SeriesTypeError:
    return SeriesTypeError(f"series {channel!r} is pinned to {pinned.value} by its first value; got {got}")


def check_pin(channel: str, pinned: ValueType | None, vt: ValueType) -> ValueType:
    if pinned is not None and pinned is not vt:
        raise conflict(channel, pinned, vt.value)
    return vt


def arrow_column(name: str, col: Any, pinned: ValueType | None) -> tuple[ValueType, Any, int]:
    t = col.type
    kind = _ARROW_KINDS.get(t)
    if kind is None:
        kind = _arrow_kind(t)
        if len(_ARROW_KINDS) < 256:  # a table's types repeat; parametrised ones may not
            _ARROW_KINDS[t] = kind
    if kind == "number":
        arr = col.to_numpy(zero_copy_only=False)
        return column(name, arr, pinned)
    if kind == "dictionary":  # a pandas categorical, a polars Categorical/Enum: their values
        return arrow_column(name, col.cast(t.value_type), pinned)
    if kind == "string_view":  # polars' strings
        import pyarrow as pa

        return arrow_column(name, col.cast(pa.large_string()), pinned)
    if kind == "string":
        out = col.to_pylist()
        return check_pin(name, pinned, ValueType.STRING), out, value_bytes(ValueType.STRING, out)
    if kind == "string_list":
        rows = [string_row(name, r) for r in col.to_pylist()]  # refuses a null item, naming it
        return check_pin(name, pinned, ValueType.STRING_ARRAY), rows, value_bytes(ValueType.STRING_ARRAY, rows)
    if kind == "number_list":
        import pyarrow.compute as pc

        if pc.list_flatten(col).null_count:  # to_numpy would give NaN for it
            raise InvalidValueError(
                f"column {name!r}: a double array holds a null element: a missing element has no double; "
                "give NaN if NaN is meant, or drop the row"
            )
        frows = [np.asarray(r.values.to_numpy(zero_copy_only=False), dtype=np.float64) for r in col]
        return check_pin(name, pinned, ValueType.DOUBLE_ARRAY), frows, value_bytes(ValueType.DOUBLE_ARRAY, frows)
    if kind == "struct":
        out = [struct_json(name, dict(v) if not isinstance(v, dict) else v) for v in col.to_pylist()]
        return check_pin(name, pinned, ValueType.STRUCT), out, value_bytes(ValueType.STRUCT, out)
    raise InvalidTypeError(f"column {name!r} has Arrow type {t}, which has no Nominal type")


#: Arrow type -> how arrow_column converts it (pyarrow's type tests are Python calls, three to
#: five a column; a table of 50 columns paid them 50 times).
_ARROW_KINDS: dict[Any, str] = {}


def _arrow_kind(t: Any) -> str:
    import pyarrow as pa

    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_dictionary(t):
        return "dictionary"
    if getattr(pa.types, "is_string_view", lambda _: False)(t):
        return "string_view"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        vtype = t.value_type
        if (
            pa.types.is_string(vtype)
            or pa.types.is_large_string(vtype)
            or getattr(pa.types, "is_string_view", lambda _: False)(vtype)
        ):
            return "string_list"
        if pa.types.is_floating(vtype) or pa.types.is_integer(vtype):
            return "number_list"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "struct"
    return "none"

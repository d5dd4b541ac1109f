"""Records laid out from columns of runs: what the encoders of many small series share.

An encoder that builds a request of thousands of series, each of a few points, one series at a
time spends its time per series: an object, calls, parts to join. Built from columns instead,
each field of every record is made at once (a column of names, of length varints, of points),
and each record takes a run of each column: :func:`lay_out` then copies the runs in record
order, in one pass in ``gather_runs`` (compiled) or through a numpy byte index where that is
not built. :func:`key_heads` and :func:`by_value` make the columns whose bytes an encoder's own
function defines per key or per value, calling it once per distinct length or value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any

import numpy as np

from beam_nominal._wire._varint import I64, U8
from beam_nominal._wire.batch import DoubleBatches
from beam_nominal._wire.scratch import Scratch
from beam_nominal.model import KeyTuple, SeriesKey

__all__ = [
    "FEW_POINTS",
    "SHORT_SERIES",
    "Column",
    "by_value",
    "double_heads",
    "gather_runs",
    "key_heads",
    "lay_out",
    "pays",
    "plain",
    "short",
]

gather_runs: Callable[[Any, I64, I64, Any], int] | None
try:
    from beam_nominal._pipeline._fastpath import gather_runs
except ImportError:  # the pure build
    gather_runs = None

#: Points a record, on average, up to which the pure build's byte index repays laying out.
FEW_POINTS = 16
#: Points a series, on average, up to which laying a protobuf request out from columns repays.
SHORT_SERIES = 64

#: One field of every record: its bytes, each record's run length, and each record's run start
#: in those bytes (None: the runs follow each other, record by record). Lengths and starts may
#: be one int for every record.
Column = tuple[Any, Any, Any]

_CHANNEL, _TAGS = itemgetter(0), itemgetter(1)
_I8, _F8 = np.dtype(np.int64), np.dtype("<f8")
_NO_TAGS = {()}


def short(points: int, records: int) -> bool:
    """``records`` of ``points`` in all are short series for a protobuf encoder: laid out from
    columns, they cost less than one by one (whose cost a series repays from about
    ``SHORT_SERIES`` points on, as it writes a series' points in one pass; in the pure build,
    from ``FEW_POINTS``, where the layout's gather goes a byte at a time)."""
    return points <= (SHORT_SERIES if gather_runs is not None else FEW_POINTS) * records


def pays(points: int, records: int) -> bool:
    """Laying Avro ``records`` of ``points`` in all out from columns costs less than making them
    one by one: always where ``gather_runs`` copies each run whole; in the pure build, whose
    numpy gather goes a byte at a time, for short records only."""
    return gather_runs is not None or short(points, records)


def plain(timestamps: Any, values: Any) -> bool:
    """The columns are 1-D arrays of int64 and of float64, as the packer cuts them: what a layout
    writes as it is. Any other goes by an encoder's series-by-series path, which converts what
    converts exactly and names the batch of what does not."""
    return (
        type(timestamps) is np.ndarray and timestamps.dtype == _I8 and timestamps.ndim == 1
        and type(values) is np.ndarray and values.dtype == _F8 and values.ndim == 1
    )


def lay_out(columns: Sequence[Column], n: int, scratch: Scratch | None = None) -> memoryview:
    """The ``n`` records, each the runs of ``columns`` in order, back to back: in ``scratch``
    when given (valid until its next use; request-sized arrays made fresh cost more in page
    faults than the copying), else in memory of their own."""
    k = len(columns)
    lens = np.empty((n, k), np.int64)
    starts = np.empty((n, k), np.int64)
    sources: list[U8] = []
    base = 0
    for j, (src, run_lens, run_starts) in enumerate(columns):
        data = np.frombuffer(src, np.uint8) if not isinstance(src, np.ndarray) else src.view(np.uint8).reshape(-1)
        sources.append(data)
        lens[:, j] = run_lens
        col = starts[:, j]
        if run_starts is None:
            np.cumsum(lens[:, j], out=col)
            col -= lens[:, j]
        else:
            col[:] = run_starts
        col += base
        base += data.shape[0]
    src_all = np.concatenate(sources, out=_buffer(scratch, "runs-src", base)) if sources else np.empty(0, np.uint8)
    flat_lens, flat_starts = lens.ravel(), starts.ravel()
    total = int(flat_lens.sum())
    out = _buffer(scratch, "runs-out", total)
    if gather_runs is not None:
        gather_runs(src_all, flat_starts, flat_lens, out)
        return out.data
    # int32 indexes where they fit: the index is the largest array here, and half as wide is
    # half the memory written and read.
    itype: type[np.signedinteger[Any]] = np.int32 if total + base < 2**31 else np.int64
    out_starts = np.cumsum(flat_lens) - flat_lens
    index = np.arange(total, dtype=itype)
    index += np.repeat((flat_starts - out_starts).astype(itype), flat_lens)
    np.take(src_all, index, out=out)
    return out.data


def _buffer(scratch: Scratch | None, name: str, size: int) -> U8:
    return np.empty(size, np.uint8) if scratch is None else scratch.get(name, size)


def double_heads(batches: DoubleBatches, encode: Callable[[SeriesKey], bytes]) -> tuple[list[Column], I64] | None:
    """:func:`key_heads` of a request of double series that a protobuf layout takes: columns
    :func:`plain`, no timestamp before 1970 (the layouts write fixed-width timestamps), and keys
    :func:`key_heads` takes. None, having made nothing, for any other."""
    if not plain(batches.timestamps, batches.values) or int(batches.timestamps.min()) < 0:
        return None
    return key_heads(batches.keys, encode)


def key_heads(keys: Sequence[KeyTuple], encode: Callable[[SeriesKey], bytes]) -> tuple[list[Column], I64] | None:
    """The columns of each key's bytes as ``encode`` writes them, and each key's size, for keys
    of ASCII channels without tags (tags ``()``): a channel's bytes are its name after a prefix
    that depends on the name's length only, which ``encode`` makes once per length (two columns:
    prefixes, names). None, having made nothing, for any other key (the caller encodes those one
    by one)."""
    try:
        # Equal to (), not only false: None or an array of pairs is for that path to name.
        if set(map(_TAGS, keys)) != _NO_TAGS:
            return None
        names = list(map(_CHANNEL, keys))
        joined = "".join(names)
    except (TypeError, IndexError):
        return None
    if not joined.isascii():
        return None
    # str.__len__, not len: the length of the text joined, whatever a str subclass's __len__ says.
    name_lens = np.fromiter(map(str.__len__, names), np.int64, len(names))
    if name_lens.shape[0] and not name_lens.min():
        return None  # an empty channel: the encoder's own path names it
    try:
        prefixes, prefix_lens, prefix_at = by_value(name_lens, lambda size: encode(SeriesKey.of("c" * size))[:-size])
    except ValueError:  # a name too long: the encoder's own path names it
        return None
    return [(prefixes, prefix_lens, prefix_at), (joined.encode(), name_lens, None)], prefix_lens + name_lens


def by_value(values: I64, make: Callable[[int], bytes]) -> tuple[bytes, I64, I64]:
    """The column of ``make(v)`` for each of ``values``, ``make`` called once per distinct value:
    (the distinct results joined, each value's run length, each value's run start)."""
    if values.shape[0] == 0:
        return b"", np.empty(0, np.int64), np.empty(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if lo == hi:
        one = make(lo)
        return one, np.full(values.shape[0], len(one), np.int64), np.zeros(values.shape[0], np.int64)
    uniq, inverse = np.unique(values, return_inverse=True)
    made = [make(v) for v in uniq.tolist()]
    sizes = np.fromiter(map(len, made), np.int64, len(made))
    at = np.cumsum(sizes) - sizes
    return b"".join(made), sizes[inverse], at[inverse]

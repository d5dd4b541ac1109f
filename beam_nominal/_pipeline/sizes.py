"""The byte estimates a stream budgets with: what a point, a series and a request are taken to
cost once encoded. One definition each; staging, the buffer and the packer all use these.

They are estimates for cutting requests to ``max_request_bytes``, not exact sizes: the encoders
write fixed-width timestamps (``TS_BYTES``) and a value in at most ``FIXED_VALUE_BYTES``; text
costs its UTF-8 bytes and a small length prefix.
"""

from __future__ import annotations

from beam_nominal.model import SeriesKey, ValueType

__all__ = [
    "ARRAY_ROW_BYTES",
    "DOUBLE_BYTES",
    "DOUBLE_POINT_BYTES",
    "FIXED_VALUE_BYTES",
    "POINT_BYTES",
    "SERIES_OVERHEAD",
    "STRING_ITEM_BYTES",
    "TEXT_VALUE_BYTES",
    "TS_BYTES",
    "double_bytes",
    "series_overhead",
]

#: One timestamp (the fast encoders write fixed-width timestamps).
TS_BYTES = 16
#: One double (a double value, or an item of a double array).
DOUBLE_BYTES = 8
#: One value of the fixed-width types.
FIXED_VALUE_BYTES = {ValueType.DOUBLE: DOUBLE_BYTES, ValueType.INT64: 10, ValueType.UINT64: 10}
#: One double point: its timestamp and its value.
DOUBLE_POINT_BYTES = TS_BYTES + DOUBLE_BYTES
#: One single point of any type before its value's own bytes (text, array items) are added:
#: a timestamp and a value's framing, as much as a double point.
POINT_BYTES = DOUBLE_POINT_BYTES
#: A text value's framing (string or struct), on top of its UTF-8 bytes.
TEXT_VALUE_BYTES = 3
#: A string-array item's framing, on top of its UTF-8 bytes.
STRING_ITEM_BYTES = 2
#: An array row's framing (double or string array), on top of its items.
ARRAY_ROW_BYTES = 4
#: One series' header in a request, before its name and tags.
SERIES_OVERHEAD = 24


def double_bytes(points: int) -> int:
    """Estimated request bytes of ``points`` double points."""
    return DOUBLE_POINT_BYTES * points


def series_overhead(key: SeriesKey) -> int:
    """Estimated request bytes of a series' header: its name and tags."""
    if not key.tags:
        return SERIES_OVERHEAD + len(key.channel)
    return SERIES_OVERHEAD + len(key.channel) + sum(len(k) + len(v) + 4 for k, v in key.tags)

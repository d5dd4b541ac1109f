"""Cut buffered series into requests up to a byte and point budget.

Many small series share one request (far cheaper than a message per series); a long series is
split across requests. Cuts are deterministic: they depend
only on what is buffered (which depends only on input order) and the budget, so a retried Beam
bundle produces byte-identical requests and therefore the same idempotency keys. Each request
carries the estimated bytes it took off the buffer (``Request.buffered_bytes``), which the
stream's budget gets back when the request is settled.

A series holding one chunk goes into the request as it is (the columns of a block of wide
records not all floats are rows of one transposed matrix sharing one timestamps array,
``staging.py``). Loose points (single doubles of many
series and the rows of wide records of floats, ``buffer.py``) are grouped by series once per cut,
and a request of them is a :class:`DoubleBatches` over one run of the sorted columns: nothing is
made per series.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

import numpy as np

from beam_nominal._pipeline.buffer import Buffer
from beam_nominal._pipeline.sizes import DOUBLE_POINT_BYTES, SERIES_OVERHEAD, series_overhead
from beam_nominal._wire.batch import DoubleBatches, SeriesBatch, new_batch
from beam_nominal.model import ValueType
from beam_nominal.targets.base import Request

__all__ = ["cut_requests"]

_DOUBLE = ValueType.DOUBLE


def cut_requests(
    buffer: Buffer,
    *,
    dataset_rid: str,
    max_bytes: int,
    max_points: int,
    final: bool,
    next_seq: int,
    source_name: str | None = None,
) -> list[Request]:
    """Take requests off ``buffer``, each carrying the estimated bytes it takes off the buffer
    budget (:attr:`Request.buffered_bytes`).

    With ``final=False`` only full requests are cut (the buffer keeps less than one request's
    worth); with ``final=True`` everything is cut, the last request possibly partial.

    Args:
        buffer: the buffer to take from (mutated).
        dataset_rid: rid every request carries.
        max_bytes: estimated encoded bytes per request.
        max_points: points per request.
        final: cut the remainder too.
        next_seq: sequence number of the first request cut.
        source_name: optional source name carried by each request.
    """
    if not final and buffer.nbytes < max_bytes and buffer.points < max_points:
        return []
    if buffer.loose:
        if buffer.points == buffer.loose_points:
            return _cut_loose(buffer, dataset_rid, max_bytes, max_points, final, next_seq, source_name)
        buffer._spill_loose()
    requests: list[Request] = []
    batches: list[SeriesBatch] = []
    room_bytes, room_points, taken_bytes = max_bytes, max_points, 0

    def emit() -> None:
        nonlocal batches, room_bytes, room_points, taken_bytes
        seq = next_seq + len(requests)
        requests.append(Request(dataset_rid, batches, source_name, seq, buffered_bytes=taken_bytes))
        batches, room_bytes, room_points, taken_bytes = [], max_bytes, max_points, 0

    for s in list(buffer.pending()):
        while s.points:
            if not final and buffer.nbytes < max_bytes and buffer.points < max_points and not batches:
                return requests
            overhead = s.overhead
            avail = room_bytes - overhead
            points, nbytes = s.points, s.nbytes
            if nbytes <= avail and points <= room_points and nbytes >= points:
                # The whole series fits: what the general formula gives, without its calls
                # (per_point * points <= nbytes <= avail, so avail // per_point >= points).
                n = points
            else:
                per_point = max(1, nbytes // points)
                n = min(points, room_points, max(0, avail) // per_point)
            if n <= 0:
                if batches:
                    emit()
                    continue
                n = 1  # a single point larger than the budget still has to go somewhere
            ts, vals, nbytes = s.take(n)
            buffer.points -= n
            buffer.nbytes -= nbytes
            batches.append(new_batch(s.key, s.vtype, ts, vals))
            room_bytes -= overhead + nbytes
            room_points -= n
            taken_bytes += nbytes
            if room_points <= 0 or room_bytes <= overhead:
                emit()
    if batches:
        # Final: the partial remainder. Not final: the budget was met up to estimate rounding.
        emit()
    return requests


_CHANNEL, _TAGS = itemgetter(0), itemgetter(1)


def _overheads(keys: list[Any]) -> Any:
    """``series_overhead`` of each key, as an int64 array: the channels' lengths counted in C,
    the tags of the (rare) tagged keys one by one."""
    n = len(keys)
    out = np.fromiter(map(len, map(_CHANNEL, keys)), np.int64, n)
    out += SERIES_OVERHEAD
    tagged = np.flatnonzero(np.fromiter(map(len, map(_TAGS, keys)), np.int64, n))
    for i in tagged.tolist():
        out[i] = series_overhead(keys[i])
    return out


def _cut_loose(
    buffer: Buffer,
    dataset_rid: str,
    max_bytes: int,
    max_points: int,
    final: bool,
    next_seq: int,
    source_name: str | None,
) -> list[Request]:
    """:func:`cut_requests` of a buffer holding loose points only: series in code order, each
    request filled with whole series up to the budget (found by a search of the running sums,
    not series by series) and then the part of the next series that fits. A request's points
    are one run of the columns sorted once, so its batches are a :class:`DoubleBatches` of
    views: nothing is made per series. What a non-final cut leaves goes back to the buffer."""
    series = buffer.loose_series
    codes, ts, vals = buffer.take_loose()
    total = len(codes)
    cut_at = np.flatnonzero(codes[1:] != codes[:-1]) + 1
    starts_arr = np.concatenate(([0], cut_at))
    counts_arr = np.diff(np.append(starts_arr, total))
    keys = list(map(series.__getitem__, codes[starts_arr].tolist()))
    per_point = DOUBLE_POINT_BYTES
    overheads = _overheads(keys)
    cum_bytes = np.cumsum(overheads + counts_arr * per_point)
    cum_points = np.cumsum(counts_arr)
    starts, counts, ovs = starts_arr.tolist(), counts_arr.tolist(), overheads.tolist()
    groups = len(keys)
    requests: list[Request] = []
    g = 0
    done = 0  # points of series g already cut
    while g < groups:
        at = starts[g] + done
        left = total - at
        if not final and left * per_point < max_bytes and left < max_points:
            buffer.put_back_loose(codes[at:], ts[at:], vals[at:], left * per_point)
            return requests
        # The request's series: a first one (g0, the rest of a series split by the last
        # request, or whole), whole ones up to ``end``, and the part of the next that fits.
        g0, first = g, counts[g] - done
        room_bytes, room_points = max_bytes, max_points
        n = min(first, room_points, max(0, room_bytes - ovs[g]) // per_point) or 1
        room_bytes -= ovs[g] + n * per_point
        room_points -= n
        head, whole = n, n == first
        if whole:
            g, done = g + 1, 0
            if g < groups:
                end = min(
                    int(np.searchsorted(cum_bytes, int(cum_bytes[g - 1]) + room_bytes, "right")),
                    int(np.searchsorted(cum_points, int(cum_points[g - 1]) + room_points, "right")),
                )
                if end > g:
                    room_bytes -= int(cum_bytes[end - 1]) - int(cum_bytes[g - 1])
                    room_points -= int(cum_points[end - 1]) - int(cum_points[g - 1])
                    g = end
            tail = 0
            if g < groups:
                # The part of the next series that fits.
                tail = min(counts[g], room_points, max(0, room_bytes - ovs[g]) // per_point)
                room_points -= tail
            req_counts = counts_arr[g0 : g + (tail > 0)].copy()
            req_counts[0] = head
            if tail:
                req_counts[-1] = tail
                done = tail
                if done == counts[g]:
                    g, done = g + 1, 0
        else:
            done += n
            req_counts = np.array([head], np.int64)
        taken = max_points - room_points
        batches = DoubleBatches(
            keys[g0 : g0 + len(req_counts)], req_counts, ts[at : at + taken], vals[at : at + taken]
        )
        seq = next_seq + len(requests)
        requests.append(Request(dataset_rid, batches, source_name, seq, buffered_bytes=taken * per_point))
    return requests

"""The idempotency ledger of the local server's write path: which request may write now.

Under the dataset's condition variable a writer checks its series types against the stored ones,
waits while a write of the same idempotency key, or one pinning a series type it disagrees with,
is in progress (its outcome decides whether this one is a duplicate or a conflict), and then
claims its key and pins its new series types until its commit is published or fails. A key
already committed makes the request a duplicate, nothing claimed or written, when its points are
the stored request's (same points digest); other points under a stored key are refused
(:class:`IdempotencyKeyReusedError`): storing nothing and answering OK would drop them silently.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence

from beam_nominal._wire.batch import MalformedBatchError, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server._format import points_digest
from beam_nominal.server._index import _Dataset

#: Most bytes of refused-batch names (``_wire.metadata.rejected_json``) one refusal carries: gRPC
#: sends them as trailing metadata, which a client with default settings refuses past 16 KiB
#: (and at random past 8 KiB) with RESOURCE_EXHAUSTED, a retryable code: the whole request,
#: its good series too, would be retried for the whole budget and lost (300 refused series of
#: ~130-character reasons made 38 KiB). HTTP clients read a bounded answer too.
_MAX_NAMED_BYTES = 6 * 1024
#: Longest reason named (a series key with long tags makes a long reason).
_MAX_REASON = 1024
#: JSON framing of one named batch: ``{"batch": 123456, "reason": }, ``.
_ENTRY_BYTES = 32


class IdempotencyKeyReusedError(ValueError):
    """A stored idempotency key sent again with other points; nothing of this request is stored.

    Not retryable: the same request gets the same answer. The client must pick a new key for new
    data (ours derive it from the body, so they never get this).
    """

    def __init__(self, key: str, rid: str) -> None:
        super().__init__(
            f"idempotency key {key[:100]!r} was already used in dataset {rid[:200]!r} for a request with "
            "different points; nothing of this request was stored (a retry must send the same points; "
            "new data needs a new key)"
        )
        self.key = key


def _busy(ds: _Dataset, types: Mapping[SeriesKey, ValueType], key: str | None, batches: Sequence[SeriesBatch]) -> bool:
    """Whether to wait for writes in progress (caller holds ``ds.cond``).

    Raises:
        MalformedBatchError: a type conflicting with a stored series.
    """
    busy = key is not None and key in ds.pending_keys
    series, pending_types = ds.series, ds.pending_types
    conflicts: dict[SeriesKey, str] = {}
    for skey, vt in types.items():
        stored = series.get(skey)
        if stored is not None:
            if stored.value_type is not vt:
                conflicts[skey] = (
                    f"value type {vt.value} conflicts with the stored type "
                    f"{stored.value_type.value} of series {skey.describe()}"
                )
            continue
        pending = pending_types.get(skey)
        if pending is not None and pending[0] is not vt:
            busy = True
    if conflicts:
        # Name the refused batches, so the client can send the others again and report these;
        # only as many as fit one answer (a client sending the rest again learns of the next).
        rejected: dict[int, str] = {}
        used = 0
        for i, b in enumerate(batches):
            why = conflicts.get(b.key)
            if why is None:
                continue
            why = why[:_MAX_REASON]
            used += len(json.dumps(why)) + _ENTRY_BYTES
            if rejected and used > _MAX_NAMED_BYTES:
                break
            rejected[i] = why
        first = min(rejected)
        raise MalformedBatchError(first, batches[first].key.channel, rejected[first], rejected)
    return busy


@contextlib.contextmanager
def _reserve(
    ds: _Dataset,
    batches: Sequence[SeriesBatch],
    types: Mapping[SeriesKey, ValueType],
    key: str | None,
) -> Iterator[bool]:
    """Claim the idempotency key and pin new series types for the duration of one write.

    Yields False, claiming nothing, when the key is already stored for the same points.

    Raises:
        IdempotencyKeyReusedError: the key is stored for other points.
        MalformedBatchError: a type conflicting with a stored series.
    """
    new_pins: list[SeriesKey] = []
    with ds.cond:
        # Wait while a write of the same key, or one pinning a type we disagree with, is in
        # progress: its outcome decides whether we are a duplicate or a conflict.
        while not (duplicate := key is not None and key in ds.keys) and _busy(ds, types, key, batches):
            ds.cond.wait()
        if not duplicate:
            if key is not None:
                ds.pending_keys.add(key)
            for skey, vt in types.items():
                if skey not in ds.series:
                    pinned = ds.pending_types.get(skey)
                    ds.pending_types[skey] = (vt, (pinned[1] if pinned else 0) + 1)
                    new_pins.append(skey)
        if duplicate:
            assert key is not None
            # Under the lock, reading the stored commit back: only a key sent again pays, and
            # rarely (a retry, or a client's mistake).
            if ds.stored_digest(key) != points_digest(batches):
                raise IdempotencyKeyReusedError(key, ds.rid)
    if duplicate:
        yield False
        return
    try:
        yield True
    finally:
        with ds.cond:
            if key is not None:
                ds.pending_keys.discard(key)
            for skey in new_pins:
                vt, n = ds.pending_types[skey]
                if n == 1:
                    del ds.pending_types[skey]
                else:
                    ds.pending_types[skey] = (vt, n - 1)
            ds.cond.notify_all()

"""Request validation of the local server: what a request must satisfy before anything is stored.

Every check runs before the write path takes a dataset's lock or touches the disk, so a refused
request leaves nothing behind and the error names what to fix (the rid, or the first bad batch by
index and channel). The rid check also guards the read API: a rid becomes a directory name.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from beam_nominal._wire.batch import MalformedBatchError, SeriesBatch
from beam_nominal.model import MAX_NAME_CHARS, SeriesKey, ValueType

_RID_RE = re.compile(r"[A-Za-z0-9._:-]+")


class InvalidRequestError(ValueError):
    """A request the store refuses as a whole (bad dataset rid); nothing of it is stored."""


def check_dataset_rid(rid: str) -> None:
    """Refuse a dataset rid that cannot safely name a directory.

    Raises:
        InvalidRequestError: empty, over 1024 characters, characters outside ``[A-Za-z0-9._:-]``
            (so no path separators), or ``.`` / ``..``.
    """
    if not rid:
        raise InvalidRequestError("data_source_rid is empty")
    if len(rid) > MAX_NAME_CHARS:
        raise InvalidRequestError(f"data_source_rid is {len(rid)} characters, over {MAX_NAME_CHARS}")
    if not _RID_RE.fullmatch(rid) or rid in (".", ".."):
        raise InvalidRequestError(
            f"data_source_rid {rid[:200]!r} is not a safe identifier "
            "(allowed: letters, digits, '._:-'; not '.' or '..')"
        )


def _check_names(index: int, key: SeriesKey) -> None:
    channel = key.channel
    if not channel:
        raise MalformedBatchError(index, channel, "channel is empty")
    if len(channel) > MAX_NAME_CHARS:
        raise MalformedBatchError(index, channel, f"channel is {len(channel)} characters, over {MAX_NAME_CHARS}")
    for k, v in key.tags:
        if len(k) > MAX_NAME_CHARS:
            raise MalformedBatchError(index, channel, f"tag key {k[:40]!r}... is over {MAX_NAME_CHARS} characters")
        if len(v) > MAX_NAME_CHARS:
            raise MalformedBatchError(
                index, channel, f"value of tag {k[:40]!r} is {len(v)} characters, over {MAX_NAME_CHARS}"
            )


def _validate(batches: Sequence[SeriesBatch]) -> dict[SeriesKey, ValueType]:
    """Check names, counts and one type per series; returns each series' type.

    The usual request passes whole-list checks (C-level passes over the batches); only a request
    that fails one is walked batch by batch to name the first bad batch.

    Raises:
        MalformedBatchError: the first bad batch, by index.
    """
    keys = [b.key for b in batches]
    channels = [k.channel for k in keys]
    types = dict(zip(keys, (b.value_type for b in batches), strict=True))
    ok = (
        all(channels)
        and max(map(len, channels), default=0) <= MAX_NAME_CHARS
        and all(len(k) <= MAX_NAME_CHARS and len(v) <= MAX_NAME_CHARS for t in set(k.tags for k in keys) for k, v in t)
        and list(map(len, batches)) == [len(b.values) for b in batches]
        and len(set(zip(keys, (b.value_type for b in batches), strict=True))) == len(types)
    )
    if ok:
        return types
    first: dict[SeriesKey, tuple[ValueType, int]] = {}
    for i, b in enumerate(batches):
        _check_names(i, b.key)
        if len(b.values) != len(b.timestamps):
            raise MalformedBatchError(i, b.key.channel, f"{len(b.timestamps)} timestamps but {len(b.values)} values")
        vt, j = first.setdefault(b.key, (b.value_type, i))
        if vt is not b.value_type:
            raise MalformedBatchError(
                i,
                b.key.channel,
                f"value type {b.value_type.value} disagrees with batches[{j}] of the same series ({vt.value})",
            )
    raise AssertionError("a request failed a whole-list check but no batch is bad")

"""The in-memory form of one ``ColumnBatch``: what the encoder takes and the decoder gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from beam_nominal.model import SeriesKey, ValueType


@dataclass(frozen=True, slots=True)
class SeriesBatch:
    """All points of one series in one request, as columns.

    ``values`` by type: DOUBLE/INT64/UINT64 a 1-D ndarray of float64/int64/uint64; STRING and
    STRUCT (JSON text) a list of str; DOUBLE_ARRAY a list of 1-D float64 ndarrays, or one
    (rows, width) float64 matrix when all rows share a width; STRING_ARRAY a list of sequences of
    str. ``len(values) == len(timestamps)`` always.
    """

    key: SeriesKey
    value_type: ValueType
    timestamps: npt.NDArray[np.int64]
    values: Any

    def __len__(self) -> int:
        return len(self.timestamps)


class MalformedBatchError(ValueError):
    """A request that cannot be stored as sent; names the batch index and its channel.

    ``rejected`` maps every batch index known to be refused to its reason (at least ``index``):
    a server that finds several (type conflicts with stored series) names them all, so a client
    can send the other batches again and report these.
    """

    def __init__(self, index: int, channel: str, reason: str, rejected: dict[int, str] | None = None) -> None:
        more = f" (and {len(rejected) - 1} more rejected batches)" if rejected and len(rejected) > 1 else ""
        super().__init__(f"batches[{index}] (channel {channel[:200]!r}): {reason}{more}")
        self.index = index
        self.channel = channel
        self.reason = reason
        self.rejected = dict(rejected) if rejected else {index: reason}


@dataclass(frozen=True, slots=True)
class DecodedRequest:
    dataset_rid: str
    source_name: str | None
    batches: list[SeriesBatch]

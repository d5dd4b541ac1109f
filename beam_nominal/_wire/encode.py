"""Encode requests to wire bytes. (Placeholder over the reference codec; the fast numpy encoder replaces it.)"""

from __future__ import annotations

from collections.abc import Sequence

from beam_nominal._wire import reference
from beam_nominal._wire.batch import SeriesBatch


def encode_request(dataset_rid: str, batches: Sequence[SeriesBatch], source_name: str | None = None) -> bytes:
    """Serialise a ``WriteColumnBatchesRequest`` carrying ``batches`` for ``dataset_rid``."""
    return reference.encode(dataset_rid, batches, source_name)

"""Decode request bytes. (Placeholder over the reference codec; the fast numpy decoder replaces it.)"""

from __future__ import annotations

from beam_nominal._wire import reference
from beam_nominal._wire.batch import DecodedRequest


def decode_request(data: bytes) -> DecodedRequest:
    """Parse ``WriteColumnBatchesRequest`` bytes into columns.

    Raises:
        MalformedBatchError: a batch without a value type, or whose counts disagree.
        google.protobuf.message.DecodeError: bytes that are not a valid request.
    """
    return reference.decode(data)

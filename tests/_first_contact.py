"""A stream's first contact with its target (``targets.base.first_contact``) is a write request
without points, marked ``metadata.FIRST_CONTACT``. Fault seams that count or fail write attempts
let it through, so their plans are about the requests that carry data."""

from __future__ import annotations

from typing import Any

from beam_nominal._wire import metadata as md


def http_probe(request: Any) -> bool:
    """Whether an aiohttp request is a first contact."""
    return request.headers.get(md.FIRST_CONTACT) == "1"


def grpc_probe(details: Any) -> bool:
    """Whether a gRPC call (``HandlerCallDetails``) is a first contact."""
    return (md.FIRST_CONTACT, "1") in tuple(details.invocation_metadata or ())

"""gRPC and HTTP names and headers shared by the clients and the local server."""

from __future__ import annotations

import json

import blake3

WRITER_SERVICE = "nominal.channel_writer.v1.NominalChannelWriterService"
WRITE_COLUMN_BATCHES = f"/{WRITER_SERVICE}/WriteColumnBatches"
WRITE_BATCHES = f"/{WRITER_SERVICE}/WriteBatches"

#: Metadata key carrying a request's idempotency key. Servers that do not know it ignore it.
IDEMPOTENCY_KEY = "x-idempotency-key"
AUTHORIZATION = "authorization"
#: Header (gRPC metadata and HTTP) marking a target's first contact (``targets.base.first_contact``):
#: a write request without points, sent before any data, so logs and fault seams can tell it apart.
FIRST_CONTACT = "x-beam-nominal-first-contact"
#: The local server's answer (HTTP response header, gRPC trailing metadata; value "1") to a write
#: whose idempotency key it had already stored for the same points: it stored nothing again.
#: Clients report such points apart from new ones (``DeliveryReport.already_stored_points``).
ALREADY_STORED = "x-beam-nominal-already-stored"

#: The prefix of Nominal's base URL (``https://HOST/api``); the local server serves the HTTP
#: paths below both under it and without it.
HTTP_API_PREFIX = "/api"
#: Nominal's HTTP write API, relative to the base URL. The row form (``WriteRequestNominal``, what
#: every released Nominal client posts) names the dataset in the path; the columnar form
#: (``direct_channel_writer.v2.WriteBatchesRequest``) in its body.
HTTP_WRITE_NOMINAL_PATH = "/storage/writer/v1/nominal/{dataset_rid}"
HTTP_WRITE_COLUMNAR_PATH = "/storage/writer/v1/nominal-columnar"
#: The local server's own JSON description of what it accepts (see ``beam_nominal.server.http``).
HTTP_CAPABILITIES_PATH = "/beam-nominal/v1/capabilities"
#: Request header carrying the idempotency key over HTTP; the server also reads ``IDEMPOTENCY_KEY``.
HTTP_IDEMPOTENCY_KEY = "Idempotency-Key"
PROTOBUF_CONTENT_TYPE = "application/x-protobuf"

#: Largest request the local server accepts, and the gRPC message limit both sides configure.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


#: The local server's answer to a request with batches it refuses for good (a value type that
#: conflicts with a stored series) names them: gRPC trailing metadata under this key, the HTTP
#: JSON error body under ``rejected_batches``; both hold :func:`rejected_json`. Nothing of such a
#: request is stored, so a client may send the other batches again.
REJECTED_BATCHES = "x-beam-nominal-rejected-batches-bin"


def rejected_json(rejected: dict[int, str]) -> list[dict[str, object]]:
    """The rejected batches as JSON values: ``[{"batch": index, "reason": text}, ...]``."""
    return [{"batch": i, "reason": r} for i, r in sorted(rejected.items())]


def parse_rejected(value: object) -> dict[int, str]:
    """Inverse of :func:`rejected_json` (from parsed JSON, or its UTF-8 bytes); anything else,
    from a server that does not name batches, is no batch at all."""
    if isinstance(value, bytes | str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, list):
        return {}
    out: dict[int, str] = {}
    for item in value:
        if isinstance(item, dict) and isinstance(item.get("batch"), int) and not isinstance(item["batch"], bool):
            out[item["batch"]] = str(item.get("reason", ""))
    return out


def idempotency_key(body: bytes | memoryview) -> str:
    """The key of a request: a digest of its bytes (which carry the dataset rid).

    A retried request, or a retried Beam bundle that re-cuts the same requests, gets the same key,
    so a server that records keys stores it once. BLAKE3 rather than SHA-256: as collision-resistant
    and several times faster, and hashing is a large share of the client's CPU on float-array
    requests.
    """
    return blake3.blake3(body).hexdigest()

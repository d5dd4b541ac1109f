"""Child process of the compatibility tests: everything that needs *our* generated modules.

Our stubs and Nominal's published ones register the same proto symbols, so one process cannot
import both into protobuf's default descriptor pool. The test process imports theirs and talks to
this script (same interpreter) over stdin/stdout: each message is an 8-byte big-endian length and a
pickle; a request is ``(command, *args)``, a reply ``("ok", result)`` or ``("error", type, text)``.
"""

from __future__ import annotations

import importlib
import pickle
import struct
import sys
from typing import Any, BinaryIO

# Our generated modules of Nominal's protos; the first also defines the gRPC service.
PROTO_MODULES = [
    "beam_nominal._wire._proto.nominal.channel_writer.v1.nominal_channel_writer_pb2",
    "beam_nominal._wire._proto.nominal.direct_channel_writer.v2.direct_channel_writer_common_pb2",
    "beam_nominal._wire._proto.nominal.direct_channel_writer.v2.direct_nominal_channel_writer_pb2",
    "beam_nominal._wire._proto.nominal.types.time.time_pb2",
    "beam_nominal._wire._proto.nominal.write.nominal_write_pb2",
]

# Codec commands: (module under beam_nominal._wire, function).
CODECS = {
    "encode_fast": ("encode", "encode_request"),
    "encode_generated": ("reference", "encode"),
    "decode_fast": ("decode", "decode_request"),
    "decode_generated": ("reference", "decode"),
    "decode_write_batches": ("decode", "decode_write_batches"),
    "encode_columnar_fast": ("write_batches_v2", "encode_write_batches_v2"),
    "encode_columnar_generated": ("reference_columnar", "encode"),
    "decode_columnar_fast": ("write_batches_v2", "decode_write_batches_v2"),
    "decode_columnar_generated": ("reference_columnar", "decode"),
    "encode_row_fast": ("write_nominal", "encode_write_nominal"),
    "encode_row_generated": ("reference_row", "encode"),
    "decode_row_fast": ("write_nominal", "decode_write_nominal"),
    "decode_row_generated": ("reference_row", "decode"),
}


def _field(f: Any) -> dict[str, Any]:
    return {
        "name": f.name,
        "number": f.number,
        "type": f.type,
        "repeated": f.is_repeated,
        "message_type": f.message_type.full_name if f.message_type else None,
        "oneof": f.containing_oneof.name if f.containing_oneof else None,
        "has_presence": f.has_presence,
        "packed": f.is_packed,
    }


def descriptors(full_names: list[str]) -> dict[str, list[dict[str, Any]] | None]:
    from google.protobuf import descriptor_pool

    for module in PROTO_MODULES:
        importlib.import_module(module)
    pool = descriptor_pool.Default()
    out: dict[str, list[dict[str, Any]] | None] = {}
    for name in full_names:
        try:
            desc = pool.FindMessageTypeByName(name)
        except KeyError:
            out[name] = None
            continue
        out[name] = [_field(f) for f in desc.fields]
    return out


def schema() -> dict[str, Any]:
    """Every message our Nominal proto files define, and our service's methods."""
    modules = [importlib.import_module(m) for m in PROTO_MODULES]
    names: list[str] = []

    def walk(desc: Any) -> None:
        names.append(desc.full_name)
        for nested in desc.nested_types:
            walk(nested)

    for module in modules:
        for desc in module.DESCRIPTOR.message_types_by_name.values():
            walk(desc)
    service = modules[0].DESCRIPTOR.services_by_name["NominalChannelWriterService"]
    methods = {m.name: (m.input_type.full_name, m.output_type.full_name) for m in service.methods}
    return {"messages": sorted(names), "methods": methods}


def handle(command: str, *args: Any) -> Any:
    if command in CODECS:
        module, function = CODECS[command]
        return getattr(importlib.import_module(f"beam_nominal._wire.{module}"), function)(*args)
    if command == "descriptors":
        return descriptors(*args)
    if command == "schema":
        return schema()
    if command == "modules":
        return sorted(sys.modules)
    raise ValueError(f"unknown command {command!r}")


def _read(stream: BinaryIO) -> Any:
    head = stream.read(8)
    if len(head) < 8:
        return None
    (size,) = struct.unpack(">Q", head)
    return pickle.loads(stream.read(size))


def _write(stream: BinaryIO, obj: Any) -> None:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack(">Q", len(body)) + body)
    stream.flush()


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the reply channel.
    sys.stdout = sys.stderr
    while (request := _read(stdin)) is not None:
        try:
            reply: Any = ("ok", handle(*request))
        except Exception as exc:
            reply = ("error", type(exc).__name__, str(exc))
        _write(stdout, reply)


if __name__ == "__main__":
    main()

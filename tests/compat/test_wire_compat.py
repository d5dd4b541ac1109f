"""Wire compatibility with Nominal's published protos (``nominal-api-protos==0.1495.1``).

Three request forms: the gRPC ``WriteColumnBatchesRequest``, the columnar HTTP body
(``direct_channel_writer.v2.WriteBatchesRequest``) and the row HTTP body
(``io.nominal.scout.api.proto.WriteRequestNominal``). For each, our bytes must parse with their
classes to the values we encoded, and bytes built with their classes must decode with ours.

Runs in ``.venv-compat`` (protobuf 7), built by ``make compat``. This process imports Nominal's
generated classes; our generated modules live in a child process (``_ours_child.py``), because both
register the same proto symbols and one descriptor pool cannot hold both. Bytes and decoded values
cross the process boundary as pickles.
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from beam_nominal._wire.batch import DecodedRequest, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType

nominal_protos = pytest.importorskip("nominal.protos.channel_writer.v1.nominal_channel_writer_pb2")
theirs: Any = nominal_protos
from nominal.protos.direct_channel_writer.v2 import (  # noqa: E402
    direct_nominal_channel_writer_pb2 as their_columnar,
)
from nominal.protos.direct_channel_writer_common.v2 import (  # noqa: E402
    direct_channel_writer_common_pb2 as their_common,
)
from nominal.protos.types.time import time_pb2 as their_time  # noqa: E402
from nominal.protos.write import nominal_write_pb2 as their_row  # noqa: E402

V = ValueType
ROOT = Path(__file__).resolve().parents[2]
CHILD = Path(__file__).with_name("_ours_child.py")


class Ours:
    """Our codec and generated classes, in a child process."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=ROOT
        )

    def __call__(self, command: str, *args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        body = pickle.dumps((command, *args), protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack(">Q", len(body)) + body)
        self.proc.stdin.flush()
        head = self.proc.stdout.read(8)
        assert len(head) == 8, f"child exited with {self.proc.poll()}"
        reply = pickle.loads(self.proc.stdout.read(struct.unpack(">Q", head)[0]))
        if reply[0] == "error":
            raise AssertionError(f"child raised {reply[1]}: {reply[2]}")
        return reply[1]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def ours() -> Iterator[Ours]:
    child = Ours()
    try:
        yield child
    finally:
        child.close()


# ---------------------------------------------------------------------------------------------
# Test data: every value type and the edge values, and a hypothesis strategy
# ---------------------------------------------------------------------------------------------


def _ts(*ns: int) -> np.ndarray:
    return np.array(ns, dtype=np.int64)


EDGE = [
    SeriesBatch(SeriesKey.of("double", {"unit": "m/s", "ünï": "✓"}), V.DOUBLE, _ts(0, 1, 1, -1, 2**62),
                np.array([math.nan, math.inf, -math.inf, -0.0, 1.5])),
    SeriesBatch(SeriesKey.of("int64"), V.INT64, _ts(1, 2, 3, 4),
                np.array([2**53 + 1, -(2**63), 2**63 - 1, -1], dtype=np.int64)),
    SeriesBatch(SeriesKey.of("uint64"), V.UINT64, _ts(1, 2, 3),
                np.array([2**63 + 1, 2**64 - 1, 0], dtype=np.uint64)),
    SeriesBatch(SeriesKey.of("string", {"k": ""}), V.STRING, _ts(5, 5, 6), ["", "日本語 🚀", "héllo"]),
    SeriesBatch(SeriesKey.of("struct"), V.STRUCT, _ts(7), ['{"a": [1, 2.5], "ü": null}']),
    SeriesBatch(SeriesKey.of("double_array"), V.DOUBLE_ARRAY, _ts(1, 2, 3),
                [np.array([]), np.array([math.nan, -0.0, math.inf]), np.arange(20, dtype=np.float64)]),
    SeriesBatch(SeriesKey.of("string_array"), V.STRING_ARRAY, _ts(-(10**18), 2), [[], ["", "ü", "x" * 200]]),
    SeriesBatch(SeriesKey.of("empty"), V.INT64, _ts(), np.array([], dtype=np.int64)),
]

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8)
FLOATS = st.floats(allow_nan=True, allow_infinity=True)


@st.composite
def batches(draw: Any) -> list[SeriesBatch]:
    out = []
    for _ in range(draw(st.integers(0, 4))):
        vt = draw(st.sampled_from(list(ValueType)))
        n = draw(st.integers(0, 5))
        ts = np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), dtype=np.int64)
        values: Any
        if vt is V.DOUBLE:
            values = np.array(draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=np.float64)
        elif vt is V.INT64:
            values = np.array(draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)),
                              dtype=np.int64)
        elif vt is V.UINT64:
            values = np.array(draw(st.lists(st.integers(0, 2**64 - 1), min_size=n, max_size=n)), dtype=np.uint64)
        elif vt in (V.STRING, V.STRUCT):
            values = draw(st.lists(TEXT, min_size=n, max_size=n))
        elif vt is V.DOUBLE_ARRAY:
            values = [np.array(r, dtype=np.float64)
                      for r in draw(st.lists(st.lists(FLOATS, max_size=4), min_size=n, max_size=n))]
        else:
            values = draw(st.lists(st.lists(TEXT, max_size=3), min_size=n, max_size=n))
        key = SeriesKey.of(draw(TEXT.filter(bool)), draw(st.dictionaries(TEXT, TEXT, max_size=2)))
        out.append(SeriesBatch(key, vt, ts, values))
    return out


# ---------------------------------------------------------------------------------------------
# Comparisons: their message vs our input, and our decoded form vs our input
# ---------------------------------------------------------------------------------------------


def _same_floats(want: Any, got: Any, where: str) -> None:
    a = np.asarray(want, dtype=np.float64)
    b = np.asarray(got, dtype=np.float64)
    assert a.shape == b.shape, where
    assert np.array_equal(np.isnan(a), np.isnan(b)), f"{where}: NaN positions"
    ok = ~np.isnan(a)
    assert a[ok].tolist() == b[ok].tolist(), f"{where}: {a} != {b}"
    assert np.signbit(a[ok]).tolist() == np.signbit(b[ok]).tolist(), f"{where}: sign of zero"


# Each form's oneof member of every value type (the array types share one, split below it).
GRPC_MEMBERS = {
    V.DOUBLE: "doubles", V.STRING: "strings", V.INT64: "int64s", V.UINT64: "uint64s", V.STRUCT: "structs",
    V.DOUBLE_ARRAY: "arrays", V.STRING_ARRAY: "arrays",
}
COLUMNAR_MEMBERS = {
    V.DOUBLE: "double_points", V.STRING: "string_points", V.INT64: "int_points", V.UINT64: "uint64_points",
    V.STRUCT: "struct_points", V.DOUBLE_ARRAY: "array_points", V.STRING_ARRAY: "array_points",
}
ROW_MEMBERS = {**COLUMNAR_MEMBERS, V.INT64: "integer_points"}
ARRAY_KINDS = {V.DOUBLE_ARRAY: "double_array_points", V.STRING_ARRAY: "string_array_points"}


def _member(holder: Any, oneof: str, members: dict[ValueType, str], b: SeriesBatch, where: str) -> Any:
    """The message holding ``b``'s values (for arrays, the array kind's), checked to be the right one."""
    which = holder.WhichOneof(oneof)
    assert which == members[b.value_type], f"{where}: oneof {which}"
    member = getattr(holder, which)
    if b.value_type in ARRAY_KINDS:
        assert member.WhichOneof("array_type") == ARRAY_KINDS[b.value_type], where
        member = getattr(member, ARRAY_KINDS[b.value_type])
    return member


def _same_values(b: SeriesBatch, got: list[Any], where: str) -> None:
    """``got`` (values, or rows of array values, from their message) against ``b``'s column."""
    vt = b.value_type
    if vt is V.DOUBLE:
        _same_floats(b.values, got, where)
    elif vt in (V.INT64, V.UINT64):
        assert got == [int(x) for x in b.values], where
    elif vt is V.DOUBLE_ARRAY:
        assert len(got) == len(b.values), where
        for j, (w, g) in enumerate(zip(b.values, got, strict=True)):
            _same_floats(w, g, f"{where} row {j}")
    else:
        assert [list(x) if vt is V.STRING_ARRAY else x for x in got] == [
            list(x) if vt is V.STRING_ARRAY else x for x in b.values
        ], where


def _columns(member: Any, b: SeriesBatch) -> list[Any]:
    """The values of a columnar member message (gRPC ColumnValues' or v2 Points')."""
    if b.value_type in ARRAY_KINDS:
        return [list(p.value) for p in member.points]
    return list(member.points)


def _ns_pairs(b: SeriesBatch) -> list[tuple[int, int]]:
    return [divmod(int(x), 10**9) for x in b.timestamps]


def _same_optional(msg: Any, field: str, want: str | None) -> None:
    assert msg.HasField(field) == (want is not None), field
    assert want is None or getattr(msg, field) == want, field


def check_theirs(msg: Any, rid: str, want: list[SeriesBatch], source: str | None) -> None:
    """Compare a gRPC request parsed by Nominal's classes with the batches it was encoded from."""
    assert msg.data_source_rid == rid
    _same_optional(msg, "source_name", source)
    assert len(msg.batches) == len(want)
    for i, (cb, b) in enumerate(zip(msg.batches, want, strict=True)):
        where = f"batches[{i}]"
        assert (cb.channel, dict(cb.tags)) == (b.key.channel, dict(b.key.tags)), where
        assert [(t.seconds, t.nanos) for t in cb.timestamps] == _ns_pairs(b), where
        _same_values(b, _columns(_member(cb.values, "values", GRPC_MEMBERS, b, where), b), where)


def check_theirs_columnar(msg: Any, rid: str, want: list[SeriesBatch]) -> None:
    """Compare a columnar HTTP body parsed by Nominal's classes with the batches it was encoded from."""
    assert msg.data_source_rid == rid
    assert len(msg.batches) == len(want)
    for i, (rb, b) in enumerate(zip(msg.batches, want, strict=True)):
        where = f"batches[{i}]"
        assert (rb.channel, dict(rb.tags), rb.HasField("unit")) == (b.key.channel, dict(b.key.tags), False), where
        stamps = rb.points.timestamps
        # Both fields are written (presence), even when zero.
        assert all(t.HasField("seconds") and t.HasField("nanos") for t in stamps), where
        assert [(t.seconds, t.nanos) for t in stamps] == _ns_pairs(b), where
        _same_values(b, _columns(_member(rb.points, "points", COLUMNAR_MEMBERS, b, where), b), where)


def check_theirs_row(msg: Any, want: list[SeriesBatch], session: str | None) -> None:
    """Compare a row HTTP body parsed by Nominal's classes with the batches it was encoded from."""
    _same_optional(msg, "session_name", session)
    assert len(msg.series) == len(want)
    for i, (series, b) in enumerate(zip(msg.series, want, strict=True)):
        where = f"series[{i}]"
        assert series.HasField("channel"), where
        assert (series.channel.name, dict(series.tags)) == (b.key.channel, dict(b.key.tags)), where
        points = _member(series.points, "points_type", ROW_MEMBERS, b, where).points
        assert all(p.HasField("timestamp") for p in points), where
        assert [(p.timestamp.seconds, p.timestamp.nanos) for p in points] == _ns_pairs(b), where
        if b.value_type in ARRAY_KINDS:
            got = [list(p.value) for p in points]
        else:
            got = [p.json_string if b.value_type is V.STRUCT else p.value for p in points]
        _same_values(b, got, where)


def check_decoded(got: DecodedRequest, rid: str, want: list[SeriesBatch], source: str | None) -> None:
    assert (got.dataset_rid, got.source_name) == (rid, source)
    assert len(got.batches) == len(want)
    for i, (g, w) in enumerate(zip(got.batches, want, strict=True)):
        where = f"batches[{i}]"
        assert (g.key, g.value_type) == (w.key, w.value_type), where
        assert g.timestamps.dtype == np.int64 and g.timestamps.tolist() == w.timestamps.tolist(), where
        if w.value_type in (V.INT64, V.UINT64):
            assert g.values.dtype == w.value_type.numpy_dtype, where
        elif w.value_type is V.DOUBLE:
            assert g.values.dtype == np.float64, where
        _same_values(w, list(g.values), where)


def _fill(member: Any, b: SeriesBatch) -> None:
    """Set ``b``'s values on a columnar member message of Nominal's (gRPC or v2: same messages)."""
    # An empty series still names its value type.
    member.SetInParent()
    if b.value_type in ARRAY_KINDS:
        for row in b.values:
            member.points.add().value.extend(np.asarray(row).tolist() if b.value_type is V.DOUBLE_ARRAY else row)
    else:
        member.points.extend(b.values.tolist() if isinstance(b.values, np.ndarray) else b.values)


def _member_to_fill(holder: Any, members: dict[ValueType, str], b: SeriesBatch) -> Any:
    member = getattr(holder, members[b.value_type])
    return getattr(member, ARRAY_KINDS[b.value_type]) if b.value_type in ARRAY_KINDS else member


def their_request(rid: str, batches: list[SeriesBatch], source: str | None) -> Any:
    """Build the gRPC request with Nominal's published classes, independently of our code."""
    req = theirs.WriteColumnBatchesRequest(data_source_rid=rid)
    if source is not None:
        req.source_name = source
    for b in batches:
        cb = req.batches.add(channel=b.key.channel, tags=dict(b.key.tags))
        for ns in b.timestamps.tolist():
            t = cb.timestamps.add()
            t.seconds, t.nanos = divmod(ns, 10**9)
        _fill(_member_to_fill(cb.values, GRPC_MEMBERS, b), b)
    return req


def their_columnar_request(rid: str, batches: list[SeriesBatch]) -> Any:
    """The columnar HTTP body built with Nominal's classes, as their clients may send it: a unit
    on every other batch, and on odd points zero seconds or nanos left unset (proto3 optional)."""
    req = their_columnar.WriteBatchesRequest(data_source_rid=rid)
    for i, b in enumerate(batches):
        rb = req.batches.add(channel=b.key.channel, tags=dict(b.key.tags))
        if i % 2:
            rb.unit = "m/s²"
        for j, ns in enumerate(b.timestamps.tolist()):
            t = rb.points.timestamps.add()
            sec, nanos = divmod(ns, 10**9)
            if sec or j % 2 == 0:
                t.seconds = sec
            if nanos or j % 2 == 0:
                t.nanos = nanos
        _fill(_member_to_fill(rb.points, COLUMNAR_MEMBERS, b), b)
    return req


def their_row_request(batches: list[SeriesBatch], session: str | None) -> Any:
    """The row HTTP body built with Nominal's classes: one point message per value."""
    req = their_row.WriteRequestNominal()
    if session is not None:
        req.session_name = session
    for b in batches:
        series = req.series.add(tags=dict(b.key.tags))
        series.channel.name = b.key.channel
        member = _member_to_fill(series.points, ROW_MEMBERS, b)
        member.SetInParent()
        for ns, value in zip(b.timestamps.tolist(), b.values, strict=True):
            p = member.points.add()
            p.timestamp.seconds, p.timestamp.nanos = divmod(ns, 10**9)
            if b.value_type in ARRAY_KINDS:
                p.value.extend(np.asarray(value).tolist() if b.value_type is V.DOUBLE_ARRAY else value)
            elif b.value_type is V.STRUCT:
                p.json_string = value
            else:
                p.value = value.item() if isinstance(value, np.generic) else value
    return req


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_child_has_only_our_light_modules(ours: Ours) -> None:
    ours("decode_fast", ours("encode_fast", "r", EDGE, None))
    ours("decode_columnar_fast", ours("encode_columnar_fast", "r", EDGE))
    ours("decode_row_fast", ours("encode_row_fast", EDGE, None), "r")
    loaded = ours("modules")
    assert not [m for m in loaded if m.split(".")[0] in ("apache_beam", "pyarrow", "nominal")]
    codecs = {"beam_nominal._wire." + m for m in ("encode", "write_batches_v2", "write_nominal")}
    assert codecs <= set(loaded)


@pytest.mark.parametrize("command", ["encode_fast", "encode_generated"])
def test_our_bytes_parse_with_their_classes(ours: Ours, command: str) -> None:
    data = ours(command, "ri.nominal.dataset.1", EDGE, "ünicode source")
    check_theirs(theirs.WriteColumnBatchesRequest.FromString(data), "ri.nominal.dataset.1", EDGE, "ünicode source")


@pytest.mark.parametrize("command", ["decode_fast", "decode_generated"])
def test_their_bytes_decode_with_ours(ours: Ours, command: str) -> None:
    for source in (None, ""):
        data = their_request("rid", EDGE, source).SerializeToString()
        check_decoded(ours(command, data), "rid", EDGE, source)


def test_their_classes_rebuild_our_bytes_to_the_same_values(ours: Ours) -> None:
    # Their parse-and-reserialise (upb canonical form) must still decode to the input with ours.
    data = ours("encode_fast", "rid", EDGE, "s")
    again = theirs.WriteColumnBatchesRequest.FromString(data).SerializeToString(deterministic=True)
    check_decoded(ours("decode_fast", again), "rid", EDGE, "s")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batches(), TEXT, st.none() | TEXT)
def test_random_batches_both_directions(ours: Ours, bs: list[SeriesBatch], rid: str, source: str | None) -> None:
    check_theirs(theirs.WriteColumnBatchesRequest.FromString(ours("encode_fast", rid, bs, source)), rid, bs, source)
    check_decoded(ours("decode_fast", their_request(rid, bs, source).SerializeToString()), rid, bs, source)


def test_their_write_batches_request_decodes(ours: Ours) -> None:
    req = theirs.WriteBatchesRequest(data_source_rid="r")
    rb = req.batches.add(channel="i", tags={"t": "1"})
    for k, v in enumerate([2**53 + 1, -(2**63)]):
        p = rb.points.int64_points.points.add(value=v)
        p.timestamp.seconds, p.timestamp.nanos = k, 5
    rb = req.batches.add(channel="u")
    rb.points.uint64_points.points.add(value=2**64 - 1).timestamp.seconds = 1
    rb = req.batches.add(channel="d")
    rb.points.double_points.points.add(value=math.nan).timestamp.seconds = 1
    rb.points.double_points.points.add(value=-0.0).timestamp.seconds = 2
    rb = req.batches.add(channel="s")
    rb.points.string_points.points.add(value="ü").timestamp.seconds = 1
    rb = req.batches.add(channel="j")
    rb.points.struct_points.points.add(json='{"a":1}').timestamp.seconds = 1
    rb = req.batches.add(channel="da")
    rb.points.array_points.double_array_points.points.add(values=[1.0, math.inf]).timestamp.seconds = 1
    rb = req.batches.add(channel="sa")
    rb.points.array_points.string_array_points.points.add(values=["", "x"]).timestamp.seconds = 1
    want = [
        SeriesBatch(SeriesKey.of("i", {"t": "1"}), V.INT64, _ts(5, 10**9 + 5), np.array([2**53 + 1, -(2**63)])),
        SeriesBatch(SeriesKey.of("u"), V.UINT64, _ts(10**9), np.array([2**64 - 1], dtype=np.uint64)),
        SeriesBatch(SeriesKey.of("d"), V.DOUBLE, _ts(10**9, 2 * 10**9), np.array([math.nan, -0.0])),
        SeriesBatch(SeriesKey.of("s"), V.STRING, _ts(10**9), ["ü"]),
        SeriesBatch(SeriesKey.of("j"), V.STRUCT, _ts(10**9), ['{"a":1}']),
        SeriesBatch(SeriesKey.of("da"), V.DOUBLE_ARRAY, _ts(10**9), [np.array([1.0, math.inf])]),
        SeriesBatch(SeriesKey.of("sa"), V.STRING_ARRAY, _ts(10**9), [["", "x"]]),
    ]
    check_decoded(ours("decode_write_batches", req.SerializeToString()), "r", want, None)


# The messages we define, by full name, in both packages.
OUR_MESSAGES = [
    "nominal.channel_writer.v1." + m
    for m in (
        "WriteColumnBatchesRequest", "WriteColumnBatchesResponse", "ColumnBatch", "ColumnBatch.TagsEntry",
        "ColumnValues", "WriteBatchesRequest", "WriteBatchesResponse", "RowBatch", "RowBatch.TagsEntry",
        "Points", "DoublePoints", "DoublePoint", "StringPoints", "StringPoint", "Int64Points", "Int64Point",
        "Uint64Points", "Uint64Point", "ArrayPoints", "DoubleArrayPoints", "DoubleArrayPoint",
        "StringArrayPoints", "StringArrayPoint", "StructPoints", "StructPoint",
    )
] + [
    "nominal.direct_channel_writer.v2." + m
    for m in (
        "DoublePoints", "StringPoints", "IntPoints", "Uint64Points", "StructPoints", "ArrayPoints",
        "DoubleArrayPoints", "DoubleArrayPoint", "StringArrayPoints", "StringArrayPoint",
        "WriteBatchesRequest", "WriteBatchesResponse", "RecordsBatch", "RecordsBatch.TagsEntry", "Points",
    )
] + [
    "nominal.types.time.Timestamp",
] + [
    "io.nominal.scout.api.proto." + m
    for m in (
        "WriteRequestNominal", "Series", "Series.TagsEntry", "Channel", "Points", "DoublePoints", "StringPoints",
        "IntegerPoints", "Uint64Points", "StructPoints", "DoublePoint", "StringPoint", "IntegerPoint",
        "Uint64Point", "StructPoint", "ArrayPoints", "DoubleArrayPoints", "StringArrayPoints", "DoubleArrayPoint",
        "StringArrayPoint",
    )
]
# Published fields we leave out on purpose (our decoders refuse or skip them).
LEFT_OUT = {"nominal.direct_channel_writer.v2.Points": {4}}  # log_points: we do not store logs


def _their_fields(full_name: str) -> list[dict[str, Any]]:
    # The child's description of a field, so both sides are compared in exactly the same terms.
    from _ours_child import _field
    from google.protobuf import descriptor_pool

    return [_field(f) for f in descriptor_pool.Default().FindMessageTypeByName(full_name).fields]


def test_descriptors_match_the_published_ones(ours: Ours) -> None:
    assert their_common.DESCRIPTOR.package == their_columnar.DESCRIPTOR.package == "nominal.direct_channel_writer.v2"
    assert (their_time.DESCRIPTOR.package, their_row.DESCRIPTOR.package) == (
        "nominal.types.time", "io.nominal.scout.api.proto"
    )
    mine = ours("descriptors", OUR_MESSAGES)
    assert all(mine[name] is not None for name in OUR_MESSAGES), [n for n in OUR_MESSAGES if mine[n] is None]
    for name in OUR_MESSAGES:
        by_number = {f["number"]: f for f in _their_fields(name)}
        for field in mine[name]:
            assert field == by_number.get(field["number"]), f"{name} field {field['number']}"
        ours_numbers = {f["number"] for f in mine[name]}
        assert set(by_number) - ours_numbers == LEFT_OUT.get(name, set()), f"{name}: fields we do not define"


def test_every_message_we_define_is_compared(ours: Ours) -> None:
    assert ours("schema")["messages"] == sorted(OUR_MESSAGES)


def test_service_methods_match(ours: Ours) -> None:
    service = theirs.DESCRIPTOR.services_by_name["NominalChannelWriterService"]
    published = {m.name: (m.input_type.full_name, m.output_type.full_name) for m in service.methods}
    mine = ours("schema")["methods"]
    assert set(mine) == {"WriteBatches", "WriteColumnBatches"}
    for name, signature in mine.items():
        assert published[name] == signature, name


# ---------------------------------------------------------------------------------------------
# The columnar HTTP body: direct_channel_writer.v2.WriteBatchesRequest
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["encode_columnar_fast", "encode_columnar_generated"])
def test_our_columnar_bytes_parse_with_their_classes(ours: Ours, command: str) -> None:
    data = ours(command, "ri.nominal.dataset.1", EDGE)
    check_theirs_columnar(their_columnar.WriteBatchesRequest.FromString(data), "ri.nominal.dataset.1", EDGE)


@pytest.mark.parametrize("command", ["decode_columnar_fast", "decode_columnar_generated"])
def test_their_columnar_bytes_decode_with_ours(ours: Ours, command: str) -> None:
    data = their_columnar_request("rid", EDGE).SerializeToString()
    check_decoded(ours(command, data), "rid", EDGE, None)


def test_their_classes_rebuild_our_columnar_bytes_to_the_same_values(ours: Ours) -> None:
    data = ours("encode_columnar_fast", "rid", EDGE)
    again = their_columnar.WriteBatchesRequest.FromString(data).SerializeToString(deterministic=True)
    check_decoded(ours("decode_columnar_fast", again), "rid", EDGE, None)


@pytest.mark.parametrize("command", ["decode_columnar_fast", "decode_columnar_generated"])
def test_their_log_points_are_refused(ours: Ours, command: str) -> None:
    req = their_columnar_request("rid", EDGE[:1])
    logs = req.batches.add(channel="logs")
    logs.points.timestamps.add(seconds=1, nanos=0)
    logs.points.log_points.points.add().value.message = "engine armed"
    with pytest.raises(AssertionError, match=r"MalformedBatchError: batches\[1\] \(channel 'logs'\): log points"):
        ours(command, req.SerializeToString())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batches(), TEXT)
def test_random_columnar_batches_both_directions(ours: Ours, bs: list[SeriesBatch], rid: str) -> None:
    check_theirs_columnar(their_columnar.WriteBatchesRequest.FromString(ours("encode_columnar_fast", rid, bs)), rid, bs)
    check_decoded(ours("decode_columnar_fast", their_columnar_request(rid, bs).SerializeToString()), rid, bs, None)


# ---------------------------------------------------------------------------------------------
# The row HTTP body: io.nominal.scout.api.proto.WriteRequestNominal
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["encode_row_fast", "encode_row_generated"])
def test_our_row_bytes_parse_with_their_classes(ours: Ours, command: str) -> None:
    data = ours(command, EDGE, "ünicode session")
    check_theirs_row(their_row.WriteRequestNominal.FromString(data), EDGE, "ünicode session")


@pytest.mark.parametrize("command", ["decode_row_fast", "decode_row_generated"])
def test_their_row_bytes_decode_with_ours(ours: Ours, command: str) -> None:
    for session in (None, ""):
        data = their_row_request(EDGE, session).SerializeToString()
        check_decoded(ours(command, data, "ri.from.the.path"), "ri.from.the.path", EDGE, session)


def test_their_classes_rebuild_our_row_bytes_to_the_same_values(ours: Ours) -> None:
    data = ours("encode_row_fast", EDGE, "s")
    again = their_row.WriteRequestNominal.FromString(data).SerializeToString(deterministic=True)
    check_decoded(ours("decode_row_fast", again, "rid"), "rid", EDGE, "s")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(batches(), st.none() | TEXT)
def test_random_row_batches_both_directions(ours: Ours, bs: list[SeriesBatch], session: str | None) -> None:
    check_theirs_row(their_row.WriteRequestNominal.FromString(ours("encode_row_fast", bs, session)), bs, session)
    data = their_row_request(bs, session).SerializeToString()
    check_decoded(ours("decode_row_fast", data, "rid"), "rid", bs, session)

"""Wire compatibility with Nominal's published protos (``nominal-api-protos==0.1495.1``).

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
from nominal.protos.direct_channel_writer_common.v2 import (  # noqa: E402
    direct_channel_writer_common_pb2 as their_common,
)

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


def check_theirs(msg: Any, rid: str, want: list[SeriesBatch], source: str | None) -> None:
    """Compare a request parsed by Nominal's classes with the batches it was encoded from."""
    assert msg.data_source_rid == rid
    assert msg.HasField("source_name") == (source is not None)
    if source is not None:
        assert msg.source_name == source
    assert len(msg.batches) == len(want)
    for i, (cb, b) in enumerate(zip(msg.batches, want, strict=True)):
        where = f"batches[{i}]"
        assert cb.channel == b.key.channel, where
        assert dict(cb.tags) == dict(b.key.tags), where
        assert [(t.seconds, t.nanos) for t in cb.timestamps] == [divmod(int(x), 10**9) for x in b.timestamps]
        vt = b.value_type
        which = cb.values.WhichOneof("values")
        expected_member = {
            V.DOUBLE: "doubles", V.STRING: "strings", V.INT64: "int64s", V.UINT64: "uint64s",
            V.STRUCT: "structs", V.DOUBLE_ARRAY: "arrays", V.STRING_ARRAY: "arrays",
        }[vt]
        assert which == expected_member, f"{where}: oneof {which}"
        if vt is V.DOUBLE:
            _same_floats(b.values, list(cb.values.doubles.points), where)
        elif vt in (V.INT64, V.UINT64):
            assert list(getattr(cb.values, which).points) == [int(x) for x in b.values], where
        elif vt in (V.STRING, V.STRUCT):
            assert list(getattr(cb.values, which).points) == list(b.values), where
        elif vt is V.DOUBLE_ARRAY:
            assert cb.values.arrays.WhichOneof("array_type") == "double_array_points", where
            rows = cb.values.arrays.double_array_points.points
            assert len(rows) == len(b.values), where
            for j, (w, g) in enumerate(zip(b.values, rows, strict=True)):
                _same_floats(w, list(g.value), f"{where} row {j}")
        else:
            assert cb.values.arrays.WhichOneof("array_type") == "string_array_points", where
            assert [list(p.value) for p in cb.values.arrays.string_array_points.points] == [
                list(r) for r in b.values
            ], where


def check_decoded(got: DecodedRequest, rid: str, want: list[SeriesBatch], source: str | None) -> None:
    assert (got.dataset_rid, got.source_name) == (rid, source)
    assert len(got.batches) == len(want)
    for i, (g, w) in enumerate(zip(got.batches, want, strict=True)):
        where = f"batches[{i}]"
        assert (g.key, g.value_type) == (w.key, w.value_type), where
        assert g.timestamps.dtype == np.int64 and g.timestamps.tolist() == w.timestamps.tolist(), where
        if w.value_type is V.DOUBLE:
            assert g.values.dtype == np.float64, where
            _same_floats(w.values, g.values, where)
        elif w.value_type in (V.INT64, V.UINT64):
            assert g.values.dtype == w.value_type.numpy_dtype, where
            assert g.values.tolist() == w.values.tolist(), where
        elif w.value_type is V.DOUBLE_ARRAY:
            assert len(g.values) == len(w.values), where
            for j, (a, b) in enumerate(zip(w.values, g.values, strict=True)):
                _same_floats(a, b, f"{where} row {j}")
        else:
            assert [list(x) if isinstance(x, list) else x for x in g.values] == list(w.values), where


def their_request(rid: str, batches: list[SeriesBatch], source: str | None) -> Any:
    """Build the request with Nominal's published classes, independently of our code."""
    req = theirs.WriteColumnBatchesRequest(data_source_rid=rid)
    if source is not None:
        req.source_name = source
    for b in batches:
        cb = req.batches.add(channel=b.key.channel, tags=dict(b.key.tags))
        for ns in b.timestamps.tolist():
            t = cb.timestamps.add()
            t.seconds, t.nanos = divmod(ns, 10**9)
        vt = b.value_type
        if vt is V.DOUBLE:
            cb.values.doubles.points.extend(b.values.tolist())
        elif vt is V.INT64:
            cb.values.int64s.points.extend(b.values.tolist())
        elif vt is V.UINT64:
            cb.values.uint64s.points.extend(b.values.tolist())
        elif vt is V.STRING:
            cb.values.strings.points.extend(b.values)
        elif vt is V.STRUCT:
            cb.values.structs.points.extend(b.values)
        elif vt is V.DOUBLE_ARRAY:
            points = cb.values.arrays.double_array_points
            points.SetInParent()
            for row in b.values:
                points.points.add().value.extend(row.tolist())
        else:
            points = cb.values.arrays.string_array_points
            points.SetInParent()
            for row in b.values:
                points.points.add().value.extend(row)
    return req


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_child_has_only_our_light_modules(ours: Ours) -> None:
    ours("encode_fast", "r", EDGE, None)
    loaded = ours("modules")
    assert not [m for m in loaded if m.split(".")[0] in ("apache_beam", "pyarrow", "nominal")]
    assert "beam_nominal._wire.encode" in loaded


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
    )
]


def _their_fields(full_name: str) -> list[dict[str, Any]]:
    # The child's description of a field, so both sides are compared in exactly the same terms.
    from _ours_child import _field
    from google.protobuf import descriptor_pool

    return [_field(f) for f in descriptor_pool.Default().FindMessageTypeByName(full_name).fields]


def test_descriptors_match_the_published_ones(ours: Ours) -> None:
    assert their_common.DESCRIPTOR.package == "nominal.direct_channel_writer.v2"
    mine = ours("descriptors", OUR_MESSAGES)
    assert all(mine[name] is not None for name in OUR_MESSAGES), [n for n in OUR_MESSAGES if mine[n] is None]
    for name in OUR_MESSAGES:
        by_number = {f["number"]: f for f in _their_fields(name)}
        for field in mine[name]:
            assert field == by_number.get(field["number"]), f"{name} field {field['number']}"
        assert len(mine[name]) == len(by_number), f"{name}: we define {len(mine[name])} fields, they {len(by_number)}"


def test_every_message_we_define_is_compared(ours: Ours) -> None:
    assert ours("schema")["messages"] == sorted(OUR_MESSAGES)


def test_service_methods_match(ours: Ours) -> None:
    service = theirs.DESCRIPTOR.services_by_name["NominalChannelWriterService"]
    published = {m.name: (m.input_type.full_name, m.output_type.full_name) for m in service.methods}
    mine = ours("schema")["methods"]
    assert set(mine) == {"WriteBatches", "WriteColumnBatches"}
    for name, signature in mine.items():
        assert published[name] == signature, name

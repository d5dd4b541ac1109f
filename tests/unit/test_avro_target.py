"""AvroFileTarget: exact round trips, nominal-streaming's format, durability and failure modes."""

from __future__ import annotations

import json
import math
import pathlib
import struct
import subprocess
import sys
import textwrap
import threading
import zlib
from typing import Any

import cramjam
import fastavro
import numpy as np
import pytest
from _avro_bytes import read_long

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.errors import TargetError
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets.avro import AvroFileTarget, JsonText, read_avro_file
from beam_nominal.targets.base import Request

RID = "ri.catalog.main.dataset.0000-test"
T0 = 1_700_000_000_123_456_789
V = ValueType


def batch(
    channel: str, vt: ValueType, ts: list[int], values: Any, tags: dict[str, str] | None = None
) -> SeriesBatch:
    if vt.numpy_dtype is not None:
        values = np.array(values, dtype=vt.numpy_dtype)
    elif vt is V.DOUBLE_ARRAY:
        values = [np.array(v, dtype=np.float64) for v in values]
    return SeriesBatch(SeriesKey.of(channel, tags), vt, np.array(ts, dtype=np.int64), values)


def request(*batches: SeriesBatch, rid: str = RID) -> Request:
    return Request(rid, list(batches))


def records(path: pathlib.Path) -> list[dict[str, Any]]:
    with open(path, "rb") as f:
        return list(fastavro.reader(f, return_record_name=True))


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


LONG_TEXT = "ä" * 700  # 1,400 UTF-8 bytes: a length prefix of two varint bytes


def all_types() -> list[SeriesBatch]:
    return [
        batch("dbl", V.DOUBLE, [T0, T0, T0 + 1, -5], [1.5, math.nan, -0.0, math.inf], {"unit": "m/s"}),
        batch("i64", V.INT64, [T0, T0 + 1, T0 + 2, T0 + 3], [2**53 + 1, -(2**63), 2**63 - 1, 0]),
        batch("u64", V.UINT64, [T0, T0 + 1], [2**63 - 1, 7]),
        batch("str", V.STRING, [T0, T0 + 1, T0 + 2, T0 + 3], ["", "héllo 🚀", LONG_TEXT, "\x00nul"]),
        batch("dar", V.DOUBLE_ARRAY, [T0, T0 + 1, T0 + 2], [[], [1.0, math.nan, 2**60], [-1e300]]),
        batch("sar", V.STRING_ARRAY, [T0, T0 + 1, T0 + 2], [[], ["", "ü"], ["x"] * 3]),
        batch("st", V.STRUCT, [T0], ['{"a": {"b": [1, 2.5, "c"]}, "ok": true}']),
        batch("tagged", V.DOUBLE, [T0], [3.0], {"z": "", "a": "ß", "m": "1"}),
    ]


def test_every_type_round_trips_exactly(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "all.avro"
    with AvroFileTarget(path, dataset_rid=RID) as target:
        target.send(request(*all_types()))
        assert target.points_written == 22
        assert target.requests_written == 1

    recs = {r["channel"]: r for r in records(path)}
    assert list(recs) == ["dbl", "i64", "u64", "str", "dar", "sar", "st", "tagged"]
    assert recs["dbl"]["timestamps"] == [T0, T0, T0 + 1, -5]
    assert [bits(v) for v in recs["dbl"]["values"]] == [bits(1.5), bits(math.nan), bits(-0.0), bits(math.inf)]
    assert recs["dbl"]["tags"] == {"unit": "m/s"}
    # Written as long, not double: type and exact value both survive.
    assert recs["i64"]["values"] == [2**53 + 1, -(2**63), 2**63 - 1, 0]
    assert all(type(v) is int for v in recs["i64"]["values"])
    assert recs["u64"]["values"] == [2**63 - 1, 7]
    assert recs["str"]["values"] == ["", "héllo 🚀", LONG_TEXT, "\x00nul"]
    dar = recs["dar"]["values"]
    assert [name for name, _ in dar] == ["io.nominal.ingest.DoubleArray"] * 3
    assert [[bits(x) for x in rec["items"]] for _, rec in dar] == [
        [],
        [bits(1.0), bits(math.nan), bits(2.0**60)],
        [bits(-1e300)],
    ]
    assert recs["sar"]["values"] == [
        ("io.nominal.ingest.StringArray", {"items": []}),
        ("io.nominal.ingest.StringArray", {"items": ["", "ü"]}),
        ("io.nominal.ingest.StringArray", {"items": ["x", "x", "x"]}),
    ]
    assert recs["st"]["values"] == [
        ("io.nominal.ingest.JsonStruct", {"json": '{"a": {"b": [1, 2.5, "c"]}, "ok": true}'})
    ]
    assert recs["tagged"]["tags"] == {"z": "", "a": "ß", "m": "1"}
    assert recs["i64"]["tags"] == {}


def test_read_avro_file_groups_by_series(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "read.avro"
    with AvroFileTarget(path) as target:
        target.send(
            request(batch("a", V.INT64, [3, 1], [10, 11], {"k": "v"}), batch("b", V.STRUCT, [1], ["{}"]))
        )
        target.send(request(batch("a", V.INT64, [2], [12], {"k": "v"}), batch("a", V.INT64, [9], [-1])))
    got = read_avro_file(f"file://{path}")
    assert set(got) == {SeriesKey("a", (("k", "v"),)), SeriesKey("b"), SeriesKey("a")}
    ts, vals = got[SeriesKey("a", (("k", "v"),))]
    assert ts.dtype == np.int64 and ts.tolist() == [3, 1, 2]
    assert vals == [10, 11, 12]
    assert got[SeriesKey("a")].values == [-1]
    [struct_value] = got[SeriesKey("b")].values
    assert isinstance(struct_value, JsonText) and struct_value == "{}"


def test_uint64_above_int64_is_refused_permanently_and_file_stays_valid(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "u.avro"
    with AvroFileTarget(path) as target:
        target.send(request(batch("ok", V.DOUBLE, [1], [1.0])))
        with pytest.raises(TargetError) as info:
            target.send(
                request(batch("fine", V.DOUBLE, [1], [2.0]), batch("big", V.UINT64, [1, 2], [5, 2**64 - 1]))
            )
        assert info.value.retryable is False
        assert info.value.code == "uint64_out_of_range"
        assert "18446744073709551615" in str(info.value) and "'big'" in str(info.value)
        target.send(request(batch("after", V.INT64, [3], [3])))
    # Nothing of the refused request landed, not even its valid series.
    assert [(r["channel"], r["values"]) for r in records(path)] == [("ok", [1.0]), ("after", [3])]


def test_integers_as_double_are_exact_or_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "d.avro"
    with AvroFileTarget(path, integers="double") as target:
        exact = batch("i", V.INT64, [1, 2, 3], [2**53, -(2**53), 7])
        target.send(request(exact, batch("u", V.UINT64, [1], [5])))
        with pytest.raises(TargetError) as info:
            target.send(request(batch("i", V.INT64, [4, 5], [1, 2**53 + 1])))
        assert info.value.code == "integer_not_exact" and not info.value.retryable
        assert "9007199254740993" in str(info.value)
    recs = records(path)
    assert [r["values"] for r in recs] == [[2.0**53, -(2.0**53), 7.0], [5.0]]
    assert all(type(v) is float for r in recs for v in r["values"])
    with pytest.raises(ValueError, match="integers='int'"):
        AvroFileTarget(tmp_path / "x.avro", integers="int")


def test_unencodable_string_is_a_permanent_error_naming_the_series(tmp_path: pathlib.Path) -> None:
    with AvroFileTarget(tmp_path / "s.avro") as target, pytest.raises(TargetError) as info:
        target.send(request(batch("bad", V.STRING, [1], ["\ud800"], {"t": "1"})))
    assert info.value.retryable is False and info.value.code == "invalid_request"
    assert "'bad' {t=1}" in str(info.value)


def test_readable_after_each_send_and_appends_across_reopen(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "grow.avro"
    target = AvroFileTarget(path, dataset_rid=RID)
    assert records(path) == []  # a valid empty container from the start
    target.send(request(batch("c", V.DOUBLE, [1], [1.0])))
    assert len(records(path)) == 1  # while the target is still open
    target.send(request(batch("c", V.DOUBLE, [2], [2.0])))
    assert len(records(path)) == 2
    target.close()

    with AvroFileTarget(path, dataset_rid=RID) as again:
        again.send(request(batch("c", V.DOUBLE, [3], [3.0])))
    assert [r["timestamps"][0] for r in records(path)] == [1, 2, 3]
    with AvroFileTarget(path) as adopted:  # no rid given: the file's is kept and enforced
        assert adopted.dataset_rid == RID
        with pytest.raises(TargetError) as info:
            adopted.send(request(batch("c", V.DOUBLE, [4], [4.0]), rid="ri.other"))
        assert info.value.code == "dataset_mismatch" and not info.value.retryable

    with pytest.raises(ValueError, match=r"ri\.other"):
        AvroFileTarget(path, dataset_rid="ri.other")
    with AvroFileTarget(path, dataset_rid="ri.other", overwrite=True) as fresh:
        fresh.send(request(batch("new", V.DOUBLE, [9], [9.0]), rid="ri.other"))
    assert [r["channel"] for r in records(path)] == ["new"]
    with open(path, "rb") as f:
        assert fastavro.reader(f).metadata["nominal.dataset_rid"] == "ri.other"


def test_a_cut_off_last_block_is_refused_on_reopen(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "torn.avro"
    with AvroFileTarget(path) as target:
        target.send(request(batch("c", V.DOUBLE, [1], [1.0])))
        target.send(request(batch("c", V.DOUBLE, np.arange(100).tolist(), np.arange(100.0))))
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.raises(ValueError, match="damaged"):
        AvroFileTarget(path)
    path.write_bytes(b"PAR1 not avro")
    with pytest.raises(ValueError, match="not an Avro"):
        AvroFileTarget(path)


def test_second_writer_on_the_same_file_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "locked.avro"
    with AvroFileTarget(path), pytest.raises(OSError, match="another writer"):
        AvroFileTarget(path)


def test_closed_target_refuses_and_close_is_idempotent(tmp_path: pathlib.Path) -> None:
    target = AvroFileTarget(tmp_path / "c.avro")
    target.close()
    target.close()
    with pytest.raises(TargetError) as info:
        target.send(request(batch("c", V.DOUBLE, [1], [1.0])))
    assert info.value.code == "closed" and not info.value.retryable


@pytest.mark.parametrize("codec", ["snappy", "deflate", "null"])
def test_codecs_are_readable_and_recorded(tmp_path: pathlib.Path, codec: str) -> None:
    path = tmp_path / f"{codec}.avro"
    with AvroFileTarget(path, codec=codec) as target:
        target.send(request(batch("c", V.STRING, [1, 2], ["x" * 50, "y"])))
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        assert reader.codec == codec
        assert [r["values"] for r in reader] == [["x" * 50, "y"]]
    with pytest.raises(ValueError, match="codec 'zstd'"):
        AvroFileTarget(tmp_path / "z.avro", codec="zstd")


def _blocks(data: bytes) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Sync marker and (count, payload) of each block, parsed independently of the target."""
    pos = 0

    def long() -> int:
        nonlocal pos
        value, pos = read_long(data, pos)
        return value

    assert data[:4] == b"Obj\x01"
    pos = 4
    while (count := long()) != 0:
        if count < 0:
            long()  # the block's byte size
        for _ in range(abs(count)):
            for _field in ("key", "value"):
                size = long()  # read before pos is used: long() moves it
                pos += size
    sync = data[pos : pos + 16]
    pos += 16
    blocks = []
    while pos < len(data):
        count, size = long(), long()
        blocks.append((count, data[pos : pos + size]))
        pos += size
        assert data[pos : pos + 16] == sync
        pos += 16
    return sync, blocks


def test_one_block_per_send_with_a_correct_snappy_crc(tmp_path: pathlib.Path) -> None:
    # fastavro skips the CRC; Java Avro (and so Nominal's ingestion) checks it.
    path = tmp_path / "crc.avro"
    with AvroFileTarget(path) as target:
        target.send(request(batch("a", V.DOUBLE, [1, 2], [1.0, 2.0]), batch("b", V.INT64, [1], [1])))
        target.send(request(batch("a", V.STRING, [3], ["three"] * 1)))
        target.send(request(batch("empty", V.DOUBLE, [], [])))  # nothing to write: no block
    _, blocks = _blocks(path.read_bytes())
    assert [count for count, _ in blocks] == [2, 1]
    for _, payload in blocks:
        raw = bytes(cramjam.snappy.decompress_raw(payload[:-4]))
        assert zlib.crc32(raw).to_bytes(4, "big") == payload[-4:]


def test_concurrent_sends_land_every_point_once(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "threads.avro"
    target = AvroFileTarget(path)
    threads_n, sends_n, per = 8, 25, 40

    def work(t: int) -> None:
        for s in range(sends_n):
            base = (t * sends_n + s) * per
            points = list(range(base, base + per))
            target.send(request(batch(f"ch{t % 3}", V.INT64, points, points)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    target.close()
    got = read_avro_file(path)
    seen = sorted(v for series in got.values() for v in series.values)
    assert seen == list(range(threads_n * sends_n * per))
    assert all(series.timestamps.tolist() == series.values for series in got.values())


def test_failed_write_is_cut_off_and_reported(tmp_path: pathlib.Path) -> None:
    # A real short write: RLIMIT_FSIZE makes the kernel refuse bytes past the limit (EFBIG), in a
    # child process so the limit cannot touch the test runner.
    path = tmp_path / "limit.avro"
    script = textwrap.dedent(
        f"""
        import resource, signal, numpy as np
        from beam_nominal.targets.avro import AvroFileTarget
        from beam_nominal.targets.base import Request
        from beam_nominal._wire.batch import SeriesBatch
        from beam_nominal.errors import TargetError
        from beam_nominal.model import SeriesKey, ValueType
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        t = AvroFileTarget({str(path)!r}, codec="null")
        def req(n):
            return Request("r", [SeriesBatch(SeriesKey("c"), ValueType.DOUBLE, np.arange(n), np.ones(n))])
        t.send(req(10))
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            t.send(req(10_000))
        except TargetError as e:
            print("ERR", e.retryable, e.code)
        t.send(req(20))
        t.close()
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ERR", "False", "EFBIG"]
    assert [len(r["values"]) for r in records(path)] == [10, 20]


def test_durability_of_an_acknowledged_send_survives_a_hard_exit(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "exit.avro"
    script = textwrap.dedent(
        f"""
        import os, numpy as np
        from beam_nominal.targets.avro import AvroFileTarget
        from beam_nominal.targets.base import Request
        from beam_nominal._wire.batch import SeriesBatch
        from beam_nominal.model import SeriesKey, ValueType
        t = AvroFileTarget({str(path)!r})
        t.send(Request("r", [SeriesBatch(SeriesKey("c"), ValueType.INT64, np.arange(5), np.arange(5))]))
        os._exit(0)  # no close, no flush, no finalizers
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    assert [r["values"] for r in records(path)] == [[0, 1, 2, 3, 4]]


def test_file_url_and_missing_directory(tmp_path: pathlib.Path) -> None:
    with AvroFileTarget(f"file://{tmp_path}/u%20rl.avro") as target:
        assert target.path == tmp_path / "u rl.avro"
    assert (tmp_path / "u rl.avro").exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        AvroFileTarget(tmp_path / "nope" / "x.avro")
    with pytest.raises(ValueError, match="only local files"):
        AvroFileTarget("file://otherhost/x.avro")


# ---------------------------------------------------------------------------------------------
# Against nominal-streaming 0.10.5 itself
# ---------------------------------------------------------------------------------------------

ns = pytest.importorskip("nominal_streaming")


def _ns_file(path: pathlib.Path, write: Any) -> pathlib.Path:
    with ns.NominalDatasetStream().to_file(path) as stream:
        write(stream)
    return path


def test_schema_codec_and_header_equal_nominal_streamings(tmp_path: pathlib.Path) -> None:
    theirs = _ns_file(tmp_path / "ns.avro", lambda s: s.enqueue("c", 1, 1.0))
    ours = tmp_path / "ours.avro"
    with AvroFileTarget(ours) as target:
        target.send(request(batch("c", V.DOUBLE, [1], [1.0])))
    with open(theirs, "rb") as a, open(ours, "rb") as b:
        ra, rb = fastavro.reader(a), fastavro.reader(b)
        assert rb.writer_schema == ra.writer_schema
        assert rb.metadata == ra.metadata  # the very same schema text, same codec, nothing else
        assert rb.codec == ra.codec == "snappy"
    assert json.loads(ra.metadata["avro.schema"])["name"] == "AvroStream"


def test_dataset_rid_metadata_matches_nominal_streamings_fallback_file(tmp_path: pathlib.Path) -> None:
    # nominal-streaming writes the rid only when it has a core consumer: point one at a closed
    # local port so every upload fails and the points go to its fallback file. In a child
    # process, because nominal-streaming's close has no bound.
    theirs = tmp_path / "ns_fallback.avro"
    script = textwrap.dedent(
        f"""
        import pathlib
        from nominal_streaming import NominalDatasetStream, PyNominalStreamOpts
        opts = PyNominalStreamOpts(base_api_url="http://127.0.0.1:9", max_request_delay_secs=0.01)
        stream = NominalDatasetStream("token", opts).with_core_consumer({RID!r})
        with stream.with_file_fallback(pathlib.Path({str(theirs)!r})) as s:
            s.enqueue("c", 1, 1.0)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, capture_output=True)
    ours = tmp_path / "ours.avro"
    with AvroFileTarget(ours, dataset_rid=RID) as target:
        target.send(request(batch("c", V.DOUBLE, [1], [1.0])))
    with open(theirs, "rb") as a, open(ours, "rb") as b:
        ma, mb = fastavro.reader(a).metadata, fastavro.reader(b).metadata
    assert ma["nominal.dataset_rid"] == RID
    assert mb == ma
    assert records(ours) == records(theirs)


def test_nominal_streaming_rounds_integers_to_doubles(tmp_path: pathlib.Path) -> None:
    """Why we write long: nominal-streaming turns 2**53 + 1 into the double 2**53."""
    theirs = _ns_file(tmp_path / "ns.avro", lambda s: s.enqueue("i", 1, 2**53 + 1))
    assert records(theirs)[0]["values"] == [9007199254740992.0]
    assert type(records(theirs)[0]["values"][0]) is float


def _by_series(path: pathlib.Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, str]]]:
    """Per series, the sorted (timestamp, value) multiset; values by repr so NaN equals NaN."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[int, str]]] = {}
    for rec in records(path):
        key = (rec["channel"], tuple(sorted(rec["tags"].items())))
        out.setdefault(key, []).extend(zip(rec["timestamps"], map(repr, rec["values"]), strict=True))
    return {k: sorted(v) for k, v in out.items()}


def test_same_data_decodes_to_the_same_records_as_nominal_streaming(tmp_path: pathlib.Path) -> None:
    """The issue's acceptance: float, string and array data written by both decode the same."""
    rng = np.random.default_rng(7)
    floats = rng.normal(size=300)
    floats[[5, 17]] = [math.nan, -0.0]
    ts = T0 + np.arange(300, dtype=np.int64) * 1_000
    ts[10:13] = ts[10]  # equal timestamps
    strings = ["", "ok", "ünïcødé", "🚀" * 3] * 5
    arrays = [rng.normal(size=w) for w in (0, 1, 8, 64)]
    str_arrays = [[], ["a"], ["", "b", "ç"]]
    tags = {"vehicle": "v1", "run": "7"}
    struct_value = {"k": [1, 2.5, "x"], "n": {"m": None}}

    def write_theirs(s: Any) -> None:
        s.enqueue_batch("speed", ts, floats, tags=tags)
        s.enqueue_batch("state", ts[:20].tolist(), strings)
        for i, a in enumerate(arrays):
            s.enqueue_float_array("spectrum", int(T0 + i), a.tolist(), tags=tags)
        for i, a in enumerate(str_arrays):
            s.enqueue_string_array("labels", int(T0 + i), a)
        s.enqueue_struct("meta", T0, struct_value)
        s.enqueue_from_dict(T0 + 5, {"wide1": 2.5, "wide2": "w"})

    theirs = _ns_file(tmp_path / "ns.avro", write_theirs)
    ours = tmp_path / "ours.avro"
    n_ts = np.arange(len(arrays)) + T0
    with AvroFileTarget(ours) as target:
        # Split differently from nominal-streaming on purpose: record boundaries must not matter.
        target.send(request(batch("speed", V.DOUBLE, ts[:100].tolist(), floats[:100], tags)))
        target.send(
            request(
                batch("speed", V.DOUBLE, ts[100:].tolist(), floats[100:], tags),
                batch("state", V.STRING, ts[:20].tolist(), strings),
                batch("spectrum", V.DOUBLE_ARRAY, n_ts.tolist(), [a.tolist() for a in arrays], tags),
                batch("labels", V.STRING_ARRAY, n_ts[:3].tolist(), str_arrays),
                batch("meta", V.STRUCT, [T0], [json.dumps(struct_value)]),
                batch("wide1", V.DOUBLE, [T0 + 5], [2.5]),
                batch("wide2", V.STRING, [T0 + 5], ["w"]),
            )
        )
    expected = _by_series(theirs)
    assert set(expected) == {
        ("speed", (("run", "7"), ("vehicle", "v1"))),
        ("state", ()),
        ("spectrum", (("run", "7"), ("vehicle", "v1"))),
        ("labels", ()),
        ("meta", ()),
        ("wide1", ()),
        ("wide2", ()),
    }
    assert sum(map(len, expected.values())) == 300 + 20 + 4 + 3 + 1 + 2
    assert _by_series(ours) == expected


def test_block_checksum_is_zlibs_crc32() -> None:
    # Avro's snappy blocks end with the CRC-32 of the uncompressed data; zlib-ng's must agree.
    import os
    import zlib

    from beam_nominal.targets.avro import _crc32

    for size in (0, 1, 4095, 70_001):
        data = os.urandom(size)
        assert _crc32(data) == zlib.crc32(data)

"""Blocks of many double series: laid out whole (``_double_records``), byte for byte what the
record-by-record path writes and what fastavro reads back."""

from __future__ import annotations

import io

import fastavro
import numpy as np
import pytest

from beam_nominal._wire.batch import DoubleBatches, SeriesBatch
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets import _avro_block
from beam_nominal.targets._avro_block import BatchError, encode_records


def _batches(seed: int, n: int, tagged: bool = False) -> list[SeriesBatch]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        points = int(rng.integers(1, 5))
        ts = rng.integers(-(2**62), 2**62, points, dtype=np.int64)
        if i % 3 == 0:
            ts = np.arange(points, dtype=np.int64) + 1_700_000_000_000_000_000
        vals = rng.standard_normal(points)
        vals[0] = [np.nan, -0.0, np.inf, 1e308][i % 4]
        tags = {"unit": f"u{i % 7}", "rig": "a" * (i % 70)} if tagged and i % 2 else None
        out.append(SeriesBatch(SeriesKey.of(f"ch{i}" * (1 + i % 40), tags), ValueType.DOUBLE, ts, vals))
    return out


def _record_by_record(batches: list[SeriesBatch]) -> bytes:
    """The general path, a few records a call (below the threshold of the whole layout)."""
    step = _avro_block._MANY_RECORDS - 1
    return b"".join(bytes(encode_records(batches[i : i + step], "long")[0]) for i in range(0, len(batches), step))


@pytest.mark.parametrize("tagged", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_many_double_records_match_the_record_by_record_path(seed: int, tagged: bool) -> None:
    batches = _batches(seed, 500, tagged)
    data, records, points = encode_records(batches, "long")
    assert records == 500
    assert points == sum(len(b.timestamps) for b in batches)
    assert bytes(data) == _record_by_record(batches)


def test_the_whole_layout_is_taken_and_read_back_by_fastavro() -> None:
    batches = _batches(3, 200)
    assert _avro_block._double_records(batches) is not None  # the path under test
    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "AvroStream",
            "namespace": "io.nominal.ingest",
            "fields": [
                {"name": "channel", "type": "string"},
                {"name": "timestamps", "type": {"type": "array", "items": "long"}},
                {
                    "name": "values",
                    "type": {
                        "type": "array",
                        "items": [
                            "double",
                            "string",
                            "long",
                            {"type": "array", "items": "double"},
                            {"type": "array", "items": "string"},
                            {"type": "record", "name": "S", "fields": [{"name": "json", "type": "string"}]},
                        ],
                    },
                },
                {"name": "tags", "type": {"type": "map", "values": "string"}},
            ],
        }
    )
    data = bytes(encode_records(batches, "long")[0])
    buf = io.BytesIO(data)
    for b in batches:
        rec = fastavro.schemaless_reader(buf, schema)
        assert rec["channel"] == b.key.channel  # type: ignore[index,call-overload]
        assert rec["timestamps"] == b.timestamps.tolist()  # type: ignore[index,call-overload]
        got = np.array(rec["values"], dtype=np.float64)  # type: ignore[index,call-overload]
        assert got.view(np.int64).tolist() == np.asarray(b.values).view(np.int64).tolist()
    assert buf.tell() == len(data)


def test_other_blocks_take_the_record_by_record_path() -> None:
    shared = np.arange(3, dtype=np.int64)
    wide = [SeriesBatch(SeriesKey.of(f"w{i}"), ValueType.DOUBLE, shared, np.ones(3)) for i in range(100)]
    assert _avro_block._double_records(wide) is None
    mixed = _batches(4, 100)
    mixed[50] = SeriesBatch(SeriesKey.of("i"), ValueType.INT64, np.arange(2, dtype=np.int64), np.arange(2))
    assert _avro_block._double_records(mixed) is None
    accented = _batches(5, 100)
    accented[7] = SeriesBatch(SeriesKey.of("é"), ValueType.DOUBLE, np.arange(2, dtype=np.int64), np.ones(2))
    assert _avro_block._double_records(accented) is None
    assert bytes(encode_records(accented, "long")[0]) == _record_by_record(accented)


def test_long_records_take_the_record_by_record_path() -> None:
    long = [
        SeriesBatch(SeriesKey.of(f"l{i}"), ValueType.DOUBLE, np.arange(100, dtype=np.int64), np.ones(100))
        for i in range(100)
    ]
    assert _avro_block._double_records(long) is None


def _long_batches(seed: int, n: int) -> list[SeriesBatch]:
    rng = np.random.default_rng(seed)
    return [
        SeriesBatch(
            SeriesKey.of(f"long{i}"),
            ValueType.DOUBLE,
            rng.integers(-(2**62), 2**62, points, dtype=np.int64),
            rng.standard_normal(points),
        )
        for i, points in enumerate(rng.integers(1, 400, n).tolist())
    ]


@pytest.mark.parametrize("long", [False, True])
@pytest.mark.parametrize("tagged", [False, True])
def test_double_batches_are_laid_out_from_their_columns_as_their_batches_are(tagged: bool, long: bool) -> None:
    batches = _long_batches(5, 300) if long else _batches(4, 300, tagged)
    columns = DoubleBatches(
        [b.key for b in batches],
        np.array([len(b) for b in batches], np.int64),
        np.concatenate([b.timestamps for b in batches]),
        np.concatenate([b.values for b in batches]),
    )
    data, records, points = encode_records(columns, "long")
    assert (records, points) == (300, columns.points)
    assert bytes(data) == _record_by_record(batches)


def test_double_batches_without_series_are_no_records() -> None:
    empty = DoubleBatches([], np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))
    data, records, points = encode_records(empty, "long")
    assert (bytes(data), records, points) == (b"", 0, 0)


class _ShortLen(str):
    def __len__(self) -> int:
        return 1


def test_a_channel_whose_len_is_not_its_text_is_laid_out_as_its_text() -> None:
    # A str subclass may say any length; the record holds the name's text, as the
    # record-by-record path writes it, so the file reads back as these channels.
    keys: list[SeriesKey] = [SeriesKey(_ShortLen("abc")), SeriesKey("de")]
    columns = DoubleBatches(keys, np.array([1, 1], np.int64), np.array([1, 2], np.int64), np.array([1.0, 2.0]))
    data, records, points = encode_records(columns, "long")
    assert (records, points) == (2, 2)
    assert bytes(data) == _record_by_record(list(columns))


def _outcome(batches: object) -> object:
    try:
        data, records, points = encode_records(batches, "long")  # type: ignore[arg-type]
    except (BatchError, TypeError, ValueError) as exc:
        return type(exc), str(exc)
    return bytes(data), records, points


@pytest.mark.parametrize(
    ("counts", "timestamps", "values"),
    [
        ([1, 0, 3], np.array([1, 2, 3, 4], np.int64), np.arange(4.0)),  # an empty series: no record
        ([0, 0, 4], np.array([5, 1, 2**40, 3], np.int64), np.arange(4.0)),
        ([1, 2, 1], np.array([1, 2, 3, 2**63 + 5], np.uint64), np.arange(4.0)),
        ([1, 2, 1], np.array([1.0, 2.0, 3.0, 4.0]), np.arange(4.0)),
        ([1, 2, 1], [1, 2, 3, 4], np.arange(4.0)),
        ([1, 2, 1], np.array([1, 2, 3, 4], np.int64), np.arange(4.0).reshape(4, 1)),
    ],
    ids=["empty-series", "empty-series-wide-timestamps", "uint64-over-int64", "float-ns", "list-ns", "2-D"],
)
def test_double_batches_the_layout_does_not_take_are_written_record_by_record(
    counts: list[int], timestamps: object, values: object
) -> None:
    # The layout writes a record for each key and its columns as int64 and float64: an empty
    # series or other columns are the record-by-record path's to write or refuse.
    keys: list[tuple[str, tuple[tuple[str, str], ...]]] = [("a", ()), ("bb", ()), ("ccc", ())]
    columns = DoubleBatches(keys, np.array(counts, np.int64), timestamps, values)  # type: ignore[arg-type]
    assert _outcome(columns) == _outcome(list(columns))

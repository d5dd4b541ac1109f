"""WriteToNominal to an Avro prefix: complete files only, exactly the input, retries leave no trace.

Real runners: FnApiRunner with two worker processes for the multi-writer case, and Beam's
BundleBasedDirectRunner for the retry case (the FnApiRunner fails a job on a bundle's first error;
the bundle-based direct runner retries the bundle, as production runners do). Faults come from a
real Beam filesystem registered under the scheme ``flaky`` that fails one write half-way.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import blake3
import fastavro
import numpy as np
import pytest
from apache_beam.io.localfilesystem import LocalFileSystem
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.targets.avro import AVRO_STREAM_SCHEMA_JSON, DATASET_RID_METADATA_KEY
from beam_nominal.targets.avro_prefix import TEMP_DIR, AvroPrefixTarget
from beam_nominal.targets.base import Request

T0 = 1_767_225_600_000_000_000
RID = "ri.test.prefix"


def _elements(n_series: int = 24, points: int = 400) -> list[Any]:
    """Series elements of every Avro-exact type, with tags; timestamps unique per series."""
    out: list[Any] = []
    rng = np.random.default_rng(3)
    for s in range(n_series):
        tags = {"unit": f"u{s % 3}"}
        for part in range(4):
            ts = T0 + (np.arange(points, dtype=np.int64) + part * points) * 1_000_000
            kind = s % 5
            if kind == 0:
                vals: Any = rng.normal(size=points)
                vals[0] = math.nan if part == 0 else -0.0
            elif kind == 1:
                vals = rng.integers(-(2**63), 2**63 - 1, size=points, dtype=np.int64, endpoint=True)
                vals[:2] = [2**63 - 1, -(2**63)]
            elif kind == 2:
                vals = [f"state-{i % 7}-ü" for i in range(points)]
            elif kind == 3:
                vals = [rng.normal(size=1 + i % 5).tolist() for i in range(points)]
            else:
                vals = [[f"a{i}", ""] for i in range(points)]
            out.append((f"ch{s:02d}", ts, vals, tags))
    return out


def _expected(elements: list[Any]) -> dict[tuple, list[tuple[int, str]]]:
    got: dict[tuple, list[tuple[int, str]]] = {}
    for channel, ts, vals, tags in elements:
        key = (channel, tuple(sorted(tags.items())))
        vs = vals.tolist() if isinstance(vals, np.ndarray) else vals
        got.setdefault(key, []).extend(zip(ts.tolist(), map(_repr, vs), strict=True))
    return {k: sorted(v) for k, v in got.items()}


def _repr(v: Any) -> str:
    # Type and value: an int must come back as an int, -0.0 as -0.0, NaN as NaN.
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(map(_repr, v)) + "]"
    if isinstance(v, dict):  # fastavro's DoubleArray/StringArray record without record names
        return _repr(v["items"])
    return f"{type(v).__name__}:{v!r}"


def _visible(prefix: Path) -> list[Path]:
    return sorted(prefix.glob("*.avro"))


def _read_all(files: list[Path]) -> dict[tuple, list[tuple[int, str]]]:
    got: dict[tuple, list[tuple[int, str]]] = {}
    for f in files:
        with open(f, "rb") as fh:
            reader = fastavro.reader(fh)
            assert reader.metadata[DATASET_RID_METADATA_KEY] == RID
            assert reader.metadata["avro.schema"] == AVRO_STREAM_SCHEMA_JSON
            assert reader.codec == "snappy"
            for rec in reader:  # fastavro raises on a cut-off block: this reads every byte
                key = (rec["channel"], tuple(sorted(rec["tags"].items())))
                got.setdefault(key, []).extend(zip(rec["timestamps"], map(_repr, rec["values"]), strict=True))
    return {k: sorted(v) for k, v in got.items()}


def _temp_files(prefix: Path) -> list[Path]:
    return sorted((prefix / TEMP_DIR).glob("*")) if (prefix / TEMP_DIR).exists() else []


def test_two_worker_processes_write_only_complete_files_holding_exactly_the_input(tmp_path: Path) -> None:
    prefix = tmp_path / "out"
    listing = tmp_path / "listing" / "files"
    elements = _elements()
    options = PipelineOptions(direct_num_workers=2, direct_running_mode="multi_processing")
    with beam.Pipeline(runner=FnApiRunner(), options=options) as p:
        result = (
            p
            | beam.Create(elements, reshuffle=False)
            | beam.Reshuffle()
            | WriteToNominal(f"{prefix}/", dataset_rid=RID, max_file_bytes=64 << 10)
        )
        assert result.files is not None
        # A lambda travels by value: the worker processes cannot import this test module.
        _ = result.files | beam.Map(lambda f: json.dumps(f._asdict())) | beam.io.WriteToText(str(listing))
    files = _visible(prefix)
    assert len(files) > 4, files  # rolled over at the size limit
    assert _temp_files(prefix) == []
    assert _read_all(files) == _expected(elements)
    listed = [json.loads(line) for f in tmp_path.glob("listing/files*") for line in f.read_text().splitlines()]
    assert sorted(x["path"] for x in listed) == [str(f) for f in files]
    for x in listed:
        assert x["bytes"] == os.path.getsize(x["path"]) and x["dataset_rid"] == RID
        with open(x["path"], "rb") as fh:
            recs = list(fastavro.reader(fh))
        assert x["points"] == sum(len(r["timestamps"]) for r in recs)
        assert x["series"] == len({(r["channel"], tuple(sorted(r["tags"].items()))) for r in recs})
        assert x["min_timestamp"] == min(min(r["timestamps"]) for r in recs)
        assert x["max_timestamp"] == max(max(r["timestamps"]) for r in recs)
    assert sum(x["points"] for x in listed) == 24 * 4 * 400


class FlakyFileSystem(LocalFileSystem):
    """Local files under ``flaky://``; ``FAIL_AT`` bytes into the run, one write fails half-way."""

    FAIL_AT: int | None = None
    written = 0
    failures = 0

    @classmethod
    def scheme(cls) -> str:
        return "flaky"

    @staticmethod
    def _local(path: str) -> str:
        return path.removeprefix("flaky://")

    def create(self, path: str, *args: Any, **kwargs: Any) -> Any:
        return _FlakyWriter(super().create(self._local(path), *args, **kwargs))

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        super().rename([self._local(s) for s in sources], [self._local(d) for d in destinations])

    def delete(self, paths: list[str]) -> None:
        super().delete([self._local(p) for p in paths])


class _FlakyWriter:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def write(self, data: Any) -> int:
        fs = FlakyFileSystem
        n = len(memoryview(data).cast("B"))
        if fs.FAIL_AT is not None and fs.written + n > fs.FAIL_AT:
            fs.FAIL_AT = None
            fs.failures += 1
            self._inner.write(memoryview(data).cast("B")[: n // 2])
            self._inner.flush()
            raise OSError(5, "injected write failure half-way through a block")
        fs.written += n
        return int(self._inner.write(data))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def flaky() -> Iterator[type[FlakyFileSystem]]:
    FlakyFileSystem.FAIL_AT, FlakyFileSystem.written, FlakyFileSystem.failures = None, 0, 0
    yield FlakyFileSystem
    FlakyFileSystem.FAIL_AT = None


def _run_direct(prefix: str, elements: list[Any]) -> None:
    with beam.Pipeline(runner=BundleBasedDirectRunner()) as p:
        _ = p | beam.Create(elements) | WriteToNominal(prefix, dataset_rid=RID, max_file_bytes=32 << 10)


def test_a_bundle_failing_mid_write_is_retried_without_partial_or_duplicate_files(
    tmp_path: Path, flaky: type[FlakyFileSystem]
) -> None:
    elements = _elements(n_series=10, points=300)
    clean, retried = tmp_path / "clean", tmp_path / "retried"
    _run_direct(f"flaky://{clean}/", elements)
    total = flaky.written
    assert total > 3 * (32 << 10)
    flaky.FAIL_AT, flaky.written = total // 2, 0
    _run_direct(f"flaky://{retried}/", elements)
    assert flaky.failures == 1  # the fault happened, half-way through the run
    assert _temp_files(retried) == []
    # Same data, same bytes, same names: the retry replaced nothing and added nothing.
    assert [f.name for f in _visible(retried)] == [f.name for f in _visible(clean)]
    for a, b in zip(_visible(retried), _visible(clean), strict=True):
        assert a.read_bytes() == b.read_bytes()
        # Named by their bytes (the first 128 bits of their BLAKE3 digest), hence the same names.
        assert a.name == f"nominal-{blake3.blake3(a.read_bytes()).hexdigest()[:32]}.avro"
    assert _read_all(_visible(retried)) == _expected(elements)


def test_a_bundle_that_keeps_failing_leaves_no_visible_file(tmp_path: Path, flaky: type[FlakyFileSystem]) -> None:
    class AlwaysFailing(FlakyFileSystem):
        @classmethod
        def scheme(cls) -> str:
            return "alwaysflaky"

        @staticmethod
        def _local(path: str) -> str:
            return path.removeprefix("alwaysflaky://")

        def create(self, path: str, *args: Any, **kwargs: Any) -> Any:
            FlakyFileSystem.FAIL_AT = 100  # every attempt fails
            return super().create(path, *args, **kwargs)

    prefix = tmp_path / "never"
    with pytest.raises(Exception, match="injected write failure"):
        _run_direct(f"alwaysflaky://{prefix}/", _elements(n_series=3, points=100))
    assert flaky.failures >= 2  # retried, and failed each time
    assert _visible(prefix) == [] and _temp_files(prefix) == []


ns = pytest.importorskip("nominal_streaming")


def test_writer_schema_and_records_equal_nominal_streamings(tmp_path: Path) -> None:
    theirs = tmp_path / "ns.avro"
    ts = T0 + np.arange(50, dtype=np.int64)
    floats = np.linspace(-1, 1, 50)
    strings = [f"s{i}" for i in range(50)]
    with ns.NominalDatasetStream().to_file(theirs) as s:
        s.enqueue_batch("f", ts, floats, tags={"a": "b"})
        s.enqueue_batch("s", ts.tolist(), strings)
        s.enqueue_float_array("arr", T0, [1.0, 2.0])
        s.enqueue_string_array("sarr", T0, ["x", "y"])
    target = AvroPrefixTarget(f"{tmp_path}/ours/", dataset_rid=RID)
    target.begin_bundle()
    batches = [
        SeriesBatch(SeriesKey.of("f", {"a": "b"}), ValueType.DOUBLE, ts, floats),
        SeriesBatch(SeriesKey.of("s"), ValueType.STRING, ts, strings),
        SeriesBatch(SeriesKey.of("arr"), ValueType.DOUBLE_ARRAY, ts[:1], [np.array([1.0, 2.0])]),
        SeriesBatch(SeriesKey.of("sarr"), ValueType.STRING_ARRAY, ts[:1], [["x", "y"]]),
    ]
    target.send(Request(RID, batches[:2], seq=0))
    target.send(Request(RID, batches[2:], seq=1))
    (written,) = target.commit_bundle()
    target.close()
    with open(theirs, "rb") as a, open(written.path, "rb") as b:
        ra, rb = fastavro.reader(a), fastavro.reader(b)
        sa, sb = ra.writer_schema, rb.writer_schema
        assert [f["name"] for f in sb["fields"]] == [f["name"] for f in sa["fields"]]
        for fa, fb in zip(sa["fields"], sb["fields"], strict=True):
            assert fb == fa, fa["name"]
        assert rb.metadata["avro.schema"] == ra.metadata["avro.schema"]
        assert rb.codec == ra.codec
        records_a, records_b = list(ra), list(rb)

    def by_series(recs: list[Any]) -> dict[tuple, list[tuple[int, str]]]:
        out: dict[tuple, list[tuple[int, str]]] = {}
        for r in recs:
            key = (r["channel"], tuple(sorted(r["tags"].items())))
            out.setdefault(key, []).extend(zip(r["timestamps"], map(_repr, r["values"]), strict=True))
        return {k: sorted(v) for k, v in out.items()}

    assert by_series(records_b) == by_series(records_a)
    assert written.points == 102 and written.series == 4


def test_cross_bundle_batching_writes_the_same_records(tmp_path: Path) -> None:
    elements = _elements(n_series=6, points=200)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = (
            p
            | beam.Create(elements)
            | WriteToNominal(f"{tmp_path}/x/", dataset_rid=RID, cross_bundle_batching=True, batch_size=5)
        )
        assert result.files is not None
    assert _temp_files(tmp_path / "x") == []
    assert _read_all(_visible(tmp_path / "x")) == _expected(elements)


def _read_avro(directory: Path) -> dict[str, list[tuple[int, Any]]]:
    out: dict[str, list[tuple[int, Any]]] = {}
    for f in sorted(directory.glob("*.avro")):
        with f.open("rb") as fh:
            for rec in fastavro.reader(fh):
                out.setdefault(rec["channel"], []).extend(zip(rec["timestamps"], rec["values"], strict=True))
    return out


def test_a_value_avro_cannot_hold_fails_its_series_not_the_job(tmp_path: Path) -> None:
    # A uint64 above 2**63 - 1 (no Avro long holds it) fails its series, not the bundle.
    out = tmp_path / "out"
    elements = [("a", T0 + i, float(i)) for i in range(50)] + [("big", T0, 2**64 - 1), ("neg", T0, -5)]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(elements) | WriteToNominal(f"{out}/", dataset_rid="ri.test.prefix.big")
        failed = result.failed | beam.Map(lambda f: (type(f) is FailedElement, f.element["channel"], f.error))
        assert_that(failed, equal_to([(True, "big", "RejectedSeries")]))
    assert _read_avro(out) == {"a": [(T0 + i, float(i)) for i in range(50)], "neg": [(T0, -5)]}
    assert not list((out / ".beam-nominal-tmp").glob("*"))


def test_a_file_url_prefix_writes_local_files(tmp_path: Path) -> None:
    # Beam's FileSystems has no file:// scheme; the target takes it as a local path.
    out = tmp_path / "via-url"
    with beam.Pipeline(runner=FnApiRunner()) as p:
        points = [("a", T0, 1.0), ("a", T0 + 10**9, 2.0)]
        _ = p | beam.Create(points) | WriteToNominal(f"file://{out}/", dataset_rid="ri.x")
    assert _read_avro(out) == {"a": [(T0, 1.0), (T0 + 10**9, 2.0)]}


def test_prefix_options_are_checked_where_they_are_given() -> None:
    with pytest.raises(ValueError, match="Avro prefix targets"):
        WriteToNominal("grpc://127.0.0.1:1", dataset_rid=RID, max_file_bytes=10)
    with pytest.raises(ValueError, match="codec"):
        WriteToNominal("/tmp/somewhere/", dataset_rid=RID, codec="zstd")
    with pytest.raises(ValueError, match="dataset_rid"):
        WriteToNominal("/tmp/somewhere/")

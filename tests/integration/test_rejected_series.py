"""A value type that conflicts with what the server already stores costs only its own series:
the server names the refused batches, the client sends the rest again and
reports the refused points, on every wire; under Beam they reach the failed output. With a
fallback target they land in the fallback as any finally refused request does; many of them in
one request still cost only themselves (the server names as many as fit one answer, the client
sends the rest again); a permanent TLS failure on gRPC fails fast."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from beam_nominal import NominalStream
from beam_nominal.beam import WriteToNominal
from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.server import LocalServer, LocalStore

pytestmark = pytest.mark.timeout(120)

WIRES = ["grpc", "http-row", "http-columnar"]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rejected")


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[LocalServer]:
    with LocalServer(data_dir, port=0, http_port=0) as srv:
        yield srv


def _target(srv: LocalServer, wire: str) -> tuple[str, dict[str, str]]:
    if wire == "grpc":
        return srv.target, {}
    return srv.http_url, {"format": wire.removeprefix("http-")}


def _values(store: LocalStore, rid: str, channel: str, tags: dict[str, str] | None = None) -> list[tuple[int, object]]:
    table = store.read(rid, channel, tags)
    return list(
        zip(table.column("timestamp").cast("int64").to_pylist(), table.column("value").to_pylist(), strict=True)
    )


@pytest.mark.parametrize("wire", WIRES)
def test_a_type_conflict_with_the_stored_series_costs_only_that_series(
    server: LocalServer, data_dir: Path, wire: str
) -> None:
    rid = f"ri.rejected.stream.{wire}"
    url, kw = _target(server, wire)
    with NominalStream(url, dataset_rid=rid, **kw) as job1:
        job1.enqueue("temp", 1, 20.5)
        job1.enqueue("label", 1, "ok")
    job2 = NominalStream(url, dataset_rid=rid, max_attempts=3, **kw)
    for i in range(500):
        job2.enqueue("volts", 10 + i, float(i))
        job2.enqueue("count", 10 + i, i, tags={"unit": "n"})
    job2.enqueue("temp", 2, "n/a")  # stored as double: refused for good
    job2.enqueue("label", 2, 7)  # stored as string: refused for good
    with pytest.raises(DeliveryError) as info:
        job2.close()
    err = info.value
    refused = {SeriesKey("temp"): 1, SeriesKey("label"): 1}
    assert err.undelivered == refused and err.rejected == refused
    assert "conflicts with the stored type double" in err.reasons[SeriesKey("temp")]
    assert "conflicts with the stored type string" in err.reasons[SeriesKey("label")]
    assert err.report.points == 1000 and err.report.failed_points == 2
    store = LocalStore(data_dir)
    assert _values(store, rid, "volts") == [(10 + i, float(i)) for i in range(500)]
    assert _values(store, rid, "count", {"unit": "n"}) == [(10 + i, i) for i in range(500)]
    assert _values(store, rid, "temp") == [(1, 20.5)]
    assert _values(store, rid, "label") == [(1, "ok")]


def test_a_request_of_only_refused_series_fails_with_the_server_reason(server: LocalServer) -> None:
    rid = "ri.rejected.only"
    with NominalStream(server.target, dataset_rid=rid) as job1:
        job1.enqueue("temp", 1, 20.5)
    job2 = NominalStream(server.target, dataset_rid=rid)
    job2.enqueue("temp", 2, "n/a")
    with pytest.raises(DeliveryError, match="conflicts with the stored type double") as info:
        job2.close()
    assert info.value.rejected == {SeriesKey("temp"): 1}


def test_write_to_nominal_sends_refused_series_to_failed_and_lands_the_rest(
    server: LocalServer, data_dir: Path
) -> None:
    rid = "ri.rejected.beam"
    with NominalStream(server.target, dataset_rid=rid) as job1:
        job1.enqueue("temp", 1, 20.5)
    elements = [("volts", 10 + i, float(i)) for i in range(1000)] + [("temp", 2, "n/a"), ("temp", 3, "n/a")]
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(elements, reshuffle=False) | WriteToNominal(server.target, dataset_rid=rid)
        shown = result.failed | beam.Map(
            lambda f: (f.error, f.element, "conflicts with the stored type double" in f.reason)
        )
        assert_that(shown, equal_to([("RejectedSeries", {"channel": "temp", "tags": {}, "points": 2}, True)]))
    store = LocalStore(data_dir)
    assert _values(store, rid, "volts") == [(10 + i, float(i)) for i in range(1000)]
    assert _values(store, rid, "temp") == [(1, 20.5)]


@pytest.mark.parametrize("wire", WIRES)
def test_with_a_fallback_the_refused_series_land_in_it_and_the_rest_on_the_server(
    server: LocalServer, data_dir: Path, tmp_path: Path, wire: str
) -> None:
    from beam_nominal.targets.avro import read_avro_file

    rid = f"ri.rejected.fallback.{wire}"
    url, kw = _target(server, wire)
    with NominalStream(url, dataset_rid=rid, **kw) as job1:
        job1.enqueue("temp", 1, 20.5)
    fb = tmp_path / "fallback.avro"
    with NominalStream(url, dataset_rid=rid, fallback=fb, max_request_points=150, **kw) as job2:
        for i in range(300):
            job2.enqueue("volts", 10 + i, float(i))
            job2.enqueue("temp", 10 + i, f"s{i}", tags=None)  # stored as double: refused for good
        report = job2.flush()
    # The refused points go to the fallback, counted there, not failed.
    assert (report.points, report.fallback_points, report.failed_points) == (300, 300, 0)
    assert report.ok
    got = read_avro_file(fb)
    assert set(got) == {SeriesKey("temp")}
    # Every refused point, exactly once, each with its own value. Paired and sorted: the two
    # refused requests reach the fallback file in the order their uploads finished (concurrent
    # uploads), so block order in the file is not arrival order (1 run in ~15 failed on it).
    temp = got[SeriesKey("temp")]
    assert sorted(zip(temp.timestamps.tolist(), temp.values, strict=True)) == [(10 + i, f"s{i}") for i in range(300)]
    store = LocalStore(data_dir)
    assert _values(store, rid, "volts") == [(10 + i, float(i)) for i in range(300)]
    assert _values(store, rid, "temp") == [(1, 20.5)]


def test_many_refused_series_in_one_grpc_request_cost_only_themselves(server: LocalServer, data_dir: Path) -> None:
    rid = "ri.rejected.many"
    n = 300
    with NominalStream(server.target, dataset_rid=rid) as job1:
        for i in range(n):
            job1.enqueue(f"channel_{i:04d}", 1, 1.0)
    job2 = NominalStream(server.target, dataset_rid=rid, total_timeout=5)
    for i in range(n):
        job2.enqueue(f"channel_{i:04d}", 2, "text")  # every one conflicts with its stored double
    job2.enqueue("good", 2, 5.0)
    with pytest.raises(DeliveryError) as info:
        job2.close()
    # The answer names as many refused batches as fit the client's 16 KiB metadata limit (more
    # would be RESOURCE_EXHAUSTED, retried until total_timeout, losing "good" too).
    assert info.value.rejected == {SeriesKey(f"channel_{i:04d}"): 1 for i in range(n)}
    assert _values(LocalStore(data_dir), rid, "good") == [(2, 5.0)]


def test_a_tls_handshake_failure_on_grpc_fails_fast(server: LocalServer) -> None:
    url = server.target.replace("grpc://", "grpcs://")  # the server speaks plaintext
    start = time.monotonic()
    with pytest.raises(TargetError, match=r"first contact failed.*grpcs://") as info:
        NominalStream(url, dataset_rid="ri.rejected.tls", token="t")
    assert not info.value.retryable
    assert time.monotonic() - start < 8


def test_the_server_names_only_as_many_refused_batches_as_fit_one_answer() -> None:
    import json
    from types import SimpleNamespace

    import numpy as np

    from beam_nominal._wire import metadata
    from beam_nominal._wire.batch import MalformedBatchError, SeriesBatch
    from beam_nominal.model import ValueType
    from beam_nominal.server import _ledger

    n = 400
    batches = [
        SeriesBatch(SeriesKey(f"c{i}", (("k", "é" * 300),)), ValueType.STRING, np.array([2]), ["text"])
        for i in range(n)
    ]
    stored = SimpleNamespace(
        series={b.key: SimpleNamespace(value_type=ValueType.DOUBLE) for b in batches},
        pending_keys=set(),
        pending_types={},
    )
    with pytest.raises(MalformedBatchError) as named:
        _ledger._busy(stored, {b.key: b.value_type for b in batches}, None, batches)  # type: ignore[arg-type]
    rejected = named.value.rejected
    assert 0 < len(rejected) < n and sorted(rejected) == list(range(len(rejected)))
    assert len(json.dumps(metadata.rejected_json(rejected))) <= _ledger._MAX_NAMED_BYTES

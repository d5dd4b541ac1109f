"""WriteToNominal names where data went in Beam's sink lineage, read back from the pipeline result."""

from __future__ import annotations

import functools
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics.metric import Lineage
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer
from beam_nominal.targets import target_from_url

BASE = 1_700_000_000_000_000_000


def test_sink_lineage_names_the_endpoint_and_dataset_of_every_target(tmp_path: Path) -> None:
    points = [("lin.x", BASE + i, float(i)) for i in range(5)]
    (tmp_path / "out").mkdir()
    with LocalServer(tmp_path / "data", port=0, http_port=0) as server:
        p = beam.Pipeline(runner=FnApiRunner())
        elements = p | beam.Create(points)
        _ = elements | "Grpc" >> WriteToNominal(server.target, dataset_rid="ri.test.lineage.grpc")
        _ = elements | "Http" >> WriteToNominal(
            server.http_url + "/", dataset_rid="ri.test.lineage.http", format="columnar", cross_bundle_batching=True
        )
        _ = elements | "Avro" >> WriteToNominal(
            str(tmp_path / "out" / "points.avro"), dataset_rid="ri.test.lineage.avro"
        )
        # Nothing delivered, nothing reported.
        _ = (
            p
            | "Bad" >> beam.Create([("lin.x", "no time", 1.0)])
            | "None" >> WriteToNominal(server.target, dataset_rid="ri.test.lineage.none")
        )
        # A factory's destination is unknown to the sink.
        factory = functools.partial(target_from_url, server.target, dataset_rid="ri.test.lineage.factory")
        _ = elements | "Factory" >> WriteToNominal(factory, dataset_rid="ri.test.lineage.factory")
        result = p.run()
        result.wait_until_finish()
        http = server.http_url.rstrip("/")
        for rid in ("grpc", "http", "factory"):
            assert server.store.read(f"ri.test.lineage.{rid}", "lin.x").column("value").to_pylist() == [
                0.0,
                1.0,
                2.0,
                3.0,
                4.0,
            ]
    assert Lineage.query(result.metrics(), Lineage.SINK) == {
        f"nominal:`{server.target}`.`ri.test.lineage.grpc`",
        f"nominal:`{http}`.`ri.test.lineage.http`",
        f"filesystem:localhost.{tmp_path}/out/points-*.avro",
    }


def test_a_prefix_target_reports_its_files_as_sink_lineage(tmp_path: Path) -> None:
    p = beam.Pipeline(runner=FnApiRunner())
    _ = p | beam.Create([("a", BASE, 1.0)]) | WriteToNominal(f"{tmp_path}/pre/", dataset_rid="ri.x")
    result = p.run()
    result.wait_until_finish()
    sinks = Lineage.query(result.metrics(), Lineage.SINK)
    assert sinks and all(not s.startswith("nominal:`:") for s in sinks), sinks

"""Empty rows of a string-array series land as empty string arrays, with cross-bundle batching on
or off: a batching option never changes which points are accepted."""

from __future__ import annotations

from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_nominal.beam import WriteToNominal
from beam_nominal.server import LocalServer

pytestmark = pytest.mark.timeout(120)

BASE = 1_700_000_000_000_000_000


@pytest.mark.parametrize("cross_bundle_batching", [False, True])
def test_an_empty_row_of_a_string_array_series_lands_with_or_without_cross_bundle_batching(
    tmp_path: Path, cross_bundle_batching: bool
) -> None:
    # An empty row alone says nothing of its element type: it takes the type its series has
    # (string_array, from its first row), also when it reaches the sink as a series batch of its own.
    rows: list[list[str]] = [["a", "b"], [], ["x"]]
    elements = [("sa", BASE + k, rows[k % 3]) for k in range(30)]
    rid = f"ri.test.empty-rows.{cross_bundle_batching}"
    with LocalServer(tmp_path / "data") as server:
        p = beam.Pipeline(runner=FnApiRunner())
        _ = (
            p
            | beam.Create(elements)
            | WriteToNominal(server.target, dataset_rid=rid, cross_bundle_batching=cross_bundle_batching)
        )
        p.run().wait_until_finish()
        table = server.store.read(rid, "sa")
    got = sorted(zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True))
    assert got == [(t, list(v)) for _, t, v in elements]

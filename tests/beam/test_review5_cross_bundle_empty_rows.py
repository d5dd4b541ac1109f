"""review5: cross_bundle_batching changes which string-array points are accepted."""

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
    # Without cross-bundle batching the series is typed string_array by its first row and the
    # empty rows after it are empty string arrays: all 30 points land. With it (at 4168052 and at
    # 2dc18ea) each empty row reaches the pin as a one-point double_array chunk, which is refused
    # (SeriesTypeError "pinned to string_array; got a double_array chunk", on .failed): 10 of 30
    # points are lost only because of a batching option.
    rows: list[list[str]] = [["a", "b"], [], ["x"]]
    elements = [("sa", BASE + k, rows[k % 3]) for k in range(30)]
    rid = f"ri.test.review5.{cross_bundle_batching}"
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

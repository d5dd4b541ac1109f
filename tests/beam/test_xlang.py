"""beam_nominal.xlang.WriteToNominal, the transform other SDKs' pipelines expand by name.

Its input is schema'd Rows as a Java pipeline hands them over; its output, the failed elements,
is a PCollection of schema'd Rows ``(element, error, reason)`` that any SDK decodes (RowCoder).
The Java pipeline itself runs in tests/engines/test_java_pipeline.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import apache_beam as beam
import pytest
from apache_beam.coders import RowCoder
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.fully_qualified_named_transform import FullyQualifiedNamedTransform

from beam_nominal import xlang
from beam_nominal.server import LocalServer

RID = "ri.test.xlang"
T0 = 1_767_225_600_000_000_000


class Reading(NamedTuple):
    timestamp: int
    rpm: int
    oil_temp: float | None


class Point(NamedTuple):
    channel: str
    timestamp: int
    value: float


def test_all_is_pinned() -> None:
    assert xlang.__all__ == sorted(xlang.__all__) == ["FAILED_ROW", "WriteToNominal"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"target": "", "dataset_rid": RID}, "needs target and dataset_rid"),
        ({"target": "grpc://localhost:1", "dataset_rid": ""}, "needs target and dataset_rid"),
        ({"target": "grpc://localhost:1", "dataset_rid": RID, "token": "secret"}, "takes no token"),
    ],
)
def test_refuses_what_cannot_travel_or_reach(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        xlang.WriteToNominal(**kwargs)
    assert "secret" not in str(info.value)


def test_rows_land_and_failed_come_back_as_rows(tmp_path: Path) -> None:
    readings = [Reading(T0 + i, 2**63 - 1 - i, None if i % 3 == 2 else i / 7) for i in range(30)]
    points = [Point("p", T0 + i, i * 0.1) for i in range(10)] + [Point("", T0, 1.5)]
    with LocalServer(tmp_path / "data", port=0) as server:
        # As the expansion service builds it for a Java pipeline: by name, through the glob.
        with FullyQualifiedNamedTransform.with_filter("beam_nominal.*"), beam.Pipeline(runner=FnApiRunner()) as p:
            wide = p | "Readings" >> beam.Create(readings).with_output_types(Reading)
            wide_failed = wide | "WriteWide" >> FullyQualifiedNamedTransform(
                "beam_nominal.xlang.WriteToNominal", (), {"target": server.target, "dataset_rid": RID}
            )
            point = p | "Points" >> beam.Create(points).with_output_types(Point)
            failed = point | "WritePoints" >> xlang.WriteToNominal(server.target, RID)
            assert failed.element_type == xlang.FAILED_ROW
            described = failed | beam.Map(lambda r: (r.error, r.reason))
            assert_that(wide_failed | "Count" >> beam.combiners.Count.Globally(), equal_to([0]), label="NoWide")
            assert_that(
                described,
                equal_to(
                    [
                        (
                            "ElementError",
                            f"element {Point('', T0, 1.5)!r}: channel: channel must be a non-empty string, got ''",
                        )
                    ]
                ),
            )
        store = server.store
        rpm = store.read(RID, "rpm")
        assert str(rpm.column("value").type) == "int64"
        assert rpm.column("value").to_pylist() == [r.rpm for r in readings]
        oil = store.read(RID, "oil_temp")
        assert oil.column("timestamp").to_pylist() == [r.timestamp for r in readings if r.oil_temp is not None]
        assert oil.column("value").to_pylist() == [r.oil_temp for r in readings if r.oil_temp is not None]
        assert store.read(RID, "p").column("value").to_pylist() == [pt.value for pt in points[:-1]]


def test_failed_rows_encode_with_a_row_coder() -> None:
    coder = RowCoder.from_type_hint(xlang.FAILED_ROW, None)
    row = beam.Row(element="e", error="ElementError", reason="état: bad")
    assert coder.decode(coder.encode(row))._asdict() == row.as_dict()

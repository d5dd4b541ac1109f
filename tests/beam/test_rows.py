"""Schema'd wide rows (``beam.Row``, NamedTuple-typed PCollections) through WriteToNominal on
FnApiRunner into a real local server, read back exactly: one point per non-null channel field,
typed by the schema (int64 past 2**53 stays int64), tag fields, a channel prefix, the timestamp
field found by name or type; schemas the options cannot apply to refused when the pipeline is
built, naming the field and the fix; a value of the wrong type fails its own element."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pandas as pd
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that
from apache_beam.utils.timestamp import Timestamp

from beam_nominal._pipeline.staging import ElementError
from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.beam._rows import RowOptions, layout, record, schema_fields
from beam_nominal.server import LocalServer

RID = "ri.rows.beam"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
BIG = 2**62 + 1  # no double holds it


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with LocalServer(tmp_path / "data", port=0) as srv:
        yield srv


def _read(server: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], tuple[str, list[tuple[int, Any]]]]:
    out = {}
    for info in server.store.list_series(RID):
        table = server.store.read(RID, info.channel, info.tags).to_pydict()
        key = (info.channel, tuple(sorted(dict(info.tags).items())))
        out[key] = (info.value_type.value, sorted(zip(table["timestamp"], table["value"], strict=True)))
    return out


def _none(failed: list[FailedElement]) -> None:
    assert failed == [], failed


def _run(elements: list[Any], write: WriteToNominal, check: Any = _none, typed: Any = None) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        pcoll = p | beam.Create(elements, reshuffle=False)
        if typed is not None:
            pcoll = pcoll | beam.Map(lambda e: e).with_output_types(typed)
        assert_that((pcoll | write).failed, check)


@pytest.mark.parametrize("cross_bundle", [False, True])
def test_wide_rows_land_typed_by_schema_with_tags_prefix_and_nulls(server: Any, cross_bundle: bool) -> None:
    rows = [
        beam.Row(t=T0 + i, rpm=2400.5 + i, count=BIG + i if i != 1 else None, mode="A" if i < 2 else "B", unit=7)
        for i in range(3)
    ]
    write = WriteToNominal(
        server.target,
        dataset_rid=RID,
        tag_fields=["mode", "unit"],
        channel_prefix="engine.",
        tags={"site": "x"},
        cross_bundle_batching=cross_bundle,
    )
    _run(rows, write)
    a = (("mode", "A"), ("site", "x"), ("unit", "7"))
    b = (("mode", "B"), ("site", "x"), ("unit", "7"))
    assert _read(server) == {
        ("engine.rpm", a): ("double", [(T0, 2400.5), (T0 + 1, 2401.5)]),
        ("engine.rpm", b): ("double", [(T0 + 2, 2402.5)]),
        ("engine.count", a): ("int64", [(T0, BIG)]),  # the null of row 1 is no point
        ("engine.count", b): ("int64", [(T0 + 2, BIG + 2)]),
    }


class Reading(NamedTuple):
    time: int
    oil: float
    gear: Optional[int]  # noqa: UP045 - Beam's schema inference reads the typing form
    label: str


def test_namedtuple_rows_take_their_schema_types(server: Any) -> None:
    """A double field's integer lands as a double (exact), an int64 one as int64; ``time`` is
    the timestamp, ``channel_fields`` picks the channels."""
    rows = [Reading(T0, 3, 2**60, "ü✓"), Reading(T0 + 1, 2.5, None, "b")]  # type: ignore[arg-type]
    _run(rows, WriteToNominal(server.target, dataset_rid=RID, channel_fields=["oil", "gear"]), typed=Reading)
    assert _read(server) == {
        ("oil", ()): ("double", [(T0, 3.0), (T0 + 1, 2.5)]),
        ("gear", ()): ("int64", [(T0, 2**60)]),
    }


def test_a_timestamp_typed_field_is_the_timestamp(server: Any) -> None:
    rows = [beam.Row(recorded=Timestamp(micros=T0 // 1000 + i), v=float(i)) for i in range(2)]
    _run(rows, WriteToNominal(server.target, dataset_rid=RID))
    assert _read(server) == {("v", ()): ("double", [(T0, 0.0), (T0 + 1000, 1.0)])}


def test_values_the_schema_cannot_hold_exactly_fail_their_element(server: Any) -> None:
    """An integer no double holds, in a double field, is refused naming the field; its
    neighbours land."""

    def check(failed: list[FailedElement]) -> None:
        assert len(failed) == 1, failed
        assert failed[0].error == "ElementError"
        assert "'oil'" in failed[0].reason and "no exact double" in failed[0].reason, failed[0].reason

    rows = [Reading(T0, 1.5, 1, "a"), Reading(T0 + 1, 2**53 + 1, 2, "b"), Reading(T0 + 2, 2.5, 3, "c")]  # type: ignore[arg-type]
    _run(rows, WriteToNominal(server.target, dataset_rid=RID, channel_fields=["oil"]), check, typed=Reading)
    assert _read(server) == {("oil", ()): ("double", [(T0, 1.5), (T0 + 2, 2.5)])}


def test_a_field_named_timestamp_is_the_timestamp_beside_time_and_t(server: Any) -> None:
    rows = [beam.Row(timestamp=T0 + i, time=float(i), t=i) for i in range(2)]
    _run(rows, WriteToNominal(server.target, dataset_rid=RID))
    assert _read(server) == {
        ("time", ()): ("double", [(T0, 0.0), (T0 + 1, 1.0)]),
        ("t", ()): ("int64", [(T0, 0), (T0 + 1, 1)]),
    }


def test_point_rows_keep_the_point_path(server: Any) -> None:
    rows = [beam.Row(channel="c", timestamp=T0 + i, value=float(i)) for i in range(3)]
    _run(rows, WriteToNominal(server.target, dataset_rid=RID))
    assert _read(server) == {("c", ()): ("double", [(T0, 0.0), (T0 + 1, 1.0), (T0 + 2, 2.0)])}


def test_rows_of_unknown_schema_are_laid_out_per_field_set(server: Any) -> None:
    """Without a schema (elements made by a Map without type hints) the layout is found from
    each Row's fields; a Row it cannot read fails alone, naming the fix."""

    def check(failed: list[FailedElement]) -> None:
        assert len(failed) == 1, failed
        assert "timestamp_field" in failed[0].reason and "['t', 'time']" in failed[0].reason, failed[0].reason

    with beam.Pipeline(runner=FnApiRunner()) as p:
        made = (
            p
            | beam.Create([0, 1, 2], reshuffle=False)
            | beam.Map(lambda i: beam.Row(t=T0 + i, x=i) if i != 1 else beam.Row(t=T0, time=T0, x=1))
        )
        assert_that((made | WriteToNominal(server.target, dataset_rid=RID, tag_fields=[])).failed, check)
    assert _read(server) == {("x", ()): ("int64", [(T0, 0), (T0 + 2, 2)])}


@pytest.mark.parametrize(
    ("rows", "kwargs", "expected"),
    [
        (
            [beam.Row(t=T0, time=T0, x=1.0)],
            {},
            "fields ['t', 'time'] could each be the timestamp; give timestamp_field=",
        ),
        ([beam.Row(when=T0, x=1.0)], {}, "no timestamp field"),
        ([beam.Row(t=T0, x=1.0)], {"channel_fields": ["y"]}, "channel_fields names 'y', which is not a field"),
        ([beam.Row(t=T0, x=1.0)], {"tag_fields": ["mode"]}, "tag_fields names 'mode'"),
        ([beam.Row(t=T0, x=1.0, f=2.5)], {"tag_fields": ["f"]}, "tag field 'f' is double"),
        ([beam.Row(t=T0, x=1.0)], {"timestamp_field": "ts"}, "timestamp_field 'ts' is not a field"),
        ([beam.Row(t=T0)], {}, "no channel field"),
        (
            [beam.Row(channel="c", timestamp=T0, value=1.0)],
            {"channel_prefix": "e."},
            "apply to wide rows",
        ),
    ],
)
def test_schemas_the_options_cannot_apply_to_are_refused_at_build(
    server: Any, rows: list[Any], kwargs: dict[str, Any], expected: str
) -> None:
    p = beam.Pipeline(runner=FnApiRunner())
    pcoll = p | beam.Create(rows)
    with pytest.raises(ValueError, match="WriteToNominal") as info:
        _ = pcoll | WriteToNominal(server.target, dataset_rid=RID, **kwargs)
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"channel_fields": "rpm"}, "channel_fields must be a list of field names, got 'rpm'"),
        ({"channel_fields": []}, "channel_fields is empty"),
        ({"tag_fields": ["a", "a"]}, "tag_fields names a field twice"),
        ({"channel_fields": ["a"], "tag_fields": ["a"]}, "in both channel_fields and tag_fields"),
        ({"timestamp_field": "t", "channel_fields": ["t"]}, "timestamp_field 't' is also in channel_fields"),
        ({"channel_prefix": 3}, "channel_prefix must be a string, got 3"),
        ({"timestamp_field": ""}, "timestamp_field must be a non-empty string"),
    ],
)
def test_bad_row_options_are_refused_at_construction(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises((TypeError, ValueError)) as info:
        WriteToNominal("grpc://localhost:1", dataset_rid=RID, **kwargs)
    assert expected in str(info.value)


def test_layout_keeps_a_tags_mapping_and_field_order() -> None:
    lay = layout(["tags", "b", "t", "a"], RowOptions(channel_prefix="p."))
    assert lay.timestamp == "t" and lay.tags_mapping
    assert [(f, c) for f, c, _ in lay.channels] == [("b", "p.b"), ("a", "p.a")]


def test_record_refuses_what_its_field_type_cannot_hold_and_skips_missing_values() -> None:
    schema = schema_fields(Reading)
    assert schema is not None
    lay = layout([f.name for f in schema], RowOptions(tag_fields=["label"]), schema)
    assert record({"time": T0, "oil": np.int64(3), "gear": pd.NA, "label": "a"}, lay) == (
        T0,
        {"oil": 3.0, "gear": pd.NA},
        {"label": "a"},
    )
    for oil, gear, field, why in [
        (10**400, 1, "oil", "no exact double"),
        (np.int64(2**63 - 1), 1, "oil", "no exact double"),
        (1.5, float("nan"), "gear", "expected an int64, got float nan"),
        (1.5, np.float64(2.0), "gear", "expected an int64, got float64"),
        ("1.5", 1, "oil", "expected a double, got str"),
        (1.5, True, "gear", "expected an int64, got bool"),
    ]:
        with pytest.raises(ElementError, match=why) as info:
            record({"time": T0, "oil": oil, "gear": gear, "label": "a"}, lay)
        assert info.value.field == field
    with pytest.raises(ElementError, match="tag field 'label' holds float"):
        record({"time": T0, "oil": 1.0, "gear": 1, "label": 2.5}, lay)

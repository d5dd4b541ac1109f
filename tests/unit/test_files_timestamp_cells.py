"""files_to_nominal's per-cell timestamps follow the core's one zone rule (``model.localize``):
a naive reading lands in ``--timezone``'s zone exactly as NominalStream would put it, is refused
without one, and a reading a DST change skips or repeats is a failed row."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from beam_nominal.model import timestamp_ns
from pipelines._read import Options, Plan, timestamp_cell

PLAN = Plan({}, None)


@pytest.mark.parametrize("zone", ["UTC", "Europe/Berlin", "+05:30"])
@pytest.mark.parametrize(
    "cell",
    [
        dt.datetime(2026, 1, 1, 12, 0, 0, 123456),
        np.datetime64("2026-07-01T12:00:00.123456789"),
        "2026-07-01T12:00:00.5",
    ],
)
def test_a_naive_cell_lands_in_the_named_zone_as_the_core_puts_it(cell: object, zone: str) -> None:
    got = timestamp_cell(cell, Options(timezone=zone), PLAN, text=isinstance(cell, str))
    assert got == timestamp_ns(cell, zone)


@pytest.mark.parametrize("cell", [dt.datetime(2026, 1, 1), np.datetime64("2026-01-01T00:00:00"), "2026-01-01T00:00"])
def test_a_naive_cell_without_a_zone_is_refused(cell: object) -> None:
    with pytest.raises(ValueError, match="timezone"):
        timestamp_cell(cell, Options(), PLAN, text=isinstance(cell, str))


@pytest.mark.parametrize("wall", ["2026-03-29T02:30:00", "2026-10-25T02:30:00"])
def test_a_reading_a_dst_change_skips_or_repeats_is_a_failed_cell(wall: str) -> None:
    with pytest.raises(ValueError, match="daylight-saving"):
        timestamp_cell(wall, Options(timezone="Europe/Berlin"), PLAN, text=True)

"""The byte estimates of ``_pipeline/sizes.py`` are the ones every writer uses."""

from __future__ import annotations

from beam_nominal._pipeline import sizes
from beam_nominal._pipeline.staging import PointBatch
from beam_nominal.model import SeriesKey


def test_staged_points_are_estimated_by_the_size_rules() -> None:
    batch = PointBatch()
    batch.add_point("text", 1, "abc", None)
    batch.add_point("text", 2, "de", None)
    assert batch.nbytes == 2 * sizes.POINT_BYTES + 5
    batch.add_point("names", 3, ["a", "bc"], None)
    assert batch.nbytes == 3 * sizes.POINT_BYTES + 5 + 3 + 2 * sizes.STRING_ITEM_BYTES


def test_series_overhead_counts_name_and_tags() -> None:
    assert sizes.series_overhead(SeriesKey.of("abc")) == sizes.SERIES_OVERHEAD + 3
    assert sizes.series_overhead(SeriesKey.of("abc", {"k": "vv"})) == sizes.SERIES_OVERHEAD + 3 + 1 + 2 + 4

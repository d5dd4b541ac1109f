"""Settings validate every field and show the bad value."""

from __future__ import annotations

import pytest

from beam_nominal.settings import BatchSettings, RetrySettings, UploadSettings


@pytest.mark.parametrize(
    ("cls", "kwargs", "error", "fragment"),
    [
        (BatchSettings, {"max_request_bytes": 10}, ValueError, "max_request_bytes must be >= 1024, got 10"),
        (BatchSettings, {"max_request_points": 0}, ValueError, "max_request_points must be >= 1, got 0"),
        (BatchSettings, {"max_request_bytes": 4.5}, TypeError, "got 4.5"),
        (BatchSettings, {"linger": -1}, ValueError, "linger must be a finite number of seconds > 0, got -1"),
        (BatchSettings, {"linger": float("nan")}, ValueError, "got nan"),
        (UploadSettings, {"max_in_flight": 0}, ValueError, "max_in_flight must be >= 1, got 0"),
        (UploadSettings, {"max_in_flight": 100}, ValueError, "max_in_flight must be <= 64, got 100"),
        (UploadSettings, {"block_on_full": "yes"}, TypeError, "block_on_full must be a bool, got 'yes'"),
        (UploadSettings, {"attempt_timeout": 0}, ValueError, "attempt_timeout"),
        (UploadSettings, {"attempt_timeout": None}, ValueError, "attempt_timeout"),
        (RetrySettings, {"max_attempts": True}, TypeError, "max_attempts must be an int, got True"),
        (RetrySettings, {"jitter": 1.5}, ValueError, "jitter must be in [0, 1], got 1.5"),
        (RetrySettings, {"multiplier": 0.5}, ValueError, "multiplier must be >= 1, got 0.5"),
        (RetrySettings, {"initial_backoff": 5, "max_backoff": 1}, ValueError, "max_backoff (1) is below"),
    ],
)
def test_bad_values_are_named(cls: type, kwargs: dict[str, object], error: type, fragment: str) -> None:
    with pytest.raises(error) as info:
        cls(**kwargs)
    assert fragment in str(info.value)
    assert cls.__name__ in str(info.value)


def test_settings_are_frozen() -> None:
    s = BatchSettings()
    with pytest.raises(AttributeError):
        s.max_request_bytes = 1  # type: ignore[misc]


def test_defaults() -> None:
    assert BatchSettings().max_request_bytes == 4 * 1024 * 1024
    assert 2 <= UploadSettings().max_in_flight <= 4
    assert UploadSettings().block_on_full is True
    assert BatchSettings(linger=None).linger is None


def test_backoff_grows_exponentially_caps_and_jitters_down() -> None:
    r = RetrySettings(initial_backoff=0.1, max_backoff=1.0, multiplier=2.0, jitter=0.5)
    assert [r.backoff(n, 0.0) for n in (1, 2, 3, 4, 5, 6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    # rand close to 1 takes off up to `jitter` of the delay, never more.
    assert r.backoff(3, 0.999999) == pytest.approx(0.2, rel=1e-5)
    assert RetrySettings(jitter=0).backoff(2, 0.7) == 0.2


@pytest.mark.parametrize(
    ("settings", "error", "shown"),
    [
        ({"max_inflight": 3}, TypeError, "max_inflight=3"),
        ({"max_in_flight": 0}, ValueError, "max_in_flight must be >= 1, got 0"),
        ({"max_in_flight": "3"}, TypeError, "max_in_flight must be an int, got '3'"),
        ({"attempt_timeout": -1.0}, ValueError, "attempt_timeout"),
        ({"max_request_bytes": 2**27}, ValueError, "max_buffered_bytes (67108864) must be at least twice"),
    ],
)
def test_write_to_nominal_refuses_a_bad_setting_at_construction(
    settings: dict[str, object], error: type[Exception], shown: str
) -> None:
    from beam_nominal.beam import WriteToNominal

    # No pipeline, no worker: the transform's constructor is where a typo must surface.
    with pytest.raises(error) as info:
        WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", **settings)
    assert shown in str(info.value)
    if error is TypeError and "=" in shown:
        assert "WriteToNominal" in str(info.value) and "max_in_flight" in str(info.value)


def test_write_to_nominal_refuses_an_over_long_tag_at_construction() -> None:
    from beam_nominal.beam import WriteToNominal

    for tags in ({"site": "x" * 1025}, {"s" * 1025: "x"}):
        with pytest.raises(ValueError, match="over 1024 characters"):
            WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", tags=tags)
    WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", tags={"site": "x" * 1024})


@pytest.mark.parametrize("name", ["channel", "channels", "tags", "timestamps", "value", "values"])
def test_write_to_nominal_refuses_a_timestamp_field_named_like_a_shape_field(name: str) -> None:
    # timestamp_field="tags" would make {"channel", "tags", "value"} mean two things: a point whose
    # "tags" is its time, or a record of tags. One outcome per element needs the names apart.
    from beam_nominal.beam import WriteToNominal

    with pytest.raises(ValueError, match=f"timestamp_field {name!r} is a field name"):
        WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", timestamp_field=name)
    WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", timestamp_field="time")


def test_write_to_nominal_refuses_not_blocking_on_a_full_buffer() -> None:
    """A bundle over its buffer budget waits for room; raising instead would fail bundles
    whenever the target is slower than the input."""
    from beam_nominal.beam import WriteToNominal

    with pytest.raises(ValueError, match="block_on_full=False is not supported"):
        WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", block_on_full=False)
    WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", block_on_full=True)

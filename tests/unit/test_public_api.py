"""The public surface is deliberate: adding or removing a name must change this test."""

from __future__ import annotations

import subprocess
import sys

import beam_nominal

EXPECTED = [
    "AvroFileTarget",
    "BackpressureError",
    "BatchSettings",
    "BeamNominalError",
    "DeliveryError",
    "DeliveryReport",
    "FailedElement",
    "FallbackTarget",
    "GrpcTarget",
    "HttpTarget",
    "LocalServer",
    "LocalStore",
    "NominalStream",
    "RetrySettings",
    "SeriesKey",
    "SeriesTypeError",
    "StreamClosedError",
    "StreamState",
    "TargetError",
    "TeeTarget",
    "UploadSettings",
    "ValueType",
    "WriteToNominal",
    "WriteToNominalResult",
    "__version__",
]


def test_all_is_sorted_and_pinned() -> None:
    assert beam_nominal.__all__ == sorted(beam_nominal.__all__)
    assert beam_nominal.__all__ == EXPECTED


def test_every_public_name_resolves() -> None:
    for name in beam_nominal.__all__:
        assert getattr(beam_nominal, name) is not None, name
    assert set(dir(beam_nominal)) >= set(EXPECTED)


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        beam_nominal.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_stream_users_do_not_pay_for_importing_beam() -> None:
    code = (
        "import sys, beam_nominal\n"
        "beam_nominal.NominalStream; beam_nominal.LocalServer; beam_nominal.AvroFileTarget\n"
        "print('apache_beam' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"

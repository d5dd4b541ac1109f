"""The public surface is deliberate: adding or removing a name must change this test, and every type
a public call gives back or raises is among the names."""

from __future__ import annotations

import builtins
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _stream_fakes import RecordingTarget

import beam_nominal

EXPECTED = [
    "AvroFileTarget",
    "BackpressureError",
    "BatchSettings",
    "BeamNominalError",
    "DeliveryError",
    "DeliveryReport",
    "ElementError",
    "FailedElement",
    "FallbackTarget",
    "GrpcTarget",
    "HttpTarget",
    "InputError",
    "InvalidTypeError",
    "InvalidValueError",
    "LocalServer",
    "LocalStore",
    "NominalStream",
    "RemoteStore",
    "RetrySettings",
    "SeriesInfo",
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
    "WrittenFile",
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


def test_what_public_calls_give_back_is_exported(tmp_path: Path) -> None:
    import typing

    from beam_nominal.targets.avro_prefix import AvroPrefixTarget

    stream = beam_nominal.NominalStream(RecordingTarget(), dataset_rid="ri.x.1", linger=None)
    with pytest.raises(beam_nominal.ElementError):
        stream.enqueue("", 1, 1.0)  # an empty channel
    stream.enqueue("a", 1, 1.0)
    assert type(stream.close()) is beam_nominal.DeliveryReport
    with beam_nominal.LocalServer(tmp_path / "data", port=0) as server:
        with beam_nominal.NominalStream(server.target, dataset_rid="ri.x.1") as s:
            s.enqueue("a", 1, 1.0)
        with beam_nominal.RemoteStore(server.target) as remote:
            assert [type(info) for info in remote.list_series("ri.x.1")] == [beam_nominal.SeriesInfo]
        assert [type(info) for info in server.store.list_series("ri.x.1")] == [beam_nominal.SeriesInfo]
    # WriteToNominalResult.files holds the files an Avro prefix target made visible.
    assert typing.get_type_hints(AvroPrefixTarget.commit_bundle)["return"] == list[beam_nominal.WrittenFile]


def _annotated_types(fn: object, name: str) -> set[type]:
    """The classes one annotation of a function names (its arguments' included)."""
    import typing

    ann = getattr(fn, "__annotations__", {}).get(name)
    if ann is None:
        return set()
    if isinstance(ann, str):
        # The names the text uses, looked up where the function is (some annotations, such as
        # grpc's generic interceptors, cannot be evaluated at run time).
        scope = vars(sys.modules[fn.__module__])  # type: ignore[attr-defined]
        todo = []
        for dotted in re.findall(r"[A-Za-z_][\w.]*", ann):
            head, *rest = dotted.split(".")
            value = scope.get(head, getattr(builtins, head, None))
            for part in rest:
                value = getattr(value, part, None)
            todo.append(value)
    else:
        todo = [ann]
    out: set[type] = set()
    while todo:
        t = todo.pop()
        if isinstance(t, type):
            out.add(t)
        origin = typing.get_origin(t)
        if isinstance(origin, type):
            out.add(origin)
        todo.extend(typing.get_args(t))
    return out


def _is_private(t: type) -> bool:
    """Whether a class lives in a private module (or is generated protobuf code)."""
    parts = t.__module__.split(".")
    return any(p.startswith("_") or p.endswith("_pb2") for p in parts) or t.__qualname__.startswith("_")


def test_public_signatures_name_only_public_types() -> None:
    # What a public method gives back is exported; what it takes is at least not private.
    import inspect

    exported = {getattr(beam_nominal, name) for name in beam_nominal.__all__ if name != "__version__"}
    wrong = []
    for name in beam_nominal.__all__:
        obj = getattr(beam_nominal, name)
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_") and attr != "__init__":
                continue
            fn = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if not callable(fn) or not getattr(fn, "__module__", "").startswith("beam_nominal"):
                continue
            for t in _annotated_types(fn, "return"):
                if t.__module__.startswith("beam_nominal") and t not in exported:
                    wrong.append(f"{name}.{attr} gives back {t.__module__}.{t.__qualname__}")
            for param in inspect.signature(fn).parameters:
                for t in _annotated_types(fn, param):
                    if t.__module__.startswith("beam_nominal") and t not in exported and _is_private(t):
                        wrong.append(f"{name}.{attr}({param}) takes {t.__module__}.{t.__qualname__}")
    assert wrong == []

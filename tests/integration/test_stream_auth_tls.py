"""NominalStream's gRPC target: TLS with a given CA, tokens from the environment, auth failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from beam_nominal.errors import DeliveryError, TargetError
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream
from beam_nominal.targets.grpc import GrpcTarget

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.auth-1"
T = 1_700_000_000_000_000_000


def test_grpcs_with_a_given_ca_file_and_token(tmp_path: Path, tls_files: Any) -> None:
    cert, key, _ = tls_files
    with LocalServer(tmp_path / "data", host="localhost", tls_cert=cert, tls_key=key, token="s3cret") as srv:
        assert srv.target.startswith("grpcs://localhost:")
        with NominalStream(srv.target, dataset_rid=RID, token="s3cret", ca_file=cert, linger=None) as s:
            s.enqueue_batch("a", np.arange(T, T + 100), np.arange(100.0))
            assert "s3cret" not in repr(s)
        assert LocalStore(srv.store.data_dir).read(RID, "a").column("value").to_pylist() == [
            float(v) for v in range(100)
        ]


def test_token_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOMINAL_TOKEN", "env-token")
    with LocalServer(tmp_path / "data", token="env-token") as srv:
        with NominalStream(srv.target, dataset_rid=RID, linger=None) as s:
            s.enqueue("a", T, 1.0)
        assert LocalStore(srv.store.data_dir).read(RID, "a").num_rows == 1


def test_a_wrong_token_is_a_permanent_failure_not_retried(tmp_path: Path) -> None:
    with LocalServer(tmp_path / "data", token="right") as srv:
        # Refused at the first contact, when the stream opens: nothing is retried.
        with pytest.raises(TargetError, match="UNAUTHENTICATED") as refused:
            NominalStream(srv.target, dataset_rid=RID, token="tok-9f8e7d", linger=None, initial_backoff=0.001)
        assert not refused.value.retryable and "tok-9f8e7d" not in str(refused.value)
        # A token refused after the first contact (a callable whose token was revoked): the
        # stream's requests fail at once, without retries.
        tokens = iter(["right", "tok-9f8e7d"])
        s = NominalStream(srv.target, dataset_rid=RID, token=lambda: next(tokens), linger=None, initial_backoff=0.001)
        s.enqueue_batch("a", np.arange(T, T + 10), np.ones(10))
        with pytest.raises(DeliveryError, match="UNAUTHENTICATED") as info:
            s.close()
        assert info.value.points == 10 and info.value.report.retries == 0
        assert "tok-9f8e7d" not in str(info.value)


@pytest.mark.parametrize(
    "url",
    ["http://localhost:1", "grpc://localhost", "grpc://:123", "grpc://localhost:1/path", "localhost:1"],
)
def test_bad_urls_are_rejected(url: str) -> None:
    with pytest.raises(ValueError, match="grpc"):
        GrpcTarget(url)


def test_grpcs_defaults_to_port_443() -> None:
    t = GrpcTarget("grpcs://example.invalid", token=lambda: "x")
    try:
        assert t.url == "grpcs://example.invalid:443"
        assert "x" not in repr(t).replace("example.invalid", "")
    finally:
        t.close()

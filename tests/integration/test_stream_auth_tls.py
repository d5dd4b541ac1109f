"""NominalStream's gRPC target: TLS with a given CA, tokens from the environment, auth failures."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pytest

from beam_nominal.errors import DeliveryError
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import NominalStream
from beam_nominal.targets.grpc import GrpcTarget

pytestmark = pytest.mark.timeout(120)

RID = "ri.nominal.main.dataset.auth-1"
T = 1_700_000_000_000_000_000


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def test_grpcs_with_a_given_ca_file_and_token(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
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
        s = NominalStream(srv.target, dataset_rid=RID, token="tok-9f8e7d", linger=None, initial_backoff=0.001)
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

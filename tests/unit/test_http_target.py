"""HttpTarget's configuration, and the HTTP options of NominalStream and WriteToNominal (no server)."""

from __future__ import annotations

import email.utils

import pytest

from beam_nominal import HttpTarget, NominalStream
from beam_nominal.errors import TargetError
from beam_nominal.targets import target_from_url
from beam_nominal.targets.http import retry_after_seconds

RID = "ri.catalog.main.dataset.1"


def test_base_url_forms_and_the_endpoints_built_from_them() -> None:
    t = HttpTarget("https://api.gov.nominal.io/api/", dataset_rid=RID, token="s3cret")
    try:
        assert t.url == "https://api.gov.nominal.io/api"
        assert t._urls["row"] == f"https://api.gov.nominal.io/api/storage/writer/v1/nominal/{RID}"
        assert t._urls["columnar"] == "https://api.gov.nominal.io/api/storage/writer/v1/nominal-columnar"
        assert t.format == "row"
    finally:
        t.close()
    # A rid is one path segment whatever it holds.
    odd = HttpTarget("http://127.0.0.1:1/api", dataset_rid="../x y", format="columnar")
    assert odd._urls["row"].endswith("/nominal/..%2Fx%20y") and odd.format == "columnar"
    odd.close()


@pytest.mark.parametrize(
    ("url", "kw", "match"),
    [
        ("ftp://h/api", {}, "http"),
        ("https:///api", {}, "http"),
        ("https://h/api?x=1", {}, "query"),
        ("https://h/api", {"format": "rows"}, "format"),
        ("https://h/api", {"dataset_rid": ""}, "dataset_rid"),
        ("https://h/api", {"connect_timeout": 0}, "connect_timeout"),
    ],
)
def test_bad_configuration_is_refused_naming_the_value(url: str, kw: dict[str, object], match: str) -> None:
    kwargs: dict[str, object] = {"dataset_rid": RID, **kw}
    with pytest.raises(ValueError, match=match):
        HttpTarget(url, **kwargs)  # type: ignore[arg-type]


class _Unprobed(HttpTarget):
    """An HttpTarget a stream opens without a first contact (no server in this tier)."""

    def probe(self, dataset_rid: str | None = None, timeout: float = 0.0) -> None:
        pass


def test_the_token_never_shows() -> None:
    t = _Unprobed("https://h.invalid/api", dataset_rid=RID, token="s3cret-token")
    s = NominalStream(t, dataset_rid=RID)
    try:
        for text in (repr(t), str(t), repr(s)):
            assert "s3cret" not in text
        assert "token=<set>" in repr(t)
    finally:
        s.close()
        t.close()
    t = HttpTarget("https://h.invalid/api", dataset_rid=RID, token="s3cret-token")
    with pytest.raises(TargetError, match="first contact failed: unknown host") as failed:
        NominalStream(t, dataset_rid=RID)
    assert "s3cret" not in str(failed.value)
    t.close()


def test_target_from_url_makes_http_targets_and_keeps_http_options_to_them(tmp_path: object) -> None:
    t = target_from_url("http://127.0.0.1:1/api", dataset_rid=RID, format="columnar", fallback_to_row=True)
    try:
        assert isinstance(t, HttpTarget) and t.format == "columnar" and t._fallback_to_row
    finally:
        t.close()
    with pytest.raises(ValueError, match="http"):
        target_from_url("grpc://127.0.0.1:1", dataset_rid=RID, format="columnar")


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None
    assert retry_after_seconds("soon") is None
    now = 1_767_225_600.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert retry_after_seconds(date, now=lambda: now) == pytest.approx(7.0)
    assert retry_after_seconds(email.utils.formatdate(now - 60, usegmt=True), now=lambda: now) == 0.0


def test_write_to_nominal_checks_http_options_at_construction() -> None:
    pytest.importorskip("apache_beam")
    from beam_nominal import WriteToNominal

    WriteToNominal("https://h/api", dataset_rid=RID, format="columnar", fallback_to_row=True)
    with pytest.raises(ValueError, match="'colum'"):
        WriteToNominal("https://h/api", dataset_rid=RID, format="colum")
    with pytest.raises(ValueError, match="grpc://h:1"):
        WriteToNominal("grpc://h:1", dataset_rid=RID, format="row")
    with pytest.raises(TypeError, match="fallback_to_row"):
        WriteToNominal("https://h/api", dataset_rid=RID, fallback_to_row="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="credentials") as info:
        WriteToNominal("https://me:pw-SECRET@h/api", dataset_rid=RID)
    assert "pw-SECRET" not in str(info.value)
    with pytest.raises(ValueError, match="query"):
        WriteToNominal("https://h/api?x=1", dataset_rid=RID)


def test_the_proxy_variables_workers_set_are_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    import urllib3

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    proxied = HttpTarget("https://api.example/api", dataset_rid=RID)
    direct = HttpTarget("https://internal.example/api", dataset_rid=RID)
    try:
        assert isinstance(proxied._pool, urllib3.ProxyManager)
        assert not isinstance(direct._pool, urllib3.ProxyManager)
    finally:
        proxied.close()
        direct.close()


def test_credentials_in_the_url_are_refused_without_being_echoed() -> None:
    with pytest.raises(ValueError, match="credentials") as info:
        HttpTarget("https://user:pw-SECRET@api.example/api", dataset_rid=RID)
    assert "pw-SECRET" not in str(info.value)


def test_the_idempotency_key_is_the_digest_of_the_uncompressed_body() -> None:
    import blake3
    import numpy as np

    from beam_nominal._wire.batch import SeriesBatch
    from beam_nominal._wire.write_nominal import encode_write_nominal
    from beam_nominal.model import SeriesKey, ValueType
    from beam_nominal.targets.base import Request

    batches = [SeriesBatch(SeriesKey("a"), ValueType.DOUBLE, np.arange(3, dtype=np.int64), np.ones(3))]
    t = HttpTarget("http://127.0.0.1:1/api", dataset_rid=RID)
    try:
        body, key = t._body(Request(RID, batches), "row")
        assert key == blake3.blake3(encode_write_nominal(batches)).hexdigest()
        assert body != encode_write_nominal(batches)  # what is sent is compressed
    finally:
        t.close()


def test_a_body_sent_again_is_unchanged_by_later_encodes_on_its_thread() -> None:
    # The row body is made in a buffer the thread reuses: what a request keeps for its retries
    # (the compressed bytes) must not be a view of it.
    import numpy as np
    import zstandard

    from beam_nominal._wire.batch import SeriesBatch
    from beam_nominal._wire.write_nominal import encode_write_nominal
    from beam_nominal.model import SeriesKey, ValueType
    from beam_nominal.targets.base import Request

    def request(value: float) -> Request:
        ts = np.arange(50_000, dtype=np.int64)
        return Request(RID, [SeriesBatch(SeriesKey("a"), ValueType.DOUBLE, ts, np.full(50_000, value))])

    t = HttpTarget("http://127.0.0.1:1/api", dataset_rid=RID)
    try:
        first = request(1.0)
        body, _ = t._body(first, "row")
        t._body(request(2.0), "row")
        assert t._body(first, "row")[0] is body
        assert zstandard.ZstdDecompressor().decompress(body) == encode_write_nominal(first.batches)
    finally:
        t.close()

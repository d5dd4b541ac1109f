"""A Nominal outage longer than an attempt-count bound would survive (8 attempts from 0.1 s give up
after 8-13 s): with default settings both wires ride out a real 20 s outage of a real server, and
every point is stored exactly once. The streams open (their first contact,
``targets.base.first_contact``) while the server is up: a server that refuses the very first
connection is a wrong URL to fail on at once (test_first_contact.py), one that goes away after is
an outage. The longest outage the defaults ride out (about 112 s) is pinned with an injected
clock in tests/unit/test_stream_delivery.py."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from beam_nominal import NominalStream
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.stream import DeliveryReport

pytestmark = pytest.mark.timeout(240)

OUTAGE_S = 20.0
N = 20_000


@pytest.mark.slow
def test_default_retries_ride_out_a_20_second_outage_on_both_wires(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with LocalServer(data, port=0, http_port=0) as first:
        port, http_port = first.port, first.http_port
        targets = {"grpc": f"grpc://127.0.0.1:{port}", "http": f"http://127.0.0.1:{http_port}/api"}
        streams = {wire: NominalStream(url, dataset_rid=f"ri.outage.{wire}") for wire, url in targets.items()}
    # Down now. Both streams write and close into the outage.
    reports: dict[str, DeliveryReport] = {}
    errors: list[BaseException] = []

    def write(wire: str) -> None:
        try:
            with streams[wire] as s:
                s.enqueue_batch("v", np.arange(N, dtype=np.int64), np.arange(N, dtype=np.float64))
                reports[wire] = s.flush()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in targets]
    for t in threads:
        t.start()
    # The outage's length is the scenario itself, not a wait for something to happen.
    threading.Event().wait(OUTAGE_S)
    assert not errors, errors
    with LocalServer(data, port=port, http_port=http_port):
        for t in threads:
            t.join(timeout=150)
            assert not t.is_alive()
    assert not errors, errors
    store = LocalStore(data)
    for wire in targets:
        assert reports[wire].points == N
        table = store.read(f"ri.outage.{wire}", "v")
        assert table.column("timestamp").cast("int64").to_pylist() == list(range(N))
        assert table.column("value").to_pylist() == [float(i) for i in range(N)]

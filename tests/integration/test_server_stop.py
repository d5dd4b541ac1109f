"""After LocalServer.stop() returns, no handler of that server commits anything more.

gRPC's stop() cancels calls but cannot stop handler threads. A handler still publishing after
stop() would race a new server on the same directory: the client's retry lands there (the new
server has not seen the key), then the old handler's commit lands too — one request, two copies.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest

from beam_nominal._wire import metadata as md
from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.encode import encode_request
from beam_nominal.model import SeriesKey, ValueType
from beam_nominal.server import LocalServer, LocalStore
from beam_nominal.server.store import StoppingError

RID = "ri.test.stop"


def _request() -> bytes:
    ts = np.arange(100, dtype=np.int64)
    return encode_request(RID, [SeriesBatch(SeriesKey.of("x"), ValueType.DOUBLE, ts, ts * 0.5)])


def _send(target: str, body: bytes, key: str) -> grpc.StatusCode:
    with grpc.insecure_channel(target.removeprefix("grpc://")) as channel:
        call = channel.unary_unary(md.WRITE_COLUMN_BATCHES)
        try:
            call(body, metadata=[(md.IDEMPOTENCY_KEY, key)], timeout=30)
        except grpc.RpcError as exc:
            return exc.code()  # type: ignore[no-any-return]
        return grpc.StatusCode.OK


def test_stop_waits_for_a_commit_in_progress_and_a_restart_stores_no_duplicate(tmp_path: Path) -> None:
    server = LocalServer(tmp_path, port=0).start()
    committer = server._committer
    assert committer is not None
    entered, release = threading.Event(), threading.Event()
    publish = committer._publish

    def paused_publish(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        assert release.wait(30)
        return publish(*args, **kwargs)

    committer._publish = paused_publish  # type: ignore[method-assign]
    body = _request()
    key = md.idempotency_key(body)
    sender = threading.Thread(target=_send, args=(server.target, body, key))
    sender.start()
    assert entered.wait(30), "the request never reached the commit"

    stopped = threading.Event()
    stopper = threading.Thread(target=lambda: (server.stop(grace=0), stopped.set()))
    stopper.start()
    # stop() must not return while the commit is still writing.
    assert not stopped.wait(0.5)
    release.set()
    assert stopped.wait(30)
    stopper.join(30)
    sender.join(30)

    # The client saw a cancelled call and retries on a new server over the same directory.
    with LocalServer(tmp_path, port=0) as again:
        assert _send(again.target, body, key) is grpc.StatusCode.OK
    table = LocalStore(tmp_path).read(RID, "x")
    assert table.num_rows == 100
    assert table.column("value").to_pylist() == [i * 0.5 for i in range(100)]


def test_a_stopped_committer_refuses_writes_and_stores_nothing(tmp_path: Path) -> None:
    server = LocalServer(tmp_path, port=0).start()
    committer = server._committer
    server.stop()
    assert committer is not None
    ts = np.arange(3, dtype=np.int64)
    with pytest.raises(StoppingError):
        committer.commit(RID, [SeriesBatch(SeriesKey.of("x"), ValueType.DOUBLE, ts, ts * 1.0)], "k")
    assert LocalStore(tmp_path).list_series(RID) == []

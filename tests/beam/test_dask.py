"""WriteToNominal on Beam's DaskRunner, with a LocalCluster of two worker processes.

DaskRunner runs each ParDo per Dask partition: it pickles the DoFn with the task, calls setup,
start_bundle, process for every element, then takes the outputs, and only then calls finish_bundle
and teardown (so whatever a DoFn outputs from finish_bundle is dropped). A consumer of one tagged
output receives every output of the producing ParDo. It computes only the bag of the pipeline's
last transform, so the failed output is consumed by the last transform here, and it is collected
through files because a Dask pipeline has no assert_that.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.server import LocalServer

distributed = pytest.importorskip("dask.distributed")

from apache_beam.runners.dask.dask_runner import DaskRunner  # noqa: E402  (needs dask)

BASE = 1_700_000_000_000_000_000
SEEDS = 16
PARTITIONS = 8
RID = "ri.test.dask"

# A series: (channel, sorted tag items).
Key = tuple[str, tuple[tuple[str, str], ...]]


def _body(seed: int) -> list[Any]:
    """Good elements of every shape, interleaved so that each series is pinned early in the seed."""
    b = BASE + seed * 1_000_000
    specials = [-0.0, math.nan, math.inf, -math.inf, 5e-324, 2.0**1023]
    floats = [(f"f.{seed % 3}", b + i, specials[i] if i < len(specials) else seed + i / 7) for i in range(60)]
    big = [2**53 + 1, -(2**63), 2**63 - 1, -(2**53) - 3]
    ints = [(f"i.{seed % 2}", b + i, big[i] if i < len(big) else (2**53 + i) * (-1) ** i) for i in range(60)]
    uints = [("u.0", b + i, 2**64 - 1 - seed * 100 - i if i % 2 else 2**63 + seed * 100 + i) for i in range(20)]
    texts = [(f"t.{seed % 2}", b + i, f"plain {seed}/{i}") for i in range(20)]
    strs = [(f"s.{seed % 2}", b + i, f"v{seed}-{i}-héllo ✓" if i else "", {"unit": "txt"}) for i in range(40)]
    dict_ints = [{"channel": "d.level", "timestamp": b + i, "value": seed * 100 + i} for i in range(30)]
    dict_strs = [{"channel": "d.note", "timestamp": b + i, "value": f"n{i}", "tags": {"k": "v"}} for i in range(10)]
    wide_dicts = [
        {
            "timestamp": b + i,
            "w.temp": seed + i / 4,
            "w.mode": None if i % 5 == 4 else f"mode{i % 3}",
            "w.count": 2**60 + i,
            "tags": {"src": "dict"},
        }
        for i in range(20)
    ]
    wide_tuples = [(b + i, {"w.temp": -i / 3, "w.count": i}, {"src": "tuple"}) for i in range(10)]
    kinds = [floats, ints, uints, texts, strs, dict_ints, dict_strs, wide_dicts, wide_tuples]
    return [kind[i] for i in range(60) for kind in kinds if i < len(kind)]


def _tail(seed: int) -> list[Any]:
    """Plain (channel, int ns, value) points only: a sink that checks such points in batches finds a
    bad one among them, in the last seed of a bundle, only in finish_bundle."""
    b = BASE + seed * 1_000_000 + 500_000
    return [(f"{c}.{seed % n}", b + i, v(i)) for i in range(8) for c, n, v in _TAIL_KINDS]


_TAIL_KINDS: list[tuple[str, int, Any]] = [("f", 3, lambda i: i / 3), ("i", 2, lambda i: -i), ("t", 2, str)]


def _good(seed: int) -> list[Any]:
    return [*_body(seed), *_tail(seed)]


def _bad_mid(seed: int) -> list[tuple[Any, tuple[str, ...]]]:
    """Two bad elements amid the seed's body, each with words its failure must name."""
    ts = BASE + seed * 1_000_000 + 900_000
    f, i, s = f"f.{seed % 3}", f"i.{seed % 2}", f"s.{seed % 2}"
    kinds: list[tuple[Any, tuple[str, ...]]] = [
        ((s, ts, "bad\ud800", {"unit": "txt"}), (repr(s), "Unicode")),  # lone surrogate in a string series
        ((f, ts, "text"), ("SeriesTypeError", repr(f), "pinned to double")),
        ((i, ts, 2**64 + seed), (repr(i), str(2**64 + seed))),  # beyond uint64
        ((f, f"not a time {seed}", 1.0), ("ISO-8601",)),
        ((f, 2**63 + seed, 1.0), ("outside the int64 nanosecond range",)),
        (("", ts, float(seed)), ("channel must be a non-empty string",)),
        ({"channel": "d.level", "timestamp": ts, "value": "oops"}, ("SeriesTypeError", "pinned to int64")),
        ({"timestamp": f"2024-01-01T00:00:{seed:02d}", "w.temp": 1.0}, ("timezone",)),  # naive
    ]
    return [kinds[seed % len(kinds)], kinds[(seed + 3) % len(kinds)]]


def _bad_tail(seed: int) -> tuple[Any, tuple[str, ...]]:
    """A bad plain point amid the seed's tail (see :func:`_tail`)."""
    ts = BASE + seed * 1_000_000 + 950_000
    f, i, t = f"f.{seed % 3}", f"i.{seed % 2}", f"t.{seed % 2}"
    kinds: list[tuple[Any, tuple[str, ...]]] = [
        ((t, ts, "tail\ud800"), (repr(t), "Unicode")),
        ((f, ts, "tail text"), ("SeriesTypeError", repr(f), "pinned to double")),
        ((i, ts, 2**64 + 100 + seed), (repr(i), str(2**64 + 100 + seed))),
        ((f, 2**63 + 100 + seed, 1.0), ("outside the int64 nanosecond range",)),
        (("", ts, -1.0 - seed), ("channel must be a non-empty string",)),
    ]
    return kinds[seed % len(kinds)]


def _bad(seed: int) -> list[tuple[Any, tuple[str, ...]]]:
    return [*_bad_mid(seed), _bad_tail(seed)]


def generate(seed: int) -> list[Any]:
    """A seed's elements; all of them stay in the seed's Dask partition, in this order."""
    body, tail = _body(seed), _tail(seed)
    # Amid good points, so that a rejection cannot take its neighbours with it.
    mid = [e for e, _ in _bad_mid(seed)]
    return [*body[: len(body) // 2], *mid, *body[len(body) // 2 :], *tail[:12], _bad_tail(seed)[0], *tail[12:]]


def _expected() -> dict[Key, tuple[str, list[tuple[int, Any]]]]:
    out: dict[Key, tuple[str, list[tuple[int, Any]]]] = {}

    def add(channel: str, tags: dict[str, str] | None, ts: int, value: Any) -> None:
        if isinstance(value, float):
            vtype = "double"
        elif isinstance(value, str):
            vtype = "string"
        else:
            vtype = "uint64" if channel.startswith("u.") else "int64"
        key = (channel, tuple(sorted((tags or {}).items())))
        out.setdefault(key, (vtype, []))[1].append((ts, value))

    for seed in range(SEEDS):
        for e in _good(seed):
            if isinstance(e, tuple) and isinstance(e[1], dict):
                for channel, value in e[1].items():
                    add(channel, e[2], e[0], value)
            elif isinstance(e, tuple):
                add(e[0], e[3] if len(e) > 3 else None, e[1], e[2])
            elif "channel" in e:
                add(e["channel"], e.get("tags"), e["timestamp"], e["value"])
            else:
                for channel, value in e.items():
                    if channel not in ("timestamp", "tags") and value is not None:
                        add(channel, e["tags"], e["timestamp"], value)
    return out


def _exact(v: Any) -> Any:
    """Tells -0.0 from 0.0 and equates NaN with NaN; keeps the type, so 1 and 1.0 differ."""
    return (type(v).__name__, v.hex() if isinstance(v, float) else v)


class _SaveFailed(beam.DoFn):
    """Writes each element to its own file, named so that no two elements share one."""

    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def process(self, element: Any) -> Iterator[Any]:
        path = os.path.join(self._directory, f"{os.getpid()}-{uuid.uuid4().hex}.pkl")
        with open(path + ".tmp", "wb") as f:
            pickle.dump(element, f)
        os.replace(path + ".tmp", path)
        return iter(())


@pytest.fixture
def dask_client(tmp_path: Path) -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        processes=True,
        threads_per_worker=1,
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
        local_directory=str(tmp_path / "dask"),
    ) as cluster:
        # Not the default client (nor the context's current one): the default is then the client
        # DaskRunner makes, which the test closes.
        client = distributed.Client(cluster, set_as_default=False)
        try:
            yield client
        finally:
            client.close()


@pytest.mark.timeout(300)
def test_write_to_nominal_on_dask_runner_local_cluster(tmp_path: Path, dask_client: Any) -> None:
    failed_dir = tmp_path / "failed"
    failed_dir.mkdir()
    dask_client.wait_for_workers(2, timeout=120)
    workers = set(dask_client.run(os.getpid).values())
    assert len(workers) == 2 and os.getpid() not in workers
    address = dask_client.scheduler.address
    opts = PipelineOptions([f"--dask_client_address={address}", f"--dask_npartitions={PARTITIONS}"])
    with LocalServer(tmp_path / "server", port=0) as server:
        p = beam.Pipeline(runner=DaskRunner(), options=opts)
        result = (
            p
            | beam.Create(list(range(SEEDS)))
            | "Generate" >> beam.FlatMap(generate)
            | WriteToNominal(server.target, dataset_rid=RID)
        )
        _ = result.failed | "SaveFailed" >> beam.ParDo(_SaveFailed(str(failed_dir)))
        try:
            p.run().wait_until_finish()
        finally:
            # DaskRunner never closes the client it makes, which would outlive the cluster; a run
            # that fails to compute does not even return it.
            with contextlib.suppress(ValueError):
                distributed.default_client().close()

        expected = _expected()
        infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in server.store.list_series(RID)}
        assert sorted(infos) == sorted(expected)
        for key, (vtype, points) in expected.items():
            assert infos[key].value_type.value == vtype, key
            assert infos[key].count == len(points), key
            table = server.store.read(RID, key[0], dict(key[1]))
            got = zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True)
            assert sorted((t, _exact(v)) for t, v in got) == sorted((t, _exact(v)) for t, v in points), key
        assert sum(i.count for i in infos.values()) == sum(len(p) for _, p in expected.values())

    files = sorted(failed_dir.glob("*.pkl"))
    # Written by the cluster's workers, not by this process.
    assert {int(f.name.split("-")[0]) for f in files} <= workers
    failed = [pickle.loads(f.read_bytes()) for f in files]
    assert all(type(f) is FailedElement for f in failed), failed
    bad = [b for seed in range(SEEDS) for b in _bad(seed)]
    # Exactly once each: none lost, none repeated, no good element among them.
    got, want = Counter(repr(f.element) for f in failed), Counter(repr(e) for e, _ in bad)
    assert got == want, {"missing": sorted((want - got).elements()), "unexpected": sorted((got - want).elements())}
    by_element = {repr(f.element): f for f in failed}
    for element, words in bad:
        f = by_element[repr(element)]
        text = f"{f.error}: {f.reason}"
        assert f.reason.startswith(f"element {element!r}"[:60]) and all(w in text for w in words), (element, f)

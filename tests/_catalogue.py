"""Elements of every shape, good and bad, and the exact checks of what a runner stored and failed.

A seed's elements (:func:`generate`) mix points, series-free wide records and dicts of every value
type (specials: -0.0, NaN, infinities, subnormals; integers beyond 2**53 and uint64) with bad
elements amid them, each with words its failure must name. :func:`check_store` compares what a
server stored with :func:`expected`, exactly; :func:`check_failed` compares the failed output with
:func:`bad`: each bad element exactly once, none good. Used by the tiers that run other runners
(``tests/beam/test_dask.py``, ``tests/engines``).
"""

from __future__ import annotations

import math
import os
import pickle
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam

from beam_nominal.beam import FailedElement
from beam_nominal.server import LocalStore

BASE = 1_700_000_000_000_000_000
SEEDS = 16

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


def bad(seed: int, surrogates: bool = True) -> list[tuple[Any, tuple[str, ...]]]:
    """The seed's bad elements; ``surrogates=False`` leaves out those holding a lone surrogate."""
    return [b for b in (*_bad_mid(seed), _bad_tail(seed)) if surrogates or not _has_surrogate(b[0])]


def _has_surrogate(element: Any) -> bool:
    """Whether the element holds a str with a lone surrogate, which Beam's coders cannot encode:
    on a portable runner such an element fails the bundle that samples its size or sends it on."""
    return re.search(r"\\ud[89a-f][0-9a-f]{2}", repr(element)) is not None


def generate(seed: int, surrogates: bool = True) -> list[Any]:
    """A seed's elements, in this order (on Dask all stay in the seed's partition); see :func:`bad`."""
    body, tail = _body(seed), _tail(seed)
    # Amid good points, so that a rejection cannot take its neighbours with it.
    mid = [e for e, _ in _bad_mid(seed)]
    out = [*body[: len(body) // 2], *mid, *body[len(body) // 2 :], *tail[:12], _bad_tail(seed)[0], *tail[12:]]
    return [e for e in out if surrogates or not _has_surrogate(e)]


def expected(seeds: int = SEEDS) -> dict[Key, tuple[str, list[tuple[int, Any]]]]:
    """Every series the good elements of ``seeds`` seeds make: its value type and its points."""
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

    for seed in range(seeds):
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


def exact(v: Any) -> Any:
    """Tells -0.0 from 0.0 and equates NaN with NaN; keeps the type, so 1 and 1.0 differ."""
    return (type(v).__name__, v.hex() if isinstance(v, float) else v)


class SaveFailed(beam.DoFn):
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


def check_store(store: LocalStore, rid: str, seeds: int = SEEDS) -> int:
    """Asserts that ``store`` holds exactly the good points of ``seeds`` seeds; returns their number."""
    want = expected(seeds)
    infos = {(s.channel, tuple(sorted(s.tags.items()))): s for s in store.list_series(rid)}
    assert sorted(infos) == sorted(want)
    for key, (vtype, points) in want.items():
        assert infos[key].value_type.value == vtype, key
        assert infos[key].count == len(points), key
        table = store.read(rid, key[0], dict(key[1]))
        got = zip(table.column("timestamp").to_pylist(), table.column("value").to_pylist(), strict=True)
        assert sorted((t, exact(v)) for t, v in got) == sorted((t, exact(v)) for t, v in points), key
    total = sum(len(p) for _, p in want.values())
    assert sum(i.count for i in infos.values()) == total
    return total


def read_failed(directory: Path) -> list[FailedElement]:
    """The failed elements :class:`SaveFailed` wrote into ``directory``."""
    failed = [pickle.loads(f.read_bytes()) for f in sorted(directory.glob("*.pkl"))]
    assert all(type(f) is FailedElement for f in failed), failed
    return failed


def check_failed(failed: list[FailedElement], seeds: int = SEEDS, surrogates: bool = True) -> None:
    """Asserts that ``failed`` holds each bad element of ``seeds`` seeds once, with its reason."""
    bad_ones = [b for seed in range(seeds) for b in bad(seed, surrogates)]
    # Exactly once each: none lost, none repeated, no good element among them.
    got, want = Counter(repr(f.element) for f in failed), Counter(repr(e) for e, _ in bad_ones)
    assert got == want, {"missing": sorted((want - got).elements()), "unexpected": sorted((got - want).elements())}
    by_element = {repr(f.element): f for f in failed}
    for element, words in bad_ones:
        f = by_element[repr(element)]
        text = f"{f.error}: {f.reason}"
        assert f.reason.startswith(f"element {element!r}"[:60]) and all(w in text for w in words), (element, f)

"""Where an HTTP request's time goes, per wire form: encode, zstd at several levels, unzstd, decode.

One process, medians of repeated calls on the same request (in-process micro-measurements, to read
``bench_http``'s end-to-end figures, not to replace them). Shapes: ``deep`` (one series of 190,000
doubles, random), ``smooth`` (the same length, a noisy sine rounded to 0.01: telemetry-like),
``grouped`` (1,900 series of 100 doubles), and arrays (``fa8``: 20,000 rows of 8 doubles,
``sa32``: 20,000 rows of 32 strings). Prints ns per point.

Run: ``.venv/bin/python -m benchmarks.bench_http_parts [--repeat 15]``
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import zstandard

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.decode import decode_request
from beam_nominal._wire.encode import encode_request
from beam_nominal._wire.write_batches_v2 import decode_write_batches_v2, encode_write_batches_v2
from beam_nominal._wire.write_nominal import decode_write_nominal, encode_write_nominal
from beam_nominal.model import SeriesKey, ValueType

T0 = 1_700_000_000_000_000_000
LEVELS = (1, -1, -3)


def _shapes() -> dict[str, list[SeriesBatch]]:
    rng = np.random.default_rng(0)
    n = 190_000
    ts = np.arange(T0, T0 + n, dtype=np.int64)
    smooth = np.round(np.sin(np.arange(n) / 500) * 100 + rng.normal(0, 0.5, n), 2)
    g_ts = np.arange(T0, T0 + 100, dtype=np.int64)
    rows = 20_000
    r_ts = np.arange(T0, T0 + rows, dtype=np.int64)
    key, d = SeriesKey, ValueType
    return {
        "deep": [SeriesBatch(key("deep"), d.DOUBLE, ts, rng.random(n))],
        # 1 kHz, as a sampled signal would be.
        "smooth": [SeriesBatch(key("smooth"), d.DOUBLE, np.arange(T0, T0 + n * 1_000_000, 1_000_000), smooth)],
        "grouped": [SeriesBatch(key(f"g{i:04d}"), d.DOUBLE, g_ts + i, rng.random(100)) for i in range(1_900)],
        "fa8": [SeriesBatch(key("fa"), d.DOUBLE_ARRAY, r_ts, [rng.random(8) for _ in range(rows)])],
        "sa32": [SeriesBatch(key("sa"), d.STRING_ARRAY, r_ts, [[f"s{i}" for i in range(32)]] * rows)],
    }


def _median(fn: Callable[[], Any], repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args(argv)
    forms: dict[str, tuple[Callable[[list[SeriesBatch]], bytes], Callable[[bytes], Any]]] = {
        "row": (encode_write_nominal, lambda b: decode_write_nominal(b, "ri.bench")),
        "columnar": (lambda bs: encode_write_batches_v2("ri.bench", bs), decode_write_batches_v2),
        "grpc": (lambda bs: encode_request("ri.bench", bs), decode_request),
    }
    zstd_cols = " | ".join(f"zstd {lvl}: ns, ratio" for lvl in LEVELS)
    print(f"| shape | form | bytes/pt | encode | {zstd_cols} | unzstd | decode |")
    print("|---|---|---|---|" + "---|" * len(LEVELS) + "---|---|")
    for name, batches in _shapes().items():
        points = sum(len(b) for b in batches)

        def per_point(fn: Callable[..., Any], *fn_args: Any) -> float:
            return _median(functools.partial(fn, *fn_args), args.repeat) / points * 1e9  # noqa: B023

        for form, (encode, decode) in forms.items():
            body = encode(batches)
            cells = [f"{per_point(encode, batches):.0f}"]
            for level in LEVELS:
                comp = zstandard.ZstdCompressor(level=level)
                packed = comp.compress(body)
                cells.append(f"{per_point(comp.compress, body):.0f}, {len(body) / len(packed):.2f}x")
            packed = zstandard.ZstdCompressor(level=-1).compress(body)
            cells.append(f"{per_point(zstandard.ZstdDecompressor().decompress, packed):.0f}")
            cells.append(f"{per_point(decode, body):.0f}")
            print(f"| {name} | {form} | {len(body) / points:.1f} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

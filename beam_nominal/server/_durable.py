"""Durability primitives of the local server: every fsync and fdatasync the store makes.

A commit is acknowledged only after its bytes (``fdatasync`` of the file) and its name (``fsync`` of
the directory it was renamed into) are on disk; these helpers are those steps, kept in one place
so what "durable" means can be read at a glance. The directory fsync shared by concurrent commits
is ``_index._GroupSync``, beside the per-dataset state that holds one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa

from beam_nominal.server._format import _parquet_bytes


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: Path, write: Any) -> None:
    with open(path, "xb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())


def _write_commit_file(path: Path, table: pa.Table, manifest: bytes) -> None:
    """Write one commit file and make its bytes durable (fdatasync: also flushes the size and
    block map, what reading the data needs; the name is made durable by the rename and the
    directory fsync)."""
    data = _parquet_bytes(table, manifest)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fdatasync(fd)
    finally:
        os.close(fd)

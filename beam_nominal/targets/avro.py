"""A target that appends requests to an Avro object container file in nominal-streaming's format.

The file is byte-for-byte the format nominal-streaming 0.10.5 writes (``NominalDatasetStream``'s
``to_file`` and ``with_file_fallback``), so Nominal's Avro stream ingestion takes it as is:

- the writer schema is ``io.nominal.ingest.AvroStream`` (:data:`AVRO_STREAM_SCHEMA_JSON`, the very
  string nominal-streaming puts in the header): ``channel`` string, ``timestamps`` array of long
  (int64 ns), ``values`` array of the union ``[double, string, long, DoubleArray, StringArray,
  JsonStruct]``, ``tags`` map of string with default ``{}``;
- the codec is snappy by default (``null`` and ``deflate`` are also available);
- the dataset rid, when known, is the file metadata entry ``nominal.dataset_rid``.

One record per :class:`~beam_nominal._wire.batch.SeriesBatch` (one series' points from one request)
and one Avro block per :meth:`AvroFileTarget.send`: a send either lands as a whole block, fsynced
before it returns, or not at all, so the file is readable after every acknowledged send.

Types, exactly: double -> ``double``; int64 and bool (stored as int64) -> ``long``; uint64 ->
``long`` when it fits, and a value above 2**63 - 1 makes the whole send fail with a permanent
:class:`~beam_nominal.errors.TargetError` (code ``uint64_out_of_range``) rather than be written
rounded as a double; string -> ``string``; struct -> ``JsonStruct`` (its JSON text); double and
string arrays -> ``DoubleArray`` / ``StringArray``. nominal-streaming itself writes every integer as
a double (rounding beyond 2**53) and never uses the ``long`` branch; ``integers="double"`` does the
same for an ingester that refuses ``long``, but refuses a value it would round.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import urllib.parse
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import cramjam
import numpy as np
import numpy.typing as npt

from beam_nominal._wire.batch import SeriesBatch
from beam_nominal._wire.scratch import Scratch, thread_scratch
from beam_nominal.errors import TargetError
from beam_nominal.model import SeriesKey
from beam_nominal.targets._avro_block import (
    BatchError,
    NotRepresentable,
    encode_records,
    long_bytes,
    string_bytes,
)
from beam_nominal.targets.base import Request

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "AVRO_STREAM_SCHEMA",
    "AVRO_STREAM_SCHEMA_JSON",
    "DATASET_RID_METADATA_KEY",
    "AvroFileTarget",
    "AvroSeries",
    "JsonText",
    "read_avro_file",
]

#: The writer schema exactly as nominal-streaming 0.10.5 stores it under ``avro.schema``.
AVRO_STREAM_SCHEMA_JSON = (
    '{"type":"record","namespace":"io.nominal.ingest","name":"AvroStream","fields":['
    '{"name":"channel","type":"string"},'
    '{"name":"timestamps","type":{"type":"array","items":"long"}},'
    '{"name":"values","type":{"type":"array","items":["double","string","long",'
    '{"type":"record","namespace":"io.nominal.ingest","name":"DoubleArray",'
    '"fields":[{"name":"items","type":{"type":"array","items":"double"}}]},'
    '{"type":"record","namespace":"io.nominal.ingest","name":"StringArray",'
    '"fields":[{"name":"items","type":{"type":"array","items":"string"}}]},'
    '{"type":"record","namespace":"io.nominal.ingest","name":"JsonStruct",'
    '"fields":[{"name":"json","type":"string"}]}]}},'
    '{"name":"tags","type":{"type":"map","values":"string"},"default":{}}]}'
)
#: The same schema as a Python object (e.g. for ``fastavro.parse_schema``).
AVRO_STREAM_SCHEMA: dict[str, Any] = json.loads(AVRO_STREAM_SCHEMA_JSON)
#: File metadata key under which nominal-streaming records the dataset rid.
DATASET_RID_METADATA_KEY = "nominal.dataset_rid"

_MAGIC = b"Obj\x01"
_SYNC_SIZE = 16
_CODECS = ("snappy", "deflate", "null")
_INTEGERS = ("long", "double")
# Errors a full disk or quota gives: space may come back, so the uploader should retry.
_RETRYABLE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EINTR, errno.EAGAIN})

try:
    # zlib-ng's CRC-32 (same polynomial as zlib's) uses carry-less multiplication: many times
    # faster than zlib's on a whole block.
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - a dependency; zlib gives the same values, slower
    from zlib import crc32 as _crc32


def _compress(codec: str, data: memoryview, scratch: Scratch) -> list[Any]:
    """The block's data as buffers to write in order (no copy into one bytes object)."""
    if codec == "snappy":
        # Avro's snappy framing: raw snappy, then the big-endian CRC-32 of the uncompressed bytes.
        out = scratch.get("snappy", cramjam.snappy.compress_raw_max_len(data))
        size = cramjam.snappy.compress_raw_into(data, out.data)
        return [out[:size].data, _crc32(data).to_bytes(4, "big")]
    if codec == "deflate":
        c = zlib.compressobj(6, zlib.DEFLATED, -15)
        return [c.compress(data) + c.flush()]
    return [data]


def _header(codec: str, dataset_rid: str | None, sync: bytes) -> bytes:
    meta = {"avro.schema": AVRO_STREAM_SCHEMA_JSON.encode(), "avro.codec": codec.encode()}
    if dataset_rid is not None:
        meta[DATASET_RID_METADATA_KEY] = dataset_rid.encode("utf-8")
    body = b"".join(string_bytes(k) + long_bytes(len(v)) + v for k, v in meta.items())
    return _MAGIC + long_bytes(len(meta)) + body + b"\x00" + sync


# ---------------------------------------------------------------------------------------------
# Reading an existing header (appending)
# ---------------------------------------------------------------------------------------------


def _read_long(f: BinaryIO) -> int:
    shift = 0
    z = 0
    while True:
        b = f.read(1)
        if not b:
            raise EOFError("file ends inside a number")
        z |= (b[0] & 0x7F) << shift
        if not b[0] & 0x80:
            return (z >> 1) ^ -(z & 1)
        shift += 7
        if shift > 63:
            raise ValueError("malformed varint")


def _read_exact(f: BinaryIO, n: int) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise EOFError(f"file ends {n - len(data)} bytes early")
    return data


def _scan_existing(path: Path) -> tuple[dict[str, bytes], bytes, int]:
    """Metadata, sync marker and length of the valid part of an existing container file.

    Raises:
        ValueError: not an Avro container, or a last block cut short (an interrupted write).
    """
    with open(path, "rb") as f:
        if f.read(4) != _MAGIC:
            raise ValueError(f"{path} exists and is not an Avro object container file")
        meta: dict[str, bytes] = {}
        end = 4
        try:
            while True:
                count = _read_long(f)
                if count == 0:
                    break
                if count < 0:
                    count = -count
                    _read_long(f)
                for _ in range(count):
                    k = _read_exact(f, _read_long(f)).decode("utf-8")
                    meta[k] = _read_exact(f, _read_long(f))
            sync = _read_exact(f, _SYNC_SIZE)
            end = f.tell()
            while True:
                first = f.read(1)
                if not first:
                    return meta, sync, end
                f.seek(-1, os.SEEK_CUR)
                _read_long(f)
                size = _read_long(f)
                f.seek(size, os.SEEK_CUR)
                if _read_exact(f, _SYNC_SIZE) != sync:
                    raise ValueError("a block's sync marker does not match the header's")
                end = f.tell()
        except (EOFError, ValueError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{path} is damaged after byte {end} ({exc}), probably by an "
                "interrupted write; move it aside or pass overwrite=True"
            ) from None


# ---------------------------------------------------------------------------------------------
# The target
# ---------------------------------------------------------------------------------------------


def _path_of(path_or_url: str | os.PathLike[str]) -> Path:
    text = os.fspath(path_or_url)
    if text.startswith("file:"):
        parsed = urllib.parse.urlparse(text)
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"file URL {text!r} names host {parsed.netloc!r}; only local files work")
        return Path(urllib.parse.unquote(parsed.path))
    return Path(text)


def _drop_cached(fd: int, start: int, end: int) -> None:
    """Let the kernel drop the page cache of bytes already fsynced: this process never reads them.

    Writing into pages the page cache hands back, rather than fresh ones, keeps a block's write
    several times cheaper once the cache has grown, and keeps a long-running fallback file from
    filling memory with cache. Pages still dirty from a later block are left alone by the kernel.
    """
    if _FADVISE is not None:
        with contextlib.suppress(OSError):
            _FADVISE(fd, start, end - start, os.POSIX_FADV_DONTNEED)


_FADVISE = getattr(os, "posix_fadvise", None)


def block_parts(batches: Iterable[SeriesBatch], integers: str, codec: str, sync: bytes) -> tuple[list[Any], int]:
    """One Avro block (count, size, data, ``sync``) holding a record per non-empty batch.

    Returns:
        The block as buffers to write in order (they live in this thread's scratch buffers, valid
        until the thread's next block or its end; empty when no batch has points) and its number of points.

    Raises:
        TargetError: permanent; a value Avro cannot hold (see the module docs).
    """
    scratch = thread_scratch()
    try:
        data, records, points = encode_records(batches, integers, scratch)
    except BatchError as err:
        b, exc = err.batch, err.cause
        if isinstance(exc, NotRepresentable):
            raise TargetError(
                f"batches[{err.index}] series {b.key.describe()}: {exc}", retryable=False, code=exc.code
            ) from None
        raise TargetError(
            f"batches[{err.index}] series {b.key.describe()} ({b.value_type.value}) is not writable as Avro: {exc}",
            retryable=False,
            code="invalid_request",
        ) from None
    if not records:
        return [], 0
    body = _compress(codec, data, scratch)
    size = sum(len(p) for p in body)
    return [long_bytes(records) + long_bytes(size), *body, sync], points


def header_bytes(codec: str, dataset_rid: str | None, sync: bytes) -> bytes:
    """An Avro stream file's header: magic, metadata (schema, codec, dataset rid) and ``sync``."""
    return _header(codec, dataset_rid, sync)


def _pwritev(fd: int, views: list[memoryview], offset: int) -> int:
    if hasattr(os, "pwritev"):
        return os.pwritev(fd, views, offset)
    return os.pwrite(fd, b"".join(views), offset)  # pragma: no cover - platforms without pwritev


class AvroFileTarget:
    """Appends each request to an Avro file, durably, as one block.

    Safe to call from many threads: blocks are encoded concurrently and appended one at a time.
    ``send`` returns after the block is written and fsynced, so every acknowledged point survives
    a crash, and the file is a valid container (readable by fastavro, ingestible by Nominal) after
    every send that returns.

    Args:
        path: a file path or ``file://`` URL; the parent directory must exist.
        dataset_rid: stored as the ``nominal.dataset_rid`` metadata entry; requests for any other
            dataset are then refused. When None, the file has no rid entry and takes any request.
        codec: ``"snappy"`` (nominal-streaming's choice), ``"deflate"`` or ``"null"``.
        overwrite: replace an existing file instead of appending to it. Appending (the default)
            keeps earlier data, e.g. a fallback file from an earlier run; the existing file must
            have this schema and, if given, this dataset rid, and its codec is kept.
        integers: ``"long"`` writes int64 (and uint64 up to 2**63 - 1) as Avro long, exactly.
            ``"double"`` writes them as double, the only numeric branch nominal-streaming ever
            uses, for an ingester that does not take the long branch; a value beyond +-2**53
            then fails the send (code ``integer_not_exact``) instead of being rounded.

    Raises:
        ValueError: an unknown codec, a URL for another host, an existing file in another format
            or for another dataset, or one whose last block was cut short.
        OSError: the file cannot be created or is locked by another process.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        dataset_rid: str | None = None,
        codec: str = "snappy",
        overwrite: bool = False,
        integers: str = "long",
    ) -> None:
        if codec not in _CODECS:
            raise ValueError(f"codec {codec!r} is not one of {', '.join(_CODECS)}")
        if integers not in _INTEGERS:
            raise ValueError(f"integers={integers!r} is not one of {', '.join(_INTEGERS)}")
        self._integers = integers
        self._path = _path_of(path)
        if not self._path.parent.is_dir():
            raise FileNotFoundError(f"directory {self._path.parent} for {self._path.name} does not exist")
        exists = not overwrite and self._path.exists() and self._path.stat().st_size > 0
        header = b""
        if exists:
            meta, self._sync, valid_end = _scan_existing(self._path)
            codec, dataset_rid = self._check_existing(meta, dataset_rid)
        else:
            self._sync = os.urandom(_SYNC_SIZE)
            header = _header(codec, dataset_rid, self._sync)
        self._codec = codec
        self._dataset_rid = dataset_rid
        flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
        self._fd = os.open(self._path, flags, 0o644)
        try:
            if fcntl is not None:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise OSError(errno.EBUSY, f"Avro file {self._path} is being written by another writer") from None
            if exists:
                # Anything past the last whole block was already refused by _scan_existing.
                self._size = valid_end
            else:
                os.ftruncate(self._fd, 0)
                os.pwrite(self._fd, header, 0)
                os.fsync(self._fd)
                self._size = len(header)
                self._fsync_dir()
        except BaseException:
            os.close(self._fd)
            raise
        self._cond = threading.Condition()
        self._inflight = 0
        self._closed = False
        self._broken: str | None = None
        self._points = 0
        self._requests = 0

    def _check_existing(self, meta: dict[str, bytes], dataset_rid: str | None) -> tuple[str, str | None]:
        import fastavro.schema

        try:
            theirs = json.loads(meta.get("avro.schema", b"null"))
            same = fastavro.schema.to_parsing_canonical_form(theirs) == (
                fastavro.schema.to_parsing_canonical_form(AVRO_STREAM_SCHEMA)
            )
        except Exception:
            same = False
        if not same:
            raise ValueError(f"{self._path} exists with a schema other than io.nominal.ingest.AvroStream")
        codec = meta.get("avro.codec", b"null").decode()
        if codec not in _CODECS:
            raise ValueError(f"{self._path} exists with codec {codec!r}, which this target cannot append")
        file_rid = meta[DATASET_RID_METADATA_KEY].decode() if DATASET_RID_METADATA_KEY in meta else None
        if dataset_rid is not None and file_rid != dataset_rid:
            found = "no dataset rid" if file_rid is None else f"dataset rid {file_rid!r}"
            raise ValueError(
                f"{self._path} exists with {found}, not {dataset_rid!r}; use overwrite=True or another path"
            )
        return codec, file_rid

    def _fsync_dir(self) -> None:
        # A new file's directory entry must be durable too, or a crash can lose the whole file.
        with contextlib.suppress(OSError):
            dfd = os.open(self._path.parent, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)

    @property
    def path(self) -> Path:
        """The file written."""
        return self._path

    @property
    def dataset_rid(self) -> str | None:
        """The rid in the file's metadata, if any."""
        return self._dataset_rid

    @property
    def codec(self) -> str:
        return self._codec

    @property
    def points_written(self) -> int:
        """Points in blocks this target wrote and fsynced (not counting an appended file's past)."""
        with self._cond:
            return self._points

    @property
    def requests_written(self) -> int:
        with self._cond:
            return self._requests

    def __repr__(self) -> str:
        rid, codec = self._dataset_rid, self._codec
        return f"AvroFileTarget({str(self._path)!r}, dataset_rid={rid!r}, codec={codec!r})"

    def _block_parts(self, batches: Iterable[SeriesBatch]) -> tuple[list[Any], int]:
        """The block as buffers to write in order; they live in this thread's scratch buffers."""
        return block_parts(batches, self._integers, self._codec, self._sync)

    def send(self, request: Request, timeout: float | None = None) -> None:
        """Append the request as one block and fsync it.

        Raises:
            TargetError: permanent for a closed or damaged target, another dataset's request or
                a value Avro cannot hold; retryable for a full disk and a timeout waiting for
                other writers.
        """
        if self._dataset_rid is not None and request.dataset_rid != self._dataset_rid:
            raise TargetError(
                f"request for dataset {request.dataset_rid!r} sent to Avro file {self._path} of dataset "
                f"{self._dataset_rid!r}",
                retryable=False,
                code="dataset_mismatch",
            )
        self._check_open()
        block, points = self._block_parts(request.batches)
        if not block:
            return
        if not self._cond.acquire(timeout=-1 if timeout is None else max(timeout, 0.0)):
            raise TargetError(
                f"timed out after {timeout}s waiting to append to {self._path}",
                retryable=True,
                code="timeout",
            )
        try:
            self._check_open()
            # The lock guards the file's tail: a block must land contiguously and a failed one must
            # be cut off before anyone appends after it. It is held for one write into the page
            # cache; the fsync, the slow part, happens outside it.
            start = self._size
            self._append(block)
            end = self._size
            self._inflight += 1
        finally:
            self._cond.release()
        try:
            self._sync_or_break()
            _drop_cached(self._fd, start, end)
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()
        with self._cond:
            self._points += points
            self._requests += 1

    def _check_open(self) -> None:
        if self._closed:
            raise TargetError(f"Avro file target {self._path} is closed", retryable=False, code="closed")
        if self._broken is not None:
            raise TargetError(
                f"Avro file target {self._path} stopped after an earlier failure: {self._broken}",
                retryable=False,
                code="broken",
            )

    def _append(self, block: list[Any]) -> None:
        start = self._size
        total = sum(len(p) for p in block)
        views = [memoryview(p).cast("B") for p in block]
        try:
            at = start
            while views:
                # One system call for the whole block; a short write resumes where it stopped.
                written = _pwritev(self._fd, views, at)
                at += written
                while views and written >= len(views[0]):
                    written -= len(views[0])
                    views.pop(0)
                if views and written:
                    views[0] = views[0][written:]
        except OSError as exc:
            try:
                # Cut the partial block off so the file stays a valid container.
                os.ftruncate(self._fd, start)
            except OSError as cut:
                self._broken = f"could not remove a partly written block ({cut})"
            raise TargetError(
                f"writing {total} bytes to {self._path} failed: {exc}",
                retryable=exc.errno in _RETRYABLE_ERRNOS and self._broken is None,
                code=errno.errorcode.get(exc.errno or 0, "OSError"),
            ) from exc
        self._size = start + total

    def _sync_or_break(self) -> None:
        try:
            os.fsync(self._fd)
        except OSError as exc:
            # After a failed fsync the kernel may have dropped the dirty pages and a later fsync
            # can falsely succeed; retrying would risk both loss and duplicates, so stop here.
            with self._cond:
                self._broken = f"fsync failed ({exc})"
            raise TargetError(
                f"fsync of {self._path} failed: {exc}; data written since the last good send may be lost",
                retryable=False,
                code="fsync_failed",
            ) from exc

    def close(self) -> None:
        """Wait for sends in progress, then close the file. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.wait_for(lambda: self._inflight == 0)
            fd, self._fd = self._fd, -1
        os.close(fd)

    def __enter__(self) -> AvroFileTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


class AvroSeries(NamedTuple):
    """All points of one series in an Avro stream file, in file order."""

    timestamps: npt.NDArray[np.int64]
    #: float, int, str, list[float] (DoubleArray), list[str] (StringArray), or the JSON text of a
    #: struct wrapped as :class:`JsonText`.
    values: list[Any]


class JsonText(str):
    """A struct value read back: its JSON text, distinct from a plain string value."""

    __slots__ = ()


def _unwrap(value: Any) -> Any:
    if isinstance(value, tuple):
        name, rec = value
        if name.endswith("JsonStruct"):
            return JsonText(rec["json"])
        return rec["items"]
    return value


def read_avro_file(path: str | os.PathLike[str]) -> dict[SeriesKey, AvroSeries]:
    """Read an ``io.nominal.ingest.AvroStream`` file (ours or nominal-streaming's) by series.

    Records of the same channel and tags are concatenated in file order. Union values come back
    as their Python form: double -> float, long -> int, string -> str, DoubleArray -> list of
    float, StringArray -> list of str, JsonStruct -> :class:`JsonText`.

    Raises:
        ValueError: the file is not an Avro container (fastavro's error, re-raised with the path).
    """
    import fastavro

    p = _path_of(path)
    out: dict[SeriesKey, tuple[list[int], list[Any]]] = {}
    with open(p, "rb") as f:
        try:
            records = list(fastavro.reader(f, return_record_name=True))
        except (ValueError, EOFError, StopIteration) as exc:
            raise ValueError(f"{p} is not a readable Avro file: {exc}") from None
    for rec in records:
        assert isinstance(rec, dict)
        key = SeriesKey.of(rec["channel"], rec["tags"])
        ts, vals = out.setdefault(key, ([], []))
        ts.extend(rec["timestamps"])
        vals.extend(_unwrap(v) for v in rec["values"])
    return {k: AvroSeries(np.array(ts, dtype=np.int64), vals) for k, (ts, vals) in out.items()}

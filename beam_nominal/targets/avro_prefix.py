# mypy: disable-error-code="no-untyped-call"
"""A target that writes ingest-ready Avro stream files under a prefix on any Beam filesystem.

``WriteToNominal(target="gs://bucket/telemetry/", dataset_rid=...)`` (or a local directory ending
in ``/``, or any scheme ``apache_beam.io.filesystems`` knows) writes each bundle's points as files
in nominal-streaming's ``io.nominal.ingest.AvroStream`` format (see :mod:`beam_nominal.targets.avro`:
same schema, snappy by default, the dataset rid in the file metadata, exact integers), which
Nominal's Avro stream ingestion takes as they are.

How a bundle's files come to be, so that no reader ever sees a partial or duplicate file:

* every file is first written under a temporary name, ``<prefix>.beam-nominal-tmp/<uuid>.avro.tmp``
  (a ``*.avro`` glob on the prefix never matches it);
* blocks are appended in the order of the bundle's requests (``Request.seq``), whatever order the
  upload threads finish encoding them in, and a file rolls over once it reaches ``max_file_bytes``:
  the bytes of a bundle's files depend only on its data;
* when the bundle's every request is written (``WriteDoFn.finish_bundle``, through
  :meth:`AvroPrefixTarget.commit_bundle`) each file is closed and renamed to
  ``<prefix>nominal-<digest>.avro``, the digest being the first 128 bits of the BLAKE3 digest of its
  bytes. A bundle that fails is aborted (:meth:`AvroPrefixTarget.abort_bundle`): its temporary
  files are deleted and nothing becomes visible. A bundle retried after it committed (a failure
  downstream in a fused stage) writes the same bytes under the same names, so a retry replaces a
  file by itself rather than adding a duplicate.

A process that dies mid-bundle leaves its temporary files behind, invisible to ``*.avro`` globs;
they can be deleted once no job writes to the prefix.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import uuid
from collections.abc import Iterable
from typing import Any, NamedTuple

import blake3

from beam_nominal.errors import TargetError
from beam_nominal.targets.avro import _CODECS, _INTEGERS, block_parts, header_bytes
from beam_nominal.targets.base import Request

__all__ = ["DEFAULT_MAX_FILE_BYTES", "TEMP_DIR", "AvroPrefixTarget", "WrittenFile", "is_prefix"]

_LOG = logging.getLogger(__name__)

try:
    from zlib_ng.zlib_ng import crc32 as _crc32
except ImportError:  # pragma: no cover - a dependency; zlib gives the same values, slower
    from zlib import crc32 as _crc32

#: A file rolls over once it holds this many bytes (it may exceed it by one block).
DEFAULT_MAX_FILE_BYTES = 256 << 20
#: Requests (and so Avro blocks) this big: large records, few blocks, and still bounded memory.
DEFAULT_REQUEST_BYTES = 16 << 20
#: The directory under the prefix where files are written before they are complete.
TEMP_DIR = ".beam-nominal-tmp/"
_SYNC_SIZE = 16


class WrittenFile(NamedTuple):
    """One complete file a bundle made visible: what ``WriteToNominal(...).files`` holds."""

    path: str
    dataset_rid: str
    series: int
    points: int
    bytes: int
    #: Earliest and latest timestamp in the file, int64 ns.
    min_timestamp: int
    max_timestamp: int


def is_prefix(target: object) -> bool:
    """Whether ``target`` names a prefix (a string ending in ``/`` that is not an HTTP URL)."""
    if not isinstance(target, str) or not target.endswith("/"):
        return False
    return target.split("://", 1)[0].lower() not in ("http", "https", "grpc", "grpcs")


class _OpenFile:
    """A file being written under its temporary name."""

    def __init__(self, temp_path: str, handle: Any, sync: bytes) -> None:
        self.temp_path = temp_path
        self.handle = handle
        self.sync = sync
        # BLAKE3, as the HTTP idempotency keys: it digests a file faster than sha256 or blake2b.
        self.digest = blake3.blake3()
        self.size = 0
        self.points = 0
        self.series: set[Any] = set()
        self.min_ts: int | None = None
        self.max_ts: int | None = None

    def write(self, parts: Iterable[Any]) -> None:
        for part in parts:
            self.handle.write(part)
            self.digest.update(part)
            self.size += len(part)

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is None:
            return
        handle.flush()
        # A local file's bytes must be durable before its name is (a rename after a crash must
        # never expose a hole); other filesystems complete the object on close.
        fileno = getattr(handle, "fileno", None)
        if callable(fileno):
            # io.UnsupportedOperation is an OSError and a ValueError: objects with no descriptor.
            with contextlib.suppress(OSError, ValueError):
                os.fsync(fileno())
        handle.close()


class AvroPrefixTarget:
    """Writes each bundle's requests to new Avro stream files under ``prefix``.

    Used by one ``WriteDoFn`` instance (one bundle at a time); ``send`` is safe from several
    upload threads at once. Outside a Beam bundle (no :meth:`begin_bundle`), ``close`` commits.

    Args:
        prefix: a directory-like prefix ending in ``/`` on any filesystem Beam knows
            (``/data/out/``, ``file:///data/out/``, ``gs://bucket/out/``, ``s3://...``).
        dataset_rid: recorded in every file's metadata; requests for another dataset are refused.
        codec: ``"snappy"`` (default), ``"deflate"`` or ``"null"``.
        max_file_bytes: roll over to a new file once a file holds this many bytes.
        integers: ``"long"`` (exact, default) or ``"double"`` (as nominal-streaming; see
            :class:`~beam_nominal.targets.avro.AvroFileTarget`).
        request_bytes: the request (and Avro block) size the stream should cut.

    Raises:
        ValueError: a prefix without the trailing ``/``, an unknown codec or integers mode.
    """

    def __init__(
        self,
        prefix: str,
        *,
        dataset_rid: str,
        codec: str = "snappy",
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        integers: str = "long",
        request_bytes: int = DEFAULT_REQUEST_BYTES,
    ) -> None:
        if not is_prefix(prefix):
            raise ValueError(f"an Avro prefix target must end in '/', got {prefix!r}")
        if codec not in _CODECS:
            raise ValueError(f"codec {codec!r} is not one of {', '.join(_CODECS)}")
        if integers not in _INTEGERS:
            raise ValueError(f"integers={integers!r} is not one of {', '.join(_INTEGERS)}")
        if max_file_bytes < 1:
            raise ValueError(f"max_file_bytes must be >= 1, got {max_file_bytes!r}")
        # Beam's FileSystems knows no file:// scheme: a local path is a plain path there.
        self._prefix = prefix[len("file://") :] if prefix.lower().startswith("file://") else prefix
        self._dataset_rid = dataset_rid
        self._codec = codec
        self._integers = integers
        self._max_file_bytes = max_file_bytes
        # A block never spans files: a small size limit makes small requests too.
        self.preferred_request_bytes = max(1024, min(request_bytes, max_file_bytes))
        self._cond = threading.Condition()
        self._next_seq = 0
        self._inflight = 0
        self._current: _OpenFile | None = None
        self._done: list[_OpenFile] = []
        self._failed: str | None = None
        self._closed = False
        self._in_bundle = False

    def __repr__(self) -> str:
        return f"AvroPrefixTarget({self._prefix!r}, dataset_rid={self._dataset_rid!r}, codec={self._codec!r})"

    # -- bundle life cycle (called by WriteDoFn) ----------------------------------------------

    def begin_bundle(self) -> None:
        """A new bundle: its requests are numbered from 0 again."""
        with self._cond:
            self._discard_locked()
            self._next_seq = 0
            self._failed = None
            self._in_bundle = True

    def commit_bundle(self) -> list[WrittenFile]:
        """Close the bundle's files and make them visible; returns what was written.

        Raises:
            TargetError: the bundle had a failed write, or a rename failed (the runner retries
                the bundle; files already renamed are rewritten under the same names).
        """
        from apache_beam.io.filesystems import FileSystems

        with self._cond:
            if self._failed is not None:
                raise TargetError(f"bundle not committed: {self._failed}", retryable=False, code="broken")
            files = self._done
            if self._current is not None:
                files.append(self._current)
            self._done, self._current = [], None
            self._next_seq = 0
            self._in_bundle = False
        out: list[WrittenFile] = []
        try:
            for f in files:
                f.close()
            finals = [f"{self._prefix}nominal-{f.digest.hexdigest()[:32]}.avro" for f in files]
            if files:
                FileSystems.rename([f.temp_path for f in files], finals)
        except BaseException:
            self._delete(files)
            raise
        for f, final in zip(files, finals, strict=True):
            assert f.min_ts is not None and f.max_ts is not None
            out.append(WrittenFile(final, self._dataset_rid, len(f.series), f.points, f.size, f.min_ts, f.max_ts))
        return out

    def abort_bundle(self, timeout: float = 60.0) -> None:
        """Drop the bundle: wake its waiting sends, delete its temporary files. Never raises."""
        with self._cond:
            self._failed = self._failed or "the bundle was aborted"
            self._cond.notify_all()
            # A send still encoding must not write into the next bundle's file.
            if not self._cond.wait_for(lambda: self._inflight == 0, timeout=timeout):
                _LOG.warning("AvroPrefixTarget: %d sends still running after %ss", self._inflight, timeout)
            files = self._take_files_locked()
            self._in_bundle = False
        self._delete(files)

    # -- Target --------------------------------------------------------------------------------

    def send(self, request: Request, timeout: float | None = None) -> None:
        """Append the request as one block of the bundle's current file, in ``seq`` order.

        Raises:
            TargetError: permanent for another dataset's request, a value Avro cannot hold, a
                failed write (the file is then unusable, so the bundle fails and is retried) or
                a closed target; retryable for a timeout waiting for earlier requests.
        """
        if request.dataset_rid != self._dataset_rid:
            raise TargetError(
                f"request for dataset {request.dataset_rid!r} sent to the Avro prefix {self._prefix} of "
                f"dataset {self._dataset_rid!r}",
                retryable=False,
                code="dataset_mismatch",
            )
        with self._cond:
            self._check_usable()
            self._inflight += 1
        try:
            self._send(request, timeout)
        finally:
            with self._cond:
                self._inflight -= 1
                self._cond.notify_all()

    def _send(self, request: Request, timeout: float | None) -> None:
        batches = list(request.batches)
        # Index into request.batches of each of ``batches``, and the ones Avro cannot hold.
        index = list(range(len(batches)))
        refused: dict[int, str] = {}
        while True:
            try:
                parts, points = block_parts(batches, self._integers, self._codec, b"\x00" * _SYNC_SIZE)
                break
            except TargetError as exc:
                # A value Avro cannot hold (a uint64 above 2**63 - 1) costs its series, as a
                # server's refusal of a series does, not the bundle: retrying cannot help, and
                # failing the bundle would fail the job for one element.
                where = getattr(exc.__context__, "index", None)
                if not isinstance(where, int) or not 0 <= where < len(batches):
                    with self._cond:
                        self._failed = f"request {request.seq}: {exc}"
                        self._cond.notify_all()
                    raise
                refused[index.pop(where)] = str(exc)
                del batches[where]
        with self._cond:
            ready = self._cond.wait_for(
                lambda: self._next_seq >= request.seq or self._failed is not None or self._closed, timeout
            )
            self._check_usable()
            if not ready:
                raise TargetError(
                    f"timed out after {timeout}s waiting for the bundle's earlier requests (next is "
                    f"{self._next_seq}, this is {request.seq})",
                    retryable=True,
                    code="timeout",
                )
            if self._next_seq != request.seq:
                # A retry of a request that was already written (its first attempt timed out in
                # the uploader after writing): it is in the file once already.
                return
            try:
                if parts:
                    self._write_locked(batches, parts, points)
            except Exception as exc:
                self._failed = f"writing request {request.seq} under {self._prefix} failed: {exc}"
                self._cond.notify_all()
                raise TargetError(self._failed, retryable=False, code="write_failed") from exc
            self._next_seq += 1
            self._cond.notify_all()
        if refused:
            # The rest is written: the uploader's re-send of it finds its seq done (above).
            raise TargetError("; ".join(refused.values()), retryable=False, code="not_representable", rejected=refused)

    def _write_locked(self, batches: list[Any], parts: list[Any], points: int) -> None:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        f = self._current
        if f is None:
            # The sync marker comes from the first block's bytes: a file's bytes are a function
            # of its data, so a retried bundle makes the same files under the same names.
            # (A marker only has to be unlikely inside the data: a CRC of the block is enough
            # for its seed, and costs less than hashing the block twice.)
            crc = 0
            for p in parts[1:-1]:
                crc = _crc32(p, crc)
            seed = hashlib.sha256(self._dataset_rid.encode() + b"\0" + bytes(parts[0]) + crc.to_bytes(4, "big"))
            temp = f"{self._prefix}{TEMP_DIR}{uuid.uuid4().hex}.avro.tmp"
            handle = FileSystems.create(temp, compression_type=CompressionTypes.UNCOMPRESSED)
            f = self._current = _OpenFile(temp, handle, seed.digest()[:_SYNC_SIZE])
            f.write([header_bytes(self._codec, self._dataset_rid, f.sync)])
        parts[-1] = f.sync
        f.write(parts)
        f.points += points
        for b in batches:
            if len(b.timestamps):
                f.series.add(b.key)
                lo, hi = int(b.timestamps.min()), int(b.timestamps.max())
                f.min_ts = lo if f.min_ts is None else min(f.min_ts, lo)
                f.max_ts = hi if f.max_ts is None else max(f.max_ts, hi)
        if f.size >= self._max_file_bytes:
            self._done.append(f)
            self._current = None  # the next block opens a new file; this one is closed at commit

    def _check_usable(self) -> None:
        if self._closed:
            raise TargetError(f"Avro prefix target {self._prefix} is closed", retryable=False, code="closed")
        if self._failed is not None:
            raise TargetError(f"bundle failed: {self._failed}", retryable=False, code="broken")

    def _take_files_locked(self) -> list[_OpenFile]:
        files = self._done + ([self._current] if self._current is not None else [])
        self._done, self._current = [], None
        return files

    def _discard_locked(self) -> None:
        files = self._take_files_locked()
        if files:
            self._delete(files)

    def _delete(self, files: list[_OpenFile]) -> None:
        from apache_beam.io.filesystems import FileSystems

        for f in files:
            with contextlib.suppress(Exception):
                if f.handle is not None:
                    f.handle.close()
                    f.handle = None
            try:
                FileSystems.delete([f.temp_path])
            except Exception:
                # Never visible (a temporary name): a leftover costs space, not correctness.
                _LOG.debug("AvroPrefixTarget: could not delete %s", f.temp_path, exc_info=True)

    def close(self) -> None:
        """Outside a bundle, commit what was sent (a stream used directly); else drop it."""
        with self._cond:
            if self._closed:
                return
            in_bundle = self._in_bundle
        if not in_bundle and (self._current is not None or self._done):
            self.commit_bundle()
        elif in_bundle:
            self.abort_bundle(timeout=5.0)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

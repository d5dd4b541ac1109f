"""Turn the ``target`` argument users give (a URL, a path or a target object) into a target."""

from __future__ import annotations

import os
from typing import Any

from beam_nominal.targets.base import Target

__all__ = ["http_options", "target_from_url"]


def http_options(target: object, format: str | None = None, fallback_to_row: object = False) -> dict[str, Any]:
    """The keywords ``format`` / ``fallback_to_row`` make for ``target``, checked where they are given.

    Returns only what differs from the defaults, so a call without them passes nothing on. For an
    ``http(s)://`` target the URL is checked too (see :func:`~beam_nominal.targets.http.check_base_url`).

    Raises:
        ValueError, TypeError: a bad value, a bad HTTP URL, or either option for a target that
            is not ``http(s)://``.
    """
    from beam_nominal.targets.http import check_base_url, check_options

    options: dict[str, Any] = {}
    if format is not None:
        options["format"] = format
    if fallback_to_row is not False:
        options["fallback_to_row"] = fallback_to_row
    check_options(options.get("format", "row"), options.get("fallback_to_row", False))
    if isinstance(target, str) and target.split("://", 1)[0].lower() in ("http", "https"):
        check_base_url(target)
    elif options:
        raise ValueError(f"{', '.join(sorted(options))} applies to http(s):// targets only, not {target!r}")
    return options


def target_from_url(
    url_or_path: str | os.PathLike[str] | Target,
    *,
    dataset_rid: str | None = None,
    token: Any = None,
    **kwargs: Any,
) -> Target:
    """The target a URL or path names.

    - ``https://host[:port][/path]`` and ``http://...``, the base URL Nominal's clients take
      (``https://api.gov.nominal.io/api``): a :class:`beam_nominal.targets.http.HttpTarget` for
      ``dataset_rid``, given ``token`` and ``kwargs`` (``format``, ``fallback_to_row``,
      ``ca_file``).
    - ``grpc://host:port`` and ``grpcs://host[:port]``: a
      :class:`beam_nominal.targets.grpc.GrpcTarget`, given ``token`` and ``kwargs``.
    - a ``file://`` URL, or a path ending in ``.avro``: an
      :class:`~beam_nominal.targets.avro.AvroFileTarget` recording ``dataset_rid``, given
      ``kwargs`` (``codec``, ``overwrite``).
    - a prefix ending in ``/`` (a local directory, ``file:///dir/``, ``gs://bucket/dir/`` or any
      filesystem ``apache_beam.io.filesystems`` knows): an
      :class:`~beam_nominal.targets.avro_prefix.AvroPrefixTarget` writing new Avro stream files
      there for ``dataset_rid``, given ``kwargs`` (``codec``, ``max_file_bytes``, ``integers``).
    - an object with ``send`` and ``close``: returned unchanged.

    Raises:
        ValueError: anything else (the message lists the accepted forms).
    """
    if isinstance(url_or_path, Target) and not isinstance(url_or_path, (str, os.PathLike)):
        return url_or_path
    if not isinstance(url_or_path, (str, os.PathLike)):
        raise ValueError(
            f"target must be a URL, a path or an object with send() and close(), got {type(url_or_path).__name__}"
        )
    text = os.fspath(url_or_path)
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if scheme in ("http", "https"):
        from beam_nominal.targets.http import HttpTarget

        return HttpTarget(text, dataset_rid=dataset_rid, token=token, **kwargs)
    http_options(text, kwargs.pop("format", None), kwargs.pop("fallback_to_row", False))
    if text.endswith("/") and scheme not in ("grpc", "grpcs"):
        from beam_nominal.targets.avro_prefix import AvroPrefixTarget

        if dataset_rid is None:
            raise ValueError(f"an Avro prefix target ({text!r}) needs dataset_rid: every file records it")
        return AvroPrefixTarget(text, dataset_rid=dataset_rid, **kwargs)
    if scheme in ("grpc", "grpcs"):
        # Imported here so Avro-only users never load grpc.
        from beam_nominal.targets.grpc import GrpcTarget

        target: Target = GrpcTarget(text, token=token, **kwargs)
        return target
    if scheme == "file" or (not scheme and text.endswith(".avro")):
        from beam_nominal.targets.avro import AvroFileTarget

        return AvroFileTarget(text, dataset_rid=dataset_rid, **kwargs)
    raise ValueError(
        f"cannot tell what target {text!r} is: use Nominal's base URL https://host/api (or http://), "
        "grpc://host:port, grpcs://host[:port], a path ending in .avro, a file:// URL, a prefix ending in / "
        "(local directory, gs://bucket/dir/ ...) for Avro files, or a target object"
    )

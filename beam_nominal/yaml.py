"""WriteToNominal for Beam YAML pipelines.

Beam YAML finds the transform through a provider: the one this package ships
(``providers.yaml``, next to this module; :data:`PROVIDERS` is its path)::

    pipeline:
      transforms:
        - type: ReadFromCsv
          config: {path: telemetry.csv}
        - type: WriteToNominal
          input: ReadFromCsv
          config:
            target: https://api.example/api
            dataset_rid: ri.datasource...
            token_env: NOMINAL_TOKEN
    providers:
      - include: <the path PROVIDERS names>

or, naming the function itself::

    providers:
      - type: python
        config: {}
        transforms:
          WriteToNominal: beam_nominal.yaml.write_to_nominal

Run with ``python -m apache_beam.yaml.main --yaml_pipeline_file=pipeline.yaml`` (and any
runner's options). The rows Beam YAML hands over are schema'd, read as :mod:`beam_nominal.beam._rows`
says: a timestamp field and one field per channel, or points ``(channel, timestamp, value)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

import apache_beam as beam
from apache_beam.pvalue import PCollection, Row
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_nominal.beam import FailedElement, WriteToNominal
from beam_nominal.beam._tokens import EnvToken, secret_token

__all__ = ["PROVIDERS", "write_to_nominal"]

#: The provider file shipped with the package, for a pipeline's ``providers: [{include: ...}]``.
PROVIDERS = str(Path(__file__).with_name("providers.yaml"))


def _token(token_env: str | None, token_secret: str | None) -> Any:
    if token_env is not None and token_secret is not None:
        raise ValueError("WriteToNominal: give token_env or token_secret, not both")
    try:
        if token_env is not None:
            return EnvToken(token_env)
        if token_secret is not None:
            return secret_token(token_secret)
    except ValueError as exc:
        raise ValueError(f"WriteToNominal: token_{'env' if token_env is not None else 'secret'}: {exc}") from None
    return None


def _error_type(element_type: Any) -> RowTypeConstraint:
    # As Beam YAML's own error rows, the element nullable: a refused series has no one element.
    element: Any = Optional[element_type]  # noqa: UP045 - a runtime type
    return RowTypeConstraint.from_fields([("element", element), ("msg", str), ("stack", str)])


def _error_row(failed: FailedElement) -> Row:
    # A series the target refused for good came from many elements: no one element to show.
    element = None if failed.error == "RejectedSeries" else failed.element
    return Row(element=element, msg=f"{failed.error}: {failed.reason}", stack="")  # type: ignore[no-untyped-call]


def _raise(failed: FailedElement) -> None:
    raise ValueError(
        f"WriteToNominal could not write an element ({failed.error}): {failed.reason}. "
        "To send such elements to an output instead of failing, add error_handling: {output: <name>}"
    )


class _WriteToNominalYaml(beam.PTransform):  # type: ignore[type-arg]
    def __init__(self, write: WriteToNominal, error_output: str | None) -> None:
        super().__init__()
        self._write = write
        self._error_output = error_output

    def default_label(self) -> str:
        return "WriteToNominal"

    def expand(self, pcoll: PCollection[Any]) -> dict[str, PCollection[Any]]:
        result = pcoll | "Write" >> self._write
        if self._error_output is None:
            _ = result.failed | "FailOnError" >> beam.Map(_raise)  # type: ignore[no-untyped-call]
            return {}
        errors: PCollection[Any] = result.failed | "Errors" >> beam.Map(  # type: ignore[no-untyped-call]
            _error_row
        ).with_output_types(_error_type(pcoll.element_type))
        return {self._error_output: errors}


def write_to_nominal(
    *,
    target: str | None = None,
    dataset_rid: str | None = None,
    token_env: str | None = None,
    token_secret: str | None = None,
    token: None = None,
    timestamp_field: str | None = None,
    channel_fields: Sequence[str] | None = None,
    tag_fields: Sequence[str] | None = None,
    channel_prefix: str | None = None,
    tags: Mapping[str, str] | None = None,
    timezone: str | None = None,
    format: str | None = None,
    local_data_dir: str | None = None,
    error_handling: Mapping[str, Any] | None = None,
) -> beam.PTransform:  # type: ignore[type-arg]
    """Writes rows to Nominal (or a Nominal-compatible server, or an Avro file).

    Each row is a point (fields ``channel``, ``timestamp``, ``value`` and optionally ``tags``) or
    a wide row: one timestamp field and one field per channel, each non-null field one point of
    the schema's type (an integer stays int64, a float double, text string). Delivery is
    at-least-once with idempotent retries.

    Args:
      target: Nominal's base URL ``https://host/api``, ``grpc(s)://host:port``, a path ending in
        ``.avro``, or a prefix ending in ``/`` for Avro files. Unset: an embedded local server
        (local runners only), its data in ``local_data_dir``.
      dataset_rid: The Nominal dataset to write to; required with a target.
      token_env: The name of an environment variable holding the API token, read where the
        pipeline runs (each worker). A token is never written in the YAML itself.
      token_secret: A Beam secret string naming where the token is kept, e.g.
        ``type:GcpSecret;version_name:projects/P/secrets/S/versions/1``; read on the workers.
      token: Not accepted: a token in YAML text ends up in files and logs. Use token_env or
        token_secret.
      timestamp_field: The timestamp field of the rows. Default: a field named
        ``timestamp``, else the one field named ``time`` or ``t`` or of a timestamp type.
      channel_fields: The fields that are channels. Default: every field but the timestamp, the
        tag fields and a ``tags`` mapping.
      tag_fields: Fields whose values (text or integers) become tags of the row's points.
      channel_prefix: Put before every channel name, e.g. ``engine.``.
      tags: Tags added to every series (a row's own tags win on a clash).
      timezone: The zone of timestamps given without one (``UTC``, ``Europe/Berlin``,
        ``+02:00``). Default: such a timestamp fails its row.
      format: With an ``http(s)://`` target, ``row`` (default) or ``columnar``.
      local_data_dir: Data directory of the embedded local server (default ``nominal-data``).
      error_handling: ``{output: NAME}`` sends each row that cannot be written (bad timestamp,
        a value its series' type cannot hold ...) to the output ``NAME`` as a Row
        ``(element, msg, stack)``, instead of failing the pipeline.
    """
    if token is not None:
        raise ValueError(
            "WriteToNominal in YAML takes no token: a token in YAML text ends up in files and logs; "
            "give token_env (an environment variable's name) or token_secret (a Beam secret string)"
        )
    error_output = None
    if error_handling is not None:
        from apache_beam.yaml.yaml_utils import SafeLineLoader

        spec = dict(SafeLineLoader.strip_metadata(error_handling))  # type: ignore[no-untyped-call]
        error_output = spec.pop("output", None)
        if not isinstance(error_output, str) or not error_output or spec:
            raise ValueError(
                f"WriteToNominal error_handling must be {{output: <name>}}, got {dict(error_handling)!r:.200}"
            )
    write = WriteToNominal(
        target,
        dataset_rid,
        _token(token_env, token_secret),
        format=format,
        timestamp_field=timestamp_field,
        channel_fields=channel_fields,
        tag_fields=tag_fields or (),
        channel_prefix=channel_prefix or "",
        tags=tags,
        timezone=timezone,
        local_data_dir=local_data_dir,
    )
    return _WriteToNominalYaml(write, error_output)

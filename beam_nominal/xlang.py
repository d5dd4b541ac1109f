"""WriteToNominal for pipelines of Beam's other SDKs (Java), by cross-language expansion.

Beam's Python expansion service constructs it by name for a Java pipeline::

    python -m apache_beam.runners.portability.expansion_service_main --port 8097 \\
        --fully_qualified_name_glob 'beam_nominal.*' \\
        --environment_type=EXTERNAL --environment_config=localhost:50000

and the Java side (``examples/java``'s ``WriteToNominal``) sends
``beam:transforms:python:fully_qualified_named`` with the constructor
``beam_nominal.xlang.WriteToNominal`` and its keyword arguments as a Row. Elements arrive as the
Java pipeline's schema'd Rows, read as WriteToNominal reads any Row: a point
``(channel, timestamp, value)`` or a wide record (a timestamp field and one field per channel).

The failed elements come back as schema'd Rows ``(element, error, reason)`` of strings, which any
SDK decodes (Python's :class:`~beam_nominal.beam.FailedElement` holds the element itself, which
only Python can decode).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.pvalue import PCollection, Row
from apache_beam.typehints.row_type import RowTypeConstraint

from beam_nominal.beam import FailedElement
from beam_nominal.beam import WriteToNominal as _WriteToNominal

__all__ = ["FAILED_ROW", "WriteToNominal"]

#: The schema of the failed output: the element's repr, the exception's class name, the reason.
FAILED_ROW = RowTypeConstraint.from_fields([("element", str), ("error", str), ("reason", str)])


def _failed_row(failed: FailedElement) -> Row:
    return Row(element=repr(failed.element), error=failed.error, reason=failed.reason)  # type: ignore[no-untyped-call]


class WriteToNominal(beam.PTransform):  # type: ignore[type-arg]
    """:class:`beam_nominal.WriteToNominal` whose output is its failed elements as schema'd Rows.

    Takes WriteToNominal's arguments; ``target`` and ``dataset_rid`` are required (the workers of
    a cross-language job cannot reach an embedded server), and no ``token``: it would travel in
    the expansion request and the job's pipeline. The workers read ``NOMINAL_TOKEN`` from their
    environment instead. An Avro prefix target's written files are not returned.

    Raises:
        ValueError: no target or dataset_rid, or a token given; WriteToNominal's own checks.
    """

    def __init__(self, target: str, dataset_rid: str, **kwargs: Any) -> None:
        super().__init__()
        if not target or not dataset_rid:
            raise ValueError(
                f"beam_nominal.xlang.WriteToNominal needs target and dataset_rid, got target={target!r}, "
                f"dataset_rid={dataset_rid!r}"
            )
        if "token" in kwargs:
            raise ValueError(
                "beam_nominal.xlang.WriteToNominal takes no token: it would travel in the expansion request "
                "and the job's pipeline; set NOMINAL_TOKEN in the workers' environment"
            )
        self._write = _WriteToNominal(target, dataset_rid, **kwargs)

    def __repr__(self) -> str:
        return f"xlang.{self._write!r}"

    def expand(self, pcoll: PCollection[Any]) -> PCollection[Any]:
        result = pcoll | "WriteToNominal" >> self._write
        rows: PCollection[Any] = result.failed | "FailedRows" >> beam.Map(  # type: ignore[no-untyped-call]
            _failed_row
        ).with_output_types(FAILED_ROW)
        return rows

"""Apache Beam face of beam_nominal: the :class:`WriteToNominal` sink and its result types."""

from __future__ import annotations

from beam_nominal.beam._elements import FailedElement
from beam_nominal.beam.transform import WriteToNominal, WriteToNominalResult, embedded_server

__all__ = ["FailedElement", "WriteToNominal", "WriteToNominalResult", "embedded_server"]

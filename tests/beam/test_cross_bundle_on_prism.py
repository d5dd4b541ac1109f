"""Cross-bundle batching on PrismRunner: off by default for an unbounded input, refused when asked for.

Prism (Beam 2.77) loses elements of ``GroupIntoBatches.WithShardedKey`` with a buffering timer in
streaming (docs/runners.md, "Prism"), which the sink's cross-bundle batching is built on. The
pipelines are only constructed here (no Prism binary needed); tests/engines runs them.
"""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner
from apache_beam.runners.portability.prism_runner import PrismRunner
from apache_beam.transforms.periodicsequence import PeriodicImpulse

from beam_nominal.beam import WriteToNominal


def _labels(p: beam.Pipeline) -> set[str]:
    return {t.unique_name for t in p.to_runner_api().components.transforms.values()}


def _streaming(runner: beam.runners.PipelineRunner) -> beam.Pipeline:
    return beam.Pipeline(runner=runner, options=PipelineOptions(["--streaming"]))


def test_unbounded_input_on_prism_writes_per_bundle() -> None:
    p = _streaming(PrismRunner())
    _ = p | PeriodicImpulse(fire_interval=1.0) | WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x")
    labels = _labels(p)
    assert "WriteToNominal/Write" in labels and not any("Batch" in label for label in labels), sorted(labels)


def test_unbounded_input_elsewhere_batches_across_bundles() -> None:
    p = _streaming(BundleBasedDirectRunner())
    _ = p | PeriodicImpulse(fire_interval=1.0) | WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x")
    assert "WriteToNominal/Batch" in _labels(p)


def test_cross_bundle_batching_asked_for_on_prism_is_refused() -> None:
    p = _streaming(PrismRunner())
    ticks = p | PeriodicImpulse(fire_interval=1.0)
    with pytest.raises(ValueError, match=r"cross_bundle_batching=True on PrismRunner would lose points"):
        _ = ticks | WriteToNominal("grpc://127.0.0.1:1", dataset_rid="ri.x", cross_bundle_batching=True)

"""Runnable Beam jobs built on WriteToNominal: ``python -m pipelines.NAME --help``."""

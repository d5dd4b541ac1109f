"""Destinations a stream sends requests to. One method each: ``send``; combine by wrapping."""

from beam_nominal.targets._factory import target_from_url

__all__ = ["target_from_url"]

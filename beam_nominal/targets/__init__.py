"""Destinations a stream sends requests to. One method each: ``send``; combine by wrapping."""

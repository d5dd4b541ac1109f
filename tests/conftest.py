"""Makes ``tests/`` importable for the helpers shared by every tier (``_external``)."""

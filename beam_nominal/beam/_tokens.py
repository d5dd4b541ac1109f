"""Where a pipeline's token comes from when it must not travel in the pipeline itself: an
environment variable read on the workers (:class:`EnvToken`) or a Beam secret string naming a
secret manager's entry (``type:GcpSecret;version_name:projects/P/secrets/S/versions/V``). Either
is given to WriteToNominal as ``token=``; its ``get_secret_bytes`` runs in the DoFn's ``setup``
(``_dofn.resolve_token``), so only the name travels."""

from __future__ import annotations

import os
from typing import Any

__all__ = ["EnvToken", "secret_token", "token_from_spec"]


class EnvToken:
    """A token read from an environment variable where the pipeline runs (each worker)."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name or "=" in name:
            raise ValueError(f"an environment variable's name is needed for the token, got {name!r:.80}")
        self.name = name

    def __repr__(self) -> str:
        return f"EnvToken({self.name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnvToken) and other.name == self.name

    def __hash__(self) -> int:
        return hash((EnvToken, self.name))

    def get_secret_bytes(self) -> bytes:
        value = os.environ.get(self.name)
        if not value:
            raise ValueError(
                f"WriteToNominal: the token's environment variable {self.name} is not set (or empty) where the "
                f"pipeline runs; set {self.name} in the workers' environment"
            )
        return value.encode("utf-8")


def secret_token(text: str) -> Any:
    """The Beam ``Secret`` a secret string names (checked here; read only on the workers).

    Raises:
        ValueError: not a Beam secret string, showing it (it names a secret, it is not one).
    """
    # apache_beam.transforms.util: where every Beam this package supports has Secret.
    from apache_beam.transforms.util import Secret

    if not isinstance(text, str):
        raise ValueError(f"a token secret must be a Beam secret string, got {type(text).__name__}")
    try:
        return Secret.parse_secret_option(text)
    except (ValueError, IndexError) as exc:  # Beam 2.72 raises IndexError for a part without a colon
        raise ValueError(
            f"{text!r} is not a Beam secret string ('type:GcpSecret;version_name:projects/P/secrets/S/versions/V'): "
            f"{exc}"
        ) from None


def token_from_spec(spec: str) -> Any:
    """``env:NAME`` (an environment variable read on the workers) or a Beam secret string."""
    if isinstance(spec, str) and spec.startswith("env:"):
        return EnvToken(spec[4:])
    return secret_token(spec)

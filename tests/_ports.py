"""Loopback ports for the tests' own servers and for the ports nobody listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback port that was free a moment ago (a port nobody listens on, or one to start a server on)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port

"""Which local process is on the other end of a connection, and one variable of its environment.

The sweep story runs several simulated instances on one host; the metadata-service double tells them apart by
the process that connects (a leg's train step sets TRIAL, sweep-trial.yml). psutil maps the client's address to
its process (net_connections) and reads that process's environment (Process.environ, /proc/<pid>/environ).
"""

from __future__ import annotations

from collections.abc import Callable

import psutil


def peer_variable(name: str) -> Callable[[tuple[str, int]], str | None]:
    """A function of a client address (host, port) on this machine: the value of `name` in the environment of
    the process that holds that end of the TCP connection, or None (not found, gone, or not readable)."""

    def lookup(address: tuple[str, int]) -> str | None:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.pid and connection.laddr and tuple(connection.laddr)[:2] == tuple(address):
                try:
                    return psutil.Process(connection.pid).environ().get(name)
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    return None
        return None

    return lookup

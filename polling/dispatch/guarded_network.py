"""A network backend that connects only to addresses the SSRF guard has checked.

The HTTP pool asks this backend for every new connection. It resolves the host
itself, checks every answer (scheduling.netguard) and connects to a checked
address, so a DNS answer that flips to an internal address between the check and
the connect (rebinding) cannot reach it. TLS still verifies the URL's host name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import httpcore

from scheduling import netguard


class BlockedConnect(httpcore.ConnectError):
    """The target resolved to an address the guard refuses."""


class GuardedBackend(httpcore.SyncBackend):
    def __init__(self, allowlist: netguard.Allowlist) -> None:
        self.allowlist = allowlist

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            addresses = netguard.resolve_checked(host, port, self.allowlist)
        except netguard.BlockedTarget as error:
            raise BlockedConnect(f"blocked: {error}") from error
        except (OSError, UnicodeError) as error:
            raise httpcore.ConnectError(f"cannot resolve {host}: {error}") from error
        last_error: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (TimeoutError, httpcore.ConnectError, httpcore.ConnectTimeout) as error:
                last_error = error
        assert last_error is not None
        raise last_error

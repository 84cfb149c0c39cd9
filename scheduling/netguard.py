"""SSRF guard for callback URLs: which hosts and addresses a webhook may reach.

Checked twice: when a job is scheduled (the URL's literal host) and when it is
delivered (every address the name resolves to; the sink then connects to the
checked address itself, so a DNS answer that changes in between cannot steer the
connection to an internal host).

Blocked unless allow-listed (SENDLATER_CALLBACK_ALLOWLIST: host names, addresses
or CIDR ranges): loopback, private, link-local, CGNAT, multicast, reserved,
unspecified and every other non-global address, IPv4 addresses embedded in IPv6
(mapped, compatible, NAT64, 6to4), legacy numeric spellings of IPv4 accepted by
inet_aton (``2130706433``, ``0x7f.1``, ``0177.0.0.1``, ``127.1``), and local names
(``localhost``, ``*.localhost``, ``*.local``, ``*.internal``).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_LOCAL_SUFFIXES = (".localhost", ".local", ".internal", ".localdomain", ".home.arpa")
_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


class BlockedTarget(ValueError):
    """The URL or address may not be used as a callback target."""


@dataclass(frozen=True)
class Allowlist:
    """Host names and networks a callback may reach despite the rules."""

    names: frozenset[str]
    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]

    @classmethod
    def parse(cls, entries: Iterable[str]) -> Allowlist:
        names: set[str] = set()
        networks = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.add(entry.rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def allows_name(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.names

    def allows_address(self, address: IPAddress) -> bool:
        return any(address in net for net in self.networks if net.version == address.version)


def literal_address(host: str) -> IPAddress | None:
    """Return the address a host string denotes by itself, or None for a name.

    Accepts the odd IPv4 spellings that C resolvers accept (decimal, hex, octal,
    shortened), because an HTTP client would connect to them as addresses.
    """
    text = host.strip("[]")
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        pass
    if text and all(c in "0123456789abcdefxABCDEFX." for c in text) and text[0].isdigit():
        try:
            return ipaddress.IPv4Address(socket.inet_aton(text))
        except OSError:
            return None
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if int(address) >> 32 == 0 and int(address) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(int(address))
    return None


def address_block_reason(address: IPAddress) -> str | None:
    """Say why ``address`` is not a public unicast address, or None if it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            reason = address_block_reason(embedded)
            return f"embeds {embedded}, which is {reason}" if reason else None
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("CGNAT (shared address space)", address in _CGNAT if address.version == 4 else False),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("not globally routable", not address.is_global),
    )
    for reason, hit in checks:
        if hit:
            return reason
    return None


def check_address(address: IPAddress, allowlist: Allowlist) -> None:
    """Raise BlockedTarget unless ``address`` is public or allow-listed."""
    if allowlist.allows_address(address):
        return
    reason = address_block_reason(address)
    if reason:
        raise BlockedTarget(f"address {address} is {reason}")


def check_url(url: str, allowlist: Allowlist) -> None:
    """Check a callback URL without resolving it (scheduling time)."""
    try:
        parts = urlsplit(url)
    except ValueError as error:  # a bracketed host that is no IPv6 address: [::::], [1.2.3.4]
        raise BlockedTarget(f"the callback URL's host is not valid ({error})") from error
    if parts.scheme not in ("http", "https"):
        raise BlockedTarget("only http and https callback URLs are allowed")
    host = parts.hostname
    if not host:
        raise BlockedTarget("the callback URL has no host")
    try:
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError as error:
        raise BlockedTarget("the callback URL has an invalid port") from error
    if allowlist.allows_name(host):
        return
    address = literal_address(host)
    if address is not None:
        check_address(address, allowlist)
        return
    name = host.lower().rstrip(".")
    if name in _LOCAL_NAMES or name.endswith(_LOCAL_SUFFIXES) or "." not in name:
        raise BlockedTarget(f"host {host!r} is a local name")


def resolve_checked(host: str, port: int, allowlist: Allowlist) -> list[IPAddress]:
    """Resolve ``host`` and return its addresses, all of them checked (delivery time).

    Raises BlockedTarget if any resolved address is blocked (a name that mixes
    public and internal answers is refused whole), OSError if it does not resolve.
    """
    address = literal_address(host)
    if address is not None:
        check_address(address, allowlist)
        return [address]
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        resolved = ipaddress.ip_address(sockaddr[0])
        if not allowlist.allows_name(host):
            check_address(resolved, allowlist)
        if resolved not in addresses:
            addresses.append(resolved)
    return addresses

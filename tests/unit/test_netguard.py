"""SSRF guard: every blocked address form, allow-listing, and resolution checks."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from scheduling import netguard
from scheduling.netguard import Allowlist, BlockedTarget

NONE = Allowlist.parse([])

BLOCKED_URLS = {
    "loopback": "http://127.0.0.1/hook",
    "loopback other": "http://127.8.9.10:8080/hook",
    "decimal": "http://2130706433/hook",
    "hex": "http://0x7f000001/hook",
    "hex short": "http://0x7f.1/hook",
    "octal": "http://0177.0.0.1/hook",
    "short": "http://127.1/hook",
    "private 10": "http://10.1.2.3/",
    "private 172": "http://172.16.0.1/",
    "private 192": "https://192.168.1.1/",
    "link-local": "http://169.254.169.254/latest/meta-data/",
    "cgnat": "http://100.64.0.1/",
    "multicast": "http://224.0.0.1/",
    "reserved": "http://240.0.0.1/",
    "broadcast": "http://255.255.255.255/",
    "unspecified": "http://0.0.0.0/",
    "zero decimal": "http://0/",
    "v6 loopback": "http://[::1]/",
    "v6 unspecified": "http://[::]/",
    "v6 link-local": "http://[fe80::1]/",
    "v6 unique local": "http://[fd00::1]/",
    "v6 multicast": "http://[ff02::1]/",
    "v4-mapped": "http://[::ffff:127.0.0.1]/",
    "v4-mapped hex": "http://[::ffff:7f00:1]/",
    "v4-mapped private": "http://[::ffff:10.0.0.1]/",
    "v4-compatible": "http://[::127.0.0.1]/",
    "nat64": "http://[64:ff9b::a9fe:a9fe]/",
    "6to4 private": "http://[2002:c0a8:0101::1]/",
    "localhost": "http://localhost:8000/",
    "localhost trailing dot": "http://LOCALHOST./",
    "sub.localhost": "http://api.localhost/",
    "mdns": "http://printer.local/",
    "internal": "http://metadata.google.internal/",
    "single label": "http://intranet/",
}


@pytest.mark.parametrize("url", BLOCKED_URLS.values(), ids=BLOCKED_URLS.keys())
def test_blocked_forms(url: str) -> None:
    with pytest.raises(BlockedTarget):
        netguard.check_url(url, NONE)


@pytest.mark.parametrize(
    "url",
    [
        "https://example.com/hook",
        "http://93.184.216.34/x",
        "https://[2606:4700::6810:85e5]/x",
        "https://hooks.example.co.uk:8443/a?b=c",
    ],
)
def test_public_targets_pass(url: str) -> None:
    netguard.check_url(url, NONE)


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/", "file:///etc/passwd", "http:///nohost", "http://example.com:99999/"],
)
def test_bad_urls(url: str) -> None:
    with pytest.raises(BlockedTarget):
        netguard.check_url(url, NONE)


def test_allowlist_by_address_name_and_network() -> None:
    allow = Allowlist.parse(["127.0.0.1", "receiver", "10.0.0.0/8", "[::1]"])
    netguard.check_url("http://127.0.0.1:8100/hook", allow)
    netguard.check_url("http://2130706433/hook", allow)  # same address, odd spelling
    netguard.check_url("http://receiver/hook", allow)
    netguard.check_url("http://10.9.8.7/", allow)
    netguard.check_url("http://[::1]:9000/", allow)
    with pytest.raises(BlockedTarget):
        netguard.check_url("http://127.0.0.2/", allow)
    with pytest.raises(BlockedTarget):
        netguard.check_url("http://192.168.0.1/", allow)


def test_resolution_checks_every_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {
        "public.test": ["93.184.216.34"],
        "rebind.test": ["93.184.216.34", "127.0.0.1"],
        "meta.test": ["169.254.169.254"],
    }

    def fake_getaddrinfo(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in answers[host]]

    monkeypatch.setattr(socket, "getaddrinfo", fake_getaddrinfo)
    assert netguard.resolve_checked("public.test", 443, NONE) == [
        ipaddress.ip_address("93.184.216.34")
    ]
    with pytest.raises(BlockedTarget, match="loopback"):
        netguard.resolve_checked("rebind.test", 443, NONE)
    with pytest.raises(BlockedTarget, match="link-local"):
        netguard.resolve_checked("meta.test", 80, NONE)
    assert netguard.resolve_checked("meta.test", 80, Allowlist.parse(["meta.test"]))
    with pytest.raises(BlockedTarget):
        netguard.resolve_checked("0x7f.1", 80, NONE)

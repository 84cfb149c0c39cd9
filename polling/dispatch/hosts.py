"""A webhook's receiving host: the key its capacity is counted under, and how reads
leave a host's jobs out.

``host_key`` is ``"name:port"`` (the scheme's default port filled in): the per-host
cap, the breaker and the shared budget (``polling.flow.host_shares``) all count by it.
``url_origin`` is the ``scheme://netloc`` a URL starts with, as written, and
``origin_patterns`` turns origins into ``LIKE`` patterns that match exactly the URLs
of those origins (``https://a.example`` never matches ``https://a.example.org/``).
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit


def host_key(url: str) -> tuple[str, str]:
    """``("name:port", "name")`` of a URL (the default port of its scheme filled in)."""
    parts = urlsplit(url)
    name = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        port = 0
    return f"{name}:{port}", name


def url_origin(url: str) -> str:
    """``scheme://netloc`` of ``url`` exactly as written (what its target starts with)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = len(rest)
    for mark in "/?#":
        at = rest.find(mark)
        if at != -1:
            end = min(end, at)
    return f"{scheme}://{rest[:end]}"


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def origin_patterns(origins: Iterable[str]) -> list[str]:
    """``LIKE`` patterns (backslash escapes) matching every URL of ``origins`` and no other:
    the origin followed by ``/``, ``?``, ``#`` or nothing."""
    patterns: list[str] = []
    for origin in sorted(set(origins)):
        escaped = _like_escape(origin)
        patterns += [escaped, escaped + "/%", escaped + "?%", escaped + "#%"]
    return patterns

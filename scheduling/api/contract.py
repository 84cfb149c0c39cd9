"""The API's input rules as regular expressions: the schema states them, the fields enforce them.

One definition for both sides, so that a request the OpenAPI document calls valid is
accepted and one it calls invalid is refused (schemathesis checks both directions).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from datetime import date, timedelta

from django.conf import settings

# Text the database can store: PostgreSQL refuses NUL in text and jsonb.
NO_NUL = "^[^\\u0000]*$"

# A metadata filter of GET /jobs: "key=value", the key as in metadata (1..64, no "=").
METADATA_FILTER = "^[^=\\u0000]{1,64}=[^\\u0000]{0,512}$"

# A list cursor: "<microseconds since the epoch>.<id as 32 hex digits>". Every value of
# this shape decodes, so a client holding one can never get "invalid cursor".
CURSOR = "^[0-9]{1,17}\\.[0-9a-f]{32}$"

# A flow-control key (scheduling.flow.services.key_validate): 1 to 100 characters, no
# "/" (it is a path segment of /api/v1/flow-controls/{key}) and no NUL.
FLOW_CONTROL_KEY = "^[^/\\u0000]{1,100}$"

# The flow-control list's cursor: the last key of the page, its UTF-8 bytes in hex.
# Any value of this shape is a position (bytes that are no UTF-8 still compare).
FLOW_CONTROL_CURSOR = "^(?:[0-9a-f]{2}){1,400}$"

# RFC 3339 date-time with an offset (what docs/api.md asks for), nothing looser.
_HOUR_MINUTE = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
_TIME = f"T{_HOUR_MINUTE}:[0-5][0-9](?:\\.[0-9]{{1,6}})?(?:Z|[+-]{_HOUR_MINUTE})$"
_DAY = "(?:0[1-9]|1[0-9]|2[0-9]|3[01])"
_MONTH = "(?:0[1-9]|1[0-2])"
EARLIEST_YEAR = 1970  # older times are typos (a due time that old would fire at once anyway)
DATETIME = f"^(?:19[7-9][0-9]|[2-9][0-9]{{3}})-{_MONTH}-{_DAY}{_TIME}"


def _alternation(values: list[str]) -> str:
    return "(?:" + "|".join(values) + ")"


def number_range(low: int, high: int, width: int = 0) -> str:
    """A compact regex for the integers ``low..high`` (zero-padded to ``width`` digits).

    Compact matters: schemathesis draws examples from these patterns, and a long
    alternation of single numbers makes that slow.
    """
    if width:
        return _same_length(f"{low:0{width}d}", f"{high:0{width}d}")
    parts = []
    while len(str(low)) < len(str(high)):
        top = 10 ** len(str(low)) - 1
        parts.append(_same_length(str(low), str(top)))
        low = top + 1
    parts.append(_same_length(str(low), str(high)))
    return parts[0] if len(parts) == 1 else _alternation(parts)


def _same_length(low: str, high: str) -> str:
    if low == high:
        return low
    if len(low) == 1:
        return f"[{low}-{high}]"
    rest = len(low) - 1
    if low[0] == high[0]:
        return low[0] + _same_length(low[1:], high[1:])
    if low[1:] == "0" * rest and high[1:] == "9" * rest:
        return f"[{low[0]}-{high[0]}][0-9]{{{rest}}}"
    parts = [low[0] + _same_length(low[1:], "9" * rest)]
    if int(high[0]) - int(low[0]) > 1:
        parts.append(f"[{int(low[0]) + 1}-{int(high[0]) - 1}][0-9]{{{rest}}}")
    parts.append(high[0] + _same_length("0" * rest, high[1:]))
    return _alternation(parts)


def _days_upto(last: int) -> str:
    return number_range(1, last, width=2)


def latest_due_date(today: date) -> date:
    """The last calendar date a due_at may be written with.

    The horizon is SENDLATER_MAX_HORIZON_DAYS from now; a date written with the most
    negative offset (-23:59) is almost two days later in UTC, hence the two days off.
    """
    return today + timedelta(days=settings.SENDLATER_MAX_HORIZON_DAYS - 2)


@functools.cache
def due_at_pattern(today: date) -> str:
    """RFC 3339 date-times from EARLIEST_YEAR to ``latest_due_date(today)`` (inclusive)."""
    last = latest_due_date(today)
    parts = []
    if last.year > EARLIEST_YEAR:
        years = number_range(EARLIEST_YEAR, last.year - 1)
        parts.append(f"{years}-{_MONTH}-{_DAY}")
    if last.month > 1:
        months = number_range(1, last.month - 1, width=2)
        parts.append(f"{last.year}-{months}-{_DAY}")
    parts.append(f"{last.year}-{last.month:02d}-{_days_upto(last.day)}")
    return f"^{_alternation(parts)}{_TIME}"


def _cron_field(low: int, high: int, names: list[str] | None = None) -> str:
    """One cron field: ``*``, values, ascending ranges, steps and lists (what cronsim takes)."""
    # a-b with a <= b: cronsim refuses descending ranges.
    ranges = [f"{a}-{number_range(a, high)}" for a in range(low, high)]
    values = [number_range(low, high)]
    if names:
        ranges += [f"{a}-{_alternation(names[i + 1 :])}" for i, a in enumerate(names[:-1])]
        values += names
    step = f"(?:/{number_range(1, high)})?"
    term = f"(?:\\*{step}|{_alternation(ranges)}{step}|{_alternation(values)})"
    return f"{term}(?:,{term})*"


_DOW = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]


@functools.cache
def cron_pattern() -> str:
    """Five fields (minute hour day-of-month month day-of-week) cronsim accepts.

    A day 30 or 31 needs month ``*``: with a month list it could name a day that no
    listed month has (``0 0 31 4 *``), which cronsim refuses.
    """
    minute_hour = f"{_cron_field(0, 59)} {_cron_field(0, 23)}"
    days = f"(?:{_cron_field(1, 29)} {_cron_field(1, 12, _MONTHS)}|{_cron_field(1, 31)} \\*)"
    return f"^{minute_hour} {days} {_cron_field(0, 7, _DOW)}$"


@functools.cache
def callback_url_pattern(allowlist: tuple[str, ...]) -> str:
    """http(s) URLs to a public DNS name, or to a host on SENDLATER_CALLBACK_ALLOWLIST.

    Labels start with a letter, so no spelling of an IP address matches; names under
    the local suffixes that netguard refuses (``.local``, ``.internal``, ...) do not
    match either, so a URL of this shape always passes the SSRF check at scheduling.
    An allow-listed IPv4 network (``127.0.0.0/8``) admits exactly its addresses in
    dotted decimal; an IPv6 network admits any bracketed IPv6 literal, and the SSRF
    check (scheduling.netguard) keeps only those inside it.
    """
    label = "[A-Za-z][A-Za-z0-9-]{0,62}"
    local = "(?!(?:[^/:]*\\.)?(?:localhost|local|internal|localdomain|home\\.arpa)(?:[:/?#]|$))"
    hosts = [f"{local}(?:{label}\\.)+[A-Za-z]{{2,63}}"]
    hosts += [re.escape(entry) for entry in allowlist if "/" not in entry]
    networks = [ipaddress.ip_network(entry) for entry in allowlist if "/" in entry]
    hosts += [ipv4_network_pattern(net) for net in networks if net.version == 4]
    if any(net.version == 6 for net in networks):
        hosts.append("\\[[0-9A-Fa-f.]*:[0-9A-Fa-f:.]*\\]")
    port = f"(?::{number_range(1, 65535)})?"
    # RFC 3986 characters only (percent signs as %XX), so the URL is a valid "uri".
    rest = "(?:[/?#](?:[A-Za-z0-9._~:/?#@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})*)?"
    return f"^https?://{_alternation(hosts)}{port}{rest}$"


def ipv4_network_pattern(network: ipaddress.IPv4Network) -> str:
    """The dotted-decimal addresses of ``network`` (no leading zeros: ``010`` is octal
    to inet_aton, another address)."""
    octets = network.network_address.packed
    fixed, prefix_bits = divmod(network.prefixlen, 8)  # whole octets, then bits of the next
    parts = [str(octet) for octet in octets[:fixed]]
    if fixed < 4:
        first = octets[fixed]
        parts.append(number_range(first, first + (0xFF >> prefix_bits)))
        parts += [number_range(0, 255)] * (3 - fixed)
    return "\\.".join(parts)

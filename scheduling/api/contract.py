"""The API's input rules as regular expressions: the schema states them, the fields enforce them.

One definition for both sides, so that a request the OpenAPI document calls valid is
accepted and one it calls invalid is refused (schemathesis checks both directions).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable
from datetime import date, timedelta

from django.conf import settings

from scheduling.jobs.requests import MAX_HEADER_NAME_CHARS, REFUSED_HEADER_PREFIX, REFUSED_HEADERS
from scheduling.topics.models import NAME_PATTERN

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

# A topic's name and an endpoint's id (scheduling.topics.services.name_validate).
TOPIC_NAME = NAME_PATTERN

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


def _numbers(values: list[int]) -> str:
    if values == list(range(values[0], values[-1] + 1)):
        return number_range(values[0], values[-1])
    return _alternation([str(value) for value in values])


def _any_case(name: str) -> str:
    """``mon`` in any case (JSON Schema patterns have no case-insensitive flag)."""
    return "".join(f"[{char.upper()}{char.lower()}]" for char in name)


def _cron_term(
    low: int,
    high: int,
    names: list[str] | None = None,
    firsts: Iterable[int] | None = None,
    *,
    star: bool = True,
) -> str:
    """One term of a cron field (what cronsim takes): ``*`` (if ``star``), a value or
    an ascending range, each with an optional step. With ``firsts``, only values and
    ranges that start with one of them: the day-of-month rules below need to know."""
    starts = sorted(firsts) if firsts is not None else list(range(low, high + 1))
    named = {
        value: _any_case(names[value - low])
        for value in starts
        if names and value - low < len(names)
    }
    # a-b with a <= b: cronsim refuses descending ranges.
    ranges = [f"{a}-{number_range(a, high)}" for a in starts if a < high]
    ranges += [
        f"{name}-{_alternation([_any_case(later) for later in names[value - low + 1 :]])}"
        for value, name in named.items()
        if names and value - low < len(names) - 1
    ]
    step = f"(?:/{number_range(1, high)})?"
    options = [f"\\*{step}"] if star else []
    options.append(f"{_alternation([*ranges, _numbers(starts), *named.values()])}{step}")
    return _alternation(options)


def _cron_list(term: str, needed: str | None = None) -> str:
    """A comma-separated list of ``term``; with ``needed``, one of them is a ``needed``."""
    if needed is None:
        return f"{term}(?:,{term})*"
    return f"(?:{term},)*{needed}(?:,{term})*"


_DOW = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_MONTHS_OF_31 = [1, 3, 5, 7, 8, 10, 12]
_MONTHS_OF_30 = [month for month in range(1, 13) if month != 2]


def _months_having(months: list[int]) -> str:
    """A month field that surely includes one of ``months``: a term starting with one
    (a range or a step includes its first value), ``*``, or a range without a step of
    two months or more (any two adjacent months include one of 31 days)."""
    ascending = [f"{a}-{number_range(a + 1, 12)}" for a in range(1, 12)]
    ascending += [
        f"{_any_case(name)}-{_alternation([_any_case(later) for later in _MONTHS[i + 1 :]])}"
        for i, name in enumerate(_MONTHS[:-1])
    ]
    needed = _alternation([_cron_term(1, 12, _MONTHS, months), _alternation(ascending)])
    return _cron_list(_cron_term(1, 12, _MONTHS), needed)


@functools.cache
def cron_pattern() -> str:
    """Five fields (minute hour day-of-month month day-of-week) cronsim accepts, names
    in any case.

    cronsim refuses a day-of-month that no listed month has (``0 0 31 4 *``) when the
    days and weekdays must both match (either field starts with ``*``). So days 30 and
    31 alone take a month list that surely has them; with any day up to 29 in the list,
    or a weekday list not starting with ``*``, any month list goes.
    """
    minute_hour = f"{_cron_list(_cron_term(0, 59))} {_cron_list(_cron_term(0, 23))}"
    day = _cron_term(1, 31)
    day_high = _cron_term(1, 31, firsts=[30, 31], star=False)
    days_any = _cron_list(day)
    days_low = _cron_list(day, _cron_term(1, 31, firsts=range(1, 30)))
    days_high = _cron_list(day_high)
    days_from_30 = _cron_list(day_high, _cron_term(1, 31, firsts=[30], star=False))
    months_any = _cron_list(_cron_term(1, 12, _MONTHS))
    dow = _cron_term(0, 7, _DOW)
    weekdays_any = _cron_list(dow)
    weekdays_listed = f"{_cron_term(0, 7, _DOW, star=False)}(?:,{dow})*"
    day_and_month = _alternation(
        [
            f"{days_low} {months_any}",
            f"{days_high} {_months_having(_MONTHS_OF_31)}",
            f"{days_from_30} {_months_having(_MONTHS_OF_30)}",
        ]
    )
    either = f"{days_any} {months_any} {weekdays_listed}"
    return f"^{minute_hour} {_alternation([either, f'{day_and_month} {weekdays_any}'])}$"


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
    # RFC 3986 characters only (percent signs as %XX), so the URL is a valid "uri": a
    # path and query, then at most one "#" (a fragment holds no other "#").
    char = "(?:[A-Za-z0-9._~:/?@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})"
    rest = f"(?:[/?]{char}*)?(?:#{char}*)?"
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


# --- the delivery contract's headers and content type (scheduling.jobs.requests) ---
# "End of the text" in both Python's and ECMA-262's dialects (``$`` also matches before
# a final newline in Python, and schemathesis draws examples with Python's).
_END = "(?![\\s\\S])"
_TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]"  # noqa: S105 (a character class)


@functools.cache
def header_name_pattern() -> str:
    """An HTTP token of at most 100 characters that names no refused header."""
    refused = [_any_case(name) for name in sorted(REFUSED_HEADERS)]
    refused.append(_any_case(REFUSED_HEADER_PREFIX) + f"{_TOKEN}*")
    return f"^(?!{_alternation(refused)}{_END}){_TOKEN}{{1,{MAX_HEADER_NAME_CHARS}}}{_END}"


# A header value: printable ASCII, spaces and tabs (no CR, LF or other controls).
HEADER_VALUE = f"^[\\t\\u0020-\\u007e]*{_END}"
# A media type: type/subtype, then parameters of printable ASCII.
CONTENT_TYPE = f"^{_TOKEN}+/{_TOKEN}+(?:[ \\t]*;[\\t\\u0020-\\u007e]*)?{_END}"

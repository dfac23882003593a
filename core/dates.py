"""Dates: today's date in a timezone (what every prompt is told), and the publication dates
providers and pages give, as ``YYYY-MM-DD``.

Providers give dates in many shapes (ISO 8601 with or without a time and offset, RFC 2822,
``November 30, 2026``, Brave's ``3 days ago``, unix timestamps). :func:`parse_published` turns
any of them into an ISO date, or None for anything it cannot read or that is implausible
(before 1990, or more than a day in the future); it never raises.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from email.utils import parsedate_to_datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: What gives the current instant (timezone-aware); injected so tests can pin it.
Clock = Callable[[], datetime]
UTC_ZONE = ZoneInfo("UTC")
#: Dates before this are not publication dates of anything a search finds.
EARLIEST = date(1990, 1, 1)
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_MONTH_NUMBERS = (
    {name.lower(): i for i, name in enumerate(MONTHS, 1)}
    | {name[:3].lower(): i for i, name in enumerate(MONTHS, 1)}
    | {"sept": 9}
)

_RELATIVE = re.compile(
    r"^(an?|\d{1,4})\s+(second|minute|hour|day|week|month|year)s?\s+ago$", re.IGNORECASE
)
_UNIT_SECONDS = {
    "second": 1,
    "minute": 60,
    "hour": 3600,
    "day": 86400,
    "week": 7 * 86400,
    "month": 30 * 86400,
    "year": 365 * 86400,
}
# "November 30, 2026", "Nov 30 2026", "30 November 2026", "30 Nov, 2026"
_MONTH_DAY_YEAR = re.compile(r"^([a-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})$", re.I)
_DAY_MONTH_YEAR = re.compile(r"^(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]{3,9})\.?,?\s+(\d{4})$", re.I)
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_ISO_FULL = re.compile(
    r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?$"
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def zone(name: str) -> ZoneInfo:
    """The IANA timezone ``name`` (``Europe/Berlin``, ``UTC``); ValueError when unknown."""
    text = name.strip()
    if not text or text.startswith("/") or ".." in text:
        raise ValueError(f"unknown timezone {name!r}")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(
            f"unknown timezone {name!r}; use an IANA name like Europe/Berlin"
        ) from None


def today_in(tz: ZoneInfo, clock: Clock = utcnow) -> date:
    """The date it is now in ``tz``."""
    return clock().astimezone(tz).date()


def long_date(day: date) -> str:
    """``2 December 2026``."""
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def parse_published(value: object, now: datetime | None = None) -> str | None:
    """A provider's or page's publication date as ``YYYY-MM-DD`` (None: no date, garbage, or
    implausible). ``now`` (UTC by default) dates relative ages and bounds the future."""
    try:
        moment = now or utcnow()
        day = _parse(value, moment)
    except (ValueError, TypeError, OverflowError, OSError):
        return None
    if day is None or day < EARLIEST or day > (moment.astimezone(UTC) + timedelta(days=1)).date():
        return None
    return day.isoformat()


def _parse(value: object, now: datetime) -> date | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return _from_timestamp(float(value))
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())[:100]
    if not text:
        return None
    if re.fullmatch(r"\d{9,13}(?:\.\d+)?", text):
        return _from_timestamp(float(text))
    if _ISO_FULL.match(text):
        return _iso(text)
    relative = _RELATIVE.match(text)
    if relative:
        count = 1 if relative.group(1).lower() in ("a", "an") else int(relative.group(1))
        return (
            now.astimezone(UTC)
            - timedelta(seconds=count * _UNIT_SECONDS[relative.group(2).lower()])
        ).date()
    lowered = text.lower()
    if lowered in ("today", "just now"):
        return now.astimezone(UTC).date()
    if lowered == "yesterday":
        return (now.astimezone(UTC) - timedelta(days=1)).date()
    for pattern, order in ((_MONTH_DAY_YEAR, (0, 1, 2)), (_DAY_MONTH_YEAR, (1, 0, 2))):
        match = pattern.match(text)
        if match:
            parts = match.groups()
            month = _MONTH_NUMBERS.get(parts[order[0]].lower())
            if month is None:
                return None
            return date(int(parts[order[2]]), month, int(parts[order[1]]))
    if "," in text or re.search(r"\d{1,2} [A-Za-z]{3} \d{4}", text):
        return _rfc2822(text)
    return None


def _from_timestamp(seconds: float) -> date:
    if seconds > 1e11:  # milliseconds
        seconds /= 1000
    return datetime.fromtimestamp(seconds, UTC).date()


def _iso(text: str) -> date | None:
    """An ISO date or datetime: its date as written (the publisher's own day)."""
    match = _ISO_DATE.match(text)
    return date(*(int(g) for g in match.groups())) if match else None


def _rfc2822(text: str) -> date | None:
    """``Wed, 02 Dec 2026 10:00:00 GMT`` (and its variants)."""
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return moment.date()

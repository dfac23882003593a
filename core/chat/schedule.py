"""Cron schedules of digests: validation, arithmetic in the schedule's timezone, and words.

Arithmetic is APScheduler 3's ``CronTrigger`` (5-field crontab, in an IANA timezone, DST
handled by the trigger); the words are ``cron-descriptor``'s. Everything takes the current
time as an argument, so callers (and tests) choose the clock.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from cron_descriptor import ExpressionDescriptor, Options

from core.chat.commands import CommandError
from core.words.wording import Language

EXAMPLE = (
    '`/research schedule "open-source LLM inference engines" cron="0 9 * * MON" tz=Asia/Shanghai`'
)
#: Firings looked at to find a schedule's shortest gap.
GAP_SAMPLES = 64


@dataclass(frozen=True)
class Syntax:
    """How refusals name a schedule's parts: in chat (``cron="…"``, ``/research …``) or on
    the command line (``--cron "…"``, ``fathom digest …``)."""

    example: str
    #: How the cron a person gave is quoted back (``{}`` is its ``repr``).
    cron_format: str
    #: What a missing cron should have been, in English and in Chinese.
    cron_needed: str
    cron_needed_zh: str
    #: The command that removes a schedule, and the one that lists them.
    remove: str
    listing: str

    def cron(self, expression: str) -> str:
        return self.cron_format.format(repr(expression))


CHAT_SYNTAX = Syntax(
    example=EXAMPLE,
    cron_format="cron={}",
    cron_needed='cron="<minute hour day month weekday>"',
    cron_needed_zh='cron="<分 时 日 月 周>"',
    remove="`/research unschedule <id>`",
    listing="`/research digests`",
)
CLI_SYNTAX = Syntax(
    example='`fathom digest add "open-source LLM inference engines" --cron "0 9 * * MON" '
    "--tz Asia/Shanghai --channel slack:T0001:C0001`",
    cron_format="--cron {}",
    cron_needed='--cron "<minute hour day month weekday>"',
    cron_needed_zh='--cron "<分 时 日 月 周>"',
    remove="`fathom digest remove <id>`",
    listing="`fathom digest list`",
)


def timezone(name: str | None, syntax: Syntax = CHAT_SYNTAX) -> ZoneInfo:
    """The IANA timezone ``name`` (UTC when not given); :class:`CommandError` otherwise."""
    value = (name or "UTC").strip()
    example = syntax.example
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise CommandError(
            f"Unknown timezone {value!r}: use an IANA name like Asia/Shanghai, Europe/Berlin "
            f"or UTC, e.g. {example}.",
            f"未知的时区 {value!r}：请使用 IANA 时区名，如 Asia/Shanghai、Europe/Berlin 或 UTC，"
            f"例如 {example}。",
        ) from None


def trigger(cron: str | None, tz: ZoneInfo, syntax: Syntax = CHAT_SYNTAX) -> CronTrigger:
    """The 5-field crontab ``cron`` in ``tz``; :class:`CommandError` when it is not one."""
    expression = " ".join((cron or "").split())
    example = syntax.example
    if not expression:
        raise CommandError(
            f"A schedule needs {syntax.cron_needed}, e.g. {example}.",
            f"定时摘要需要 {syntax.cron_needed_zh}，例如 {example}。",
        )
    try:
        return CronTrigger.from_crontab(expression, timezone=tz)
    except ValueError as exc:
        raise CommandError(
            f"{syntax.cron(expression)} is not a valid 5-field cron ({exc}); e.g. {example}.",
            f"{syntax.cron(expression)} 不是有效的 5 段 cron（{exc}）；例如 {example}。",
        ) from None


def _after(fire: datetime) -> datetime:
    """The instant just after ``fire``, computed in UTC: wall-clock arithmetic on a zoned
    datetime drops ``fold`` and would step back an hour at the autumn change."""
    return fire.astimezone(UTC) + timedelta(microseconds=1)


def _upcoming(schedule: CronTrigger, moment: datetime) -> Iterator[datetime]:
    """The firings from ``moment`` on, each local time once: a wall time that repeats when
    the clocks go back fires only the first time."""
    previous: datetime | None = None
    while True:
        fire = schedule.get_next_fire_time(previous, moment)
        if fire is None:
            return
        if previous is None or fire.replace(tzinfo=None) != previous.replace(tzinfo=None):
            yield fire
        previous, moment = fire, _after(fire)


def firings(schedule: CronTrigger, after: datetime, until: datetime) -> list[datetime]:
    """Every firing in ``(after, until]`` (aware datetimes)."""
    return list(itertools.takewhile(lambda f: f <= until, _upcoming(schedule, _after(after))))


def next_firing(schedule: CronTrigger, now: datetime) -> datetime | None:
    return next(_upcoming(schedule, now), None)


def shortest_gap(schedule: CronTrigger, now: datetime) -> timedelta | None:
    """The shortest time between two consecutive firings over the next :data:`GAP_SAMPLES`."""
    fires = list(itertools.islice(_upcoming(schedule, now), GAP_SAMPLES))
    gaps = [b - a for a, b in itertools.pairwise(fires)]
    return min(gaps) if gaps else None


def check_fires(
    schedule: CronTrigger, now: datetime, cron: str, syntax: Syntax = CHAT_SYNTAX
) -> None:
    """Refuse a cron that never fires (``0 9 30 2 *``: no 30 February)."""
    if next_firing(schedule, now) is None:
        raise CommandError(
            f"{syntax.cron(cron)} never fires: no date matches it (e.g. 30 February); "
            f"e.g. {syntax.example}.",
            f"{syntax.cron(cron)} 永远不会触发：没有日期符合（例如 2 月 30 日）；"
            f"例如 {syntax.example}。",
        )


def check_interval(
    schedule: CronTrigger, now: datetime, minimum: float, cron: str, syntax: Syntax = CHAT_SYNTAX
) -> None:
    gap = shortest_gap(schedule, now)
    if gap is not None and gap.total_seconds() < minimum:
        every = _duration(gap.total_seconds())
        least = _duration(minimum)
        example = syntax.example
        raise CommandError(
            f"{syntax.cron(cron)} fires every {every}; digests may fire at most every {least}, "
            f"e.g. {example}.",
            f"{syntax.cron(cron)} 每 {every} 触发一次；定时摘要最多每 {least} 一次，"
            f"例如 {example}。",
        )


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{int(seconds)} s"


def describe(cron: str, language: Language = "en") -> str:
    """The schedule in words (``At 09:00, only on Monday``)."""
    options = Options()
    options.use_24hour_time_format = True
    if language == "zh":
        options.locale_code = "zh_CN"
    try:
        return str(ExpressionDescriptor(cron, options).get_description())
    except Exception:  # the words are a courtesy; the expression itself is valid
        return cron

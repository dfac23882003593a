"""Scheduled digests: schedules kept per channel, and their firings as normal research runs.

A firing of a digest at a slot (a time its cron names, in its timezone) is a run whose dedupe
key is ``digest:<id>:<slot>``: the database lets each slot start at most one run, whoever
fires it and however often. The run starts a new thread in the digest's channel
(``pending-digest-…``: its progress message opens the thread, as a Slack slash command's
does), and the writer is told what the previous digest found (see ``core.research.writer``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from core.chat import schedule
from core.chat.commands import CommandError
from core.chat.grammar import ScheduleCommand
from core.operations.runners import JobRunner
from core.research.requests import ResearchRequest, RunRejected, submit_run
from core.values import SourceChoice, ThreadKey
from core.words.wording import Language, pick, request_language
from storage import (
    DigestLimit,
    DigestRecord,
    DigestStore,
    RunRecord,
    RunStore,
    StorageUnavailable,
)
from storage.tables import utcnow

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
#: The thread of a firing starts with its progress message (see the module).
DIGEST_THREAD_PREFIX = "pending-digest-"
#: Platform-context keys of a firing: its heading (``Digest: <topic> — <date>``) and the
#: date of its slot in the digest's timezone.
DIGEST_TITLE = "digest_title"
DIGEST_DATE = "digest_date"


def slot_stamp(slot: datetime) -> str:
    """A slot as it appears in keys: ``20261207T0100Z`` (UTC, to the minute)."""
    return slot.astimezone(UTC).strftime("%Y%m%dT%H%MZ")


def slot_key(digest_id: str, slot: datetime) -> str:
    """The dedupe key of the run of ``digest_id`` at ``slot``: one run per slot."""
    return f"digest:{digest_id}:{slot_stamp(slot)}"


@dataclass(frozen=True)
class DigestView:
    """A schedule as ``/research digests`` and ``fathom digest list`` show it."""

    digest: DigestRecord
    words: str
    next_run: datetime | None  # in the schedule's timezone


class DigestService:
    """Schedules from chat and the CLI, and their firings."""

    def __init__(
        self,
        digests: DigestStore,
        runs: RunStore,
        *,
        min_interval: float,
        grace: float,
        max_per_channel: int,
        clock: Clock = utcnow,
    ) -> None:
        self.digests = digests
        self._runs = runs
        self._min_interval = min_interval
        self._grace = grace
        self._max_per_channel = max_per_channel
        self.clock = clock

    # -- schedules -----------------------------------------------------------------------------
    async def add(
        self,
        command: ScheduleCommand,
        *,
        thread: ThreadKey,
        created_by: str,
        platform_context: dict[str, str] | None = None,
        syntax: schedule.Syntax = schedule.CHAT_SYNTAX,
    ) -> DigestRecord:
        """Store a schedule for ``thread``'s channel; :class:`CommandError` saying why not
        (worded in ``syntax``: chat's, or the command line's). A channel given by name (the
        command line) is checked first with :func:`check_digest_platform`; in chat it is the
        command's own, which its platform can always post to."""
        tz = schedule.timezone(command.timezone, syntax)
        trigger = schedule.trigger(command.cron, tz, syntax)
        now = self.clock()
        schedule.check_fires(trigger, now, command.cron, syntax)
        schedule.check_interval(trigger, now, self._min_interval, command.cron, syntax)
        try:
            return await self.digests.add(
                platform=thread.platform,
                workspace=thread.workspace,
                channel=thread.channel,
                topic=command.topic,
                depth=command.depth,
                strategy=command.strategy,
                sources=command.sources,
                cron=command.cron,
                timezone=tz.key,
                created_by=created_by,
                platform_context=platform_context,
                max_per_channel=self._max_per_channel,
                created_at=now,
            )
        except DigestLimit as full:
            raise CommandError(
                f"This channel already has {full.limit} schedules, the most allowed; remove "
                f"one with {syntax.remove} first.",
                f"这个频道已有 {full.limit} 个定时摘要，已达上限；请先用 "
                f"{syntax.remove} 删除一个。",
            ) from None

    async def views(self, digests: list[DigestRecord], language: Language) -> list[DigestView]:
        now = self.clock()
        out = []
        for digest in digests:
            tz = schedule.timezone(digest.timezone)
            fire = schedule.next_firing(schedule.trigger(digest.cron, tz), now)
            words = schedule.describe(digest.cron, language)
            out.append(DigestView(digest, words, fire.astimezone(tz) if fire else None))
        return out

    async def remove(
        self,
        digest_id: str,
        *,
        by: str,
        is_admin: bool,
        channel: ThreadKey | None,
        syntax: schedule.Syntax = schedule.CHAT_SYNTAX,
    ) -> DigestRecord:
        """Remove a schedule (its creator or an admin; in chat, only this channel's)."""
        digest = await self.digests.get(digest_id.strip().lower())
        if digest is None or (
            channel is not None
            and (digest.platform, digest.workspace, digest.channel)
            != (channel.platform, channel.workspace, channel.channel)
        ):
            where, where_zh = ("", "") if channel is None else (" in this channel", "这个频道")
            raise CommandError(
                f"There is no schedule `{digest_id}`{where}; see {syntax.listing}.",
                f"{where_zh}没有定时摘要 `{digest_id}`；见 {syntax.listing}。",
            )
        if digest.created_by != by and not is_admin:
            raise CommandError(
                "Only the person who created this schedule (or an admin) can remove it.",
                "只有创建这个定时摘要的人（或管理员）可以删除它。",
            )
        await self.digests.remove(digest.id)
        return digest

    # -- firings -------------------------------------------------------------------------------
    def due_slot(
        self, digest: DigestRecord, now: datetime, *, window: float | None = None
    ) -> datetime | None:
        """The slot to fire now: the digest's latest firing at most ``window`` seconds old
        (default: the grace period), and not before it was created; None when there is none."""
        tz = schedule.timezone(digest.timezone)
        trigger = schedule.trigger(digest.cron, tz)
        back = self._grace if window is None else window
        since = max(now - timedelta(seconds=back), digest.created_at)
        slots = schedule.firings(trigger, since - timedelta(microseconds=1), now)
        return slots[-1] if slots else None

    async def fire(self, digest: DigestRecord, slot: datetime) -> tuple[RunRecord | None, bool]:
        """Start the run of ``digest`` for ``slot`` (once: a second call finds the first
        run). Returns the run (None when the channel is busy) and whether it is new."""
        stamp = slot_stamp(slot)
        thread = ThreadKey(
            platform=digest.platform,
            workspace=digest.workspace,
            channel=digest.channel,
            thread=f"{DIGEST_THREAD_PREFIX}{digest.id}-{stamp}",
        )
        title = digest_title(digest.topic, slot, digest.timezone, request_language(digest.topic))
        request = ResearchRequest(
            topic=digest.topic,
            depth=digest.depth,
            strategy=digest.strategy,
            thread=thread,
            requested_by=digest.created_by,
            dedupe_key=slot_key(digest.id, slot),
            platform_context={
                **(digest.platform_context or {}),
                DIGEST_TITLE: title,
                DIGEST_DATE: local_date(slot, digest.timezone),
            },
            digest_id=digest.id,
            sources=digest_sources(digest),
        )
        try:
            return await submit_run(self._runs, request)
        except RunRejected:  # cannot happen for a fresh thread; logged rather than raised
            log.warning("digest %s: slot %s refused", digest.id, stamp)
            return None, False

    async def fire_due(
        self, runner: JobRunner | None, now: datetime | None = None
    ) -> list[RunRecord]:
        """Fire every enabled digest whose latest slot is due (within the grace period) and
        not fired yet; enqueue the new runs. Returns the runs started now."""
        now = now or self.clock()
        started = []
        for digest in await self.digests.enabled():
            try:
                run = await self.fire_if_due(digest, runner, now)
            except (StorageUnavailable, asyncio.CancelledError):
                raise
            except Exception:  # one bad digest must not stop the others
                log.exception("digest %s: firing failed", digest.id)
                continue
            if run is not None:
                started.append(run)
        return started

    async def fire_if_due(
        self,
        digest: DigestRecord,
        runner: JobRunner | None,
        now: datetime,
        *,
        window: float | None = None,
    ) -> RunRecord | None:
        """Fire the digest's due slot unless it was fired; enqueue and return a new run."""
        slot = self.due_slot(digest, now, window=window)
        if slot is None:
            return None
        run, created = await self.fire(digest, slot)
        if run is None or not created:
            return None
        if runner is not None:
            await runner.enqueue(run.id)
        return run


def check_digest_platform(
    platform: str, chat_platforms: Mapping[str, str], configured: frozenset[str]
) -> None:
    """A digest's channel must be on a chat platform (``chat_platforms``: name -> what people
    call it) this deployment is configured for: any other firing could never be posted."""
    if platform not in chat_platforms:
        names = ", ".join(chat_platforms)
        raise CommandError(
            f"{platform!r} is not a chat platform: a digest is posted in a chat channel "
            f"({names}), e.g. slack:T0001:C0001.",
            f"{platform!r} 不是聊天平台：定时摘要只能发到聊天频道（{names}），"
            "例如 slack:T0001:C0001。",
        )
    if platform not in configured:
        name = chat_platforms[platform]
        raise CommandError(
            f"{name} is not configured, so a digest there could never be posted: set its "
            "credentials first (docs/configuration.md).",
            f"{name} 尚未配置，发到那里的定时摘要永远无法发布：请先设置它的凭据"
            "（docs/configuration.md）。",
        )


def digest_sources(digest: DigestRecord) -> SourceChoice:
    """The sources a digest's firings search (``sources=`` of its schedule; a value this
    code does not know reads as the default, ``all``)."""
    try:
        return SourceChoice(digest.sources)
    except ValueError:
        return SourceChoice.ALL


def heading_of(run: RunRecord) -> str | None:
    """The heading of a digest firing's first message (None for any other run)."""
    title = (run.platform_context or {}).get(DIGEST_TITLE)
    return str(title) if run.digest_id and title else None


def local_date(slot: datetime, timezone: str) -> str:
    return slot.astimezone(schedule.timezone(timezone)).strftime("%Y-%m-%d")


def digest_title(topic: str, slot: datetime, timezone: str, language: Language) -> str:
    """The heading of a firing's first message: ``Digest: <topic> — 2026-12-07``."""
    day = local_date(slot, timezone)
    return pick(language, f"Digest: {topic} — {day}", f"定时摘要：{topic} — {day}")

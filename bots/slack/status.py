"""The thread status of a Slack run (``assistant.threads.setStatus``): "Fathom is searching
“…”" under the thread while the run works.

Slack removes a status about two minutes after it was set when no message follows, so the
status is set again every :data:`REFRESH_SECONDS` while the run works, and cleared (an empty
status) by the run's last event. Whichever replica runs the run shows its status: a replica
that takes a run over sets it from the run's next event, and the one that lost the run stops
refreshing when its delivery is closed.

A workspace or channel that refuses the call for good (the ``chat:write`` scope missing, a
plan without the feature, a channel the status cannot be set in) is remembered for the
process (``bots.slack.refusals``) and logged once; the run goes on with its progress message
alone. Other failures (rate limits, outages) are tried again at the next refresh.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from slack_sdk.web.async_client import AsyncWebClient

from bots.slack.errors import classify_error, describe_error, error_code
from bots.slack.messenger import thread_ts
from bots.slack.refusals import (
    CHANNEL_REFUSALS,
    THREAD_REFUSALS,
    WORKSPACE_REFUSALS,
    SlackRefusals,
)
from core.engine.progress import ProgressEvent, ProgressKind, TaskStatus
from core.timer import MONOTONIC, Timer
from core.untrusted import neutralise, remove_urls
from core.values import ThreadKey
from core.words.wording import Language, pick

log = logging.getLogger(__name__)

#: Seconds between two settings of the same status (Slack drops it after about 120).
REFRESH_SECONDS = 90.0
#: Seconds before a status that failed (not for good) is tried again.
RETRY_SECONDS = 15.0
#: Seconds an ended run's delivery waits, when it is closed, for the status to be cleared.
CLEAR_GRACE = 10.0
#: Slack shows at most this many loading messages.
MAX_LOADING_MESSAGES = 10
_TOPIC_CHARS = 80


@dataclass(frozen=True)
class StatusWords:
    """A status (shown after the app's name) and the loading messages Slack rotates."""

    status: str
    loading: tuple[str, ...] = ()


def _topic(text: str) -> str:
    text = " ".join(remove_urls(neutralise(text)).split())
    return text if len(text) <= _TOPIC_CHARS else text[: _TOPIC_CHARS - 1].rstrip() + "…"


def status_words(event: ProgressEvent, language: Language) -> StatusWords | None:
    """What the thread status says for ``event`` (None: nothing new to say)."""
    kind = event.kind
    if kind is ProgressKind.STARTED or kind is ProgressKind.PLANNING:
        return StatusWords(
            pick(language, "is planning the research…", "正在规划研究…"),
            (
                pick(language, "Reading the question…", "正在理解问题…"),
                pick(language, "Planning the first search…", "正在规划第一次搜索…"),
            ),
        )
    if kind is ProgressKind.READING:
        return StatusWords(pick(language, "is reading the attached files…", "正在阅读附件…"))
    if kind is ProgressKind.SEARCHING:
        if event.topic:
            topic = _topic(event.topic)
            return StatusWords(
                pick(language, f"is searching “{topic}”…", f"正在搜索“{topic}”…"),
                (
                    pick(language, f"Searching “{topic}”…", f"正在搜索“{topic}”…"),
                    pick(language, "Reading the results…", "正在阅读搜索结果…"),
                ),
            )
        running = sum(1 for t in event.tasks if t.status is TaskStatus.IN_PROGRESS)
        if running == 0:
            return StatusWords(pick(language, "is answering the sub-questions…", "正在回答子问题…"))
        return StatusWords(
            pick(
                language,
                f"is searching {running} sub-question{'s' if running != 1 else ''}…",
                f"正在搜索 {running} 个子问题…",
            ),
            (
                pick(language, "Searching the sub-questions…", "正在搜索子问题…"),
                pick(language, "Answering what was found…", "正在回答已找到的内容…"),
            ),
        )
    if kind is ProgressKind.SEARCHED:
        planning = pick(language, "Planning the next step…", "正在规划下一步…")
        if event.pages > 0:
            pages = event.pages
            return StatusWords(
                pick(
                    language,
                    f"is reading {pages} page{'s' if pages != 1 else ''}…",
                    f"正在阅读 {pages} 个网页…",
                ),
                (pick(language, f"Reading {pages} pages…", f"正在阅读 {pages} 个网页…"), planning),
            )
        return StatusWords(pick(language, "is planning the next step…", "正在规划下一步…"))
    if kind is ProgressKind.WRITING:
        return StatusWords(
            pick(language, "is writing the report…", "正在撰写报告…"),
            (
                pick(language, "Writing the report…", "正在撰写报告…"),
                pick(language, "Citing the sources…", "正在标注来源…"),
            ),
        )
    if kind is ProgressKind.CHECKING:
        return StatusWords(
            pick(language, "is checking citations…", "正在核对引用…"),
            (pick(language, "Checking citations…", "正在核对引用…"),),
        )
    return None


class ThreadStatus:
    """``bots.chat.delivery.Activity`` for one Slack run: its thread status.

    The run never waits for Slack here: :meth:`publish` records what the status should say
    and one keeper task sends it, in order (a status overtaken by a newer one before it was
    sent is skipped, as progress edits are coalesced), sets it again when it is due, and
    clears it once the run ended. A run whose Slack is slow or down loses its status, not time.
    """

    def __init__(
        self,
        client: AsyncWebClient,
        team: str,
        thread: Callable[[], ThreadKey],
        refusals: SlackRefusals,
        *,
        language: Language = "en",
        timer: Timer | None = None,
        refresh: float = REFRESH_SECONDS,
    ) -> None:
        if refresh <= 0:
            raise ValueError("the status refresh must be a positive number of seconds")
        self._client = client
        self._team = team
        self._thread = thread
        self._refusals = refusals
        self._language = language
        self._timer = timer or MONOTONIC
        self._refresh = refresh
        self._wanted: StatusWords | None = None  # what the thread should show
        self._shown: StatusWords | None = None  # what Slack accepted last
        self._ever_sent = False  # a status was asked for (Slack may show it, answer or not)
        self._due = 0.0  # when the shown status is set again
        self._retry_at = 0.0  # no try before this (after a failure)
        self._wake = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._ending = False  # the run ended: clear the status, then stop
        self._closed = False  # stop now

    async def publish(self, event: ProgressEvent) -> None:
        if self._closed or self._ending or self._refused():
            return
        if event.final:
            self._ending = True
        else:
            words = status_words(event, self._language)
            if words is None:
                return
            self._wanted = words
        self._wake.set()
        if self._keeper is None or self._keeper.done():
            self._keeper = asyncio.create_task(self._keep())

    def _refused(self) -> bool:
        return self._refusals.status_refused(self._team, self._thread().channel)

    async def _keep(self) -> None:
        try:
            await self._keep_status()
        except Exception:  # the status is a bonus: its keeper never fails anything else
            log.exception("slack: the thread status keeper stopped")

    async def _keep_status(self) -> None:
        """Send the wanted status when it changed or is due, until the run ends here."""
        while not self._closed and not self._refused():
            if self._ending:
                # Cleared when this delivery asked for one, and when it saw the run's end only
                # (a takeover of a finished run: another replica may have shown one).
                if self._ever_sent or self._wanted is None:
                    await self._send(StatusWords(""))
                return
            wanted = self._wanted
            if wanted is None:
                return
            now = self._timer.now()
            at = max(self._retry_at, now) if wanted != self._shown else self._due
            if at <= now:
                await self._send(wanted)
                continue
            await self._pause(at - now)

    async def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less when :meth:`publish` has something new."""
        self._wake.clear()
        sleeping = asyncio.ensure_future(self._timer.sleep(seconds))
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({sleeping, woken}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleeping, woken):
                waiter.cancel()
            await asyncio.gather(sleeping, woken, return_exceptions=True)
        if sleeping.done() and not sleeping.cancelled() and sleeping.exception() is not None:
            raise RuntimeError("the status timer failed") from sleeping.exception()

    async def _send(self, words: StatusWords) -> None:
        """Set the status now; a failure is tried again after :data:`RETRY_SECONDS` (or what
        Slack asked), a refusal for good is remembered."""
        key = self._thread()
        ts = thread_ts(key)
        now = self._timer.now()
        if ts is None:  # (a slash command's thread before its opener: nothing to set yet)
            self._retry_at = self._due = now + RETRY_SECONDS
            return
        self._ever_sent = self._ever_sent or bool(words.status)
        try:
            await self._client.assistant_threads_setStatus(
                channel_id=key.channel,
                thread_ts=ts,
                status=words.status,
                loading_messages=list(words.loading[:MAX_LOADING_MESSAGES]) or None,
            )
        except Exception as exc:
            failure, code = classify_error(exc), error_code(exc) or ""
            if code in THREAD_REFUSALS:
                log.info("slack: no thread status in %s %s (%s)", key.channel, ts, code)
                self._closed = True  # this thread only
            elif not failure.retryable or code in WORKSPACE_REFUSALS or code in CHANNEL_REFUSALS:
                self._refusals.refuse_status(self._team, key.channel, code)
            else:
                log.info("slack: thread status not set (%s); tried again", describe_error(exc))
            self._retry_at = self._due = now + max(failure.retry_after, RETRY_SECONDS)
            return
        self._shown = words
        self._due = self._timer.now() + self._refresh
        self._retry_at = 0.0

    async def aclose(self) -> None:
        """Stop. An ended run's keeper is given :data:`CLEAR_GRACE` seconds to clear the
        status; otherwise (a takeover, a shutdown) it stops at once."""
        keeper = self._keeper
        try:
            if keeper is not None and not keeper.done() and self._ending:
                await asyncio.wait({keeper}, timeout=CLEAR_GRACE)
        finally:  # (also when the caller is cancelled meanwhile: the keeper stops)
            self._closed = True
            self._wake.set()
            if keeper is not None and not keeper.done():
                keeper.cancel()
                await asyncio.wait({keeper})

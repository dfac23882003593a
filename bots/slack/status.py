"""The thread status of a Slack run: its agent session (``agents.sessions.setStatus``,
``bots.slack.sessions``: ``processing`` with the topic as title and Slack's Stop button while
the run works, ``active`` once it ended) and its words (``assistant.threads.setStatus``:
"Fathom is searching “…”" under the thread).

Slack removes a status about two minutes after it was set when no message follows, so the
status is set again every :data:`REFRESH_SECONDS` while the run works, and cleared (an empty
status) by the run's last event. Whichever replica runs the run shows its status: a replica
that takes a run over sets it from the run's next event, and the one that lost the run stops
refreshing when its delivery is closed.

A workspace or channel that refuses the words for good (the ``chat:write`` scope missing, a
plan without the feature, a channel the status cannot be set in) is remembered for the
process (``bots.slack.refusals``) and logged once; the run goes on with its progress message
alone. A workspace that refuses sessions (an app not declared as an agent, an older Slack, a
token of another type) is remembered the same way and keeps the assistant status alone, as
before agent sessions. Other failures (rate limits, outages) are tried again later.

Slack documents no free-text status for sessions (``status`` is one of four states), and
``assistant.threads.setStatus`` takes ``chat:write`` in any thread since March 2026, so the
words keep going through it beside the session; the plan stays in the progress message's
plan blocks (``bots.slack.render``), which sessions do not replace.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from bots.slack import sessions
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
class SessionStart:
    """What a run's agent session is created with: its title (the topic) and who asked (a
    Slack user id; None for a digest)."""

    title: str
    initiator: str | None = None


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
    """``bots.chat.delivery.Activity`` for one Slack run: its agent session and its words.

    The run never waits for Slack here: :meth:`publish` records what the status should say
    and one keeper task sends it, in order (a status overtaken by a newer one before it was
    sent is skipped, as progress edits are coalesced), sets the words again when they are
    due, and ends the session and clears the words once the run ended. A run whose Slack is
    slow or down loses its status, not time. ``session``: None asks for no session (the
    assistant status alone).
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
        session: SessionStart | None = None,
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
        self._session = session
        self._initiator = session.initiator if session else None
        self._wanted: StatusWords | None = None  # what the thread should show
        self._shown: StatusWords | None = None  # what Slack accepted last
        self._ever_sent = False  # a status was asked for (Slack may show it, answer or not)
        self._due = 0.0  # when the shown status is set again
        self._retry_at = 0.0  # no try before this (after a failure)
        self._words_off = False  # this thread refused the words
        self._session_open = False  # this delivery set the session to processing
        self._session_asked = False  # it asked for processing (Slack may have it, answer or not)
        self._session_off = False  # this thread refused the session
        self._session_retry_at = 0.0
        self._wake = asyncio.Event()
        self._keeper: asyncio.Task[None] | None = None
        self._ending = False  # the run ended: end the session, clear the words, then stop
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

    def _words_refused(self) -> bool:
        return self._words_off or self._refusals.status_refused(self._team, self._thread().channel)

    def _sessions_refused(self) -> bool:
        return (
            self._session is None
            or self._session_off
            or self._refusals.sessions_refused(self._team, self._thread().channel)
        )

    def _refused(self) -> bool:
        """Nothing is left to show or to end here."""
        return self._words_refused() and self._sessions_refused()

    async def _keep(self) -> None:
        try:
            await self._keep_status()
        except Exception:  # the status is a bonus: its keeper never fails anything else
            log.exception("slack: the thread status keeper stopped")

    async def _keep_status(self) -> None:
        """Open the session, send the wanted words when they changed or are due, until the
        run ends here; then end what this delivery showed."""
        while not self._closed and not self._refused():
            if self._ending:
                await self._end()
                return
            wanted = self._wanted
            if wanted is None:
                return
            now = self._timer.now()
            waits: list[float] = []
            if not self._sessions_refused() and not self._session_open:
                if self._session_retry_at <= now:
                    await self._open_session()
                    continue
                waits.append(self._session_retry_at)
            if not self._words_refused():
                at = max(self._retry_at, now) if wanted != self._shown else self._due
                if at <= now:
                    await self._send(wanted)
                    continue
                waits.append(at)
            # (With the words refused, an open session waits for the run's end.)
            await self._pause(min(waits, default=now + self._refresh) - now)

    async def _end(self) -> None:
        """The run ended: the words cleared and the session moved to ``active`` where this
        delivery asked for them, and where it saw the run's end only (a takeover of a
        finished run: another replica may have shown them)."""
        if not self._words_refused() and (self._ever_sent or self._wanted is None):
            await self._send(StatusWords(""))
        if not self._sessions_refused() and (self._session_asked or self._wanted is None):
            await self._set_session(sessions.ENDED)

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

    async def _open_session(self) -> None:
        """The session ``processing``, created with the run's title (and requester); a
        session that existed already (an earlier research in the thread) is renamed."""
        start = self._session
        if start is None:
            return
        answer = await self._set_session(sessions.WORKING)
        if answer is None:
            return
        self._session_open = True
        shown = answer.get("title")
        if start.title and isinstance(shown, str) and shown != start.title:
            key = self._thread()
            try:
                await sessions.rename_session(
                    self._client, key.channel, thread_ts(key) or "", start.title
                )
            except Exception as exc:
                log.info("slack: agent session not renamed (%s)", describe_error(exc))

    async def _set_session(self, status: str) -> Mapping[str, Any] | None:
        """``agents.sessions.setStatus`` now; Slack's answer, or None when it failed (a
        refusal is remembered, anything else tried again after :data:`RETRY_SECONDS`)."""
        key = self._thread()
        ts = thread_ts(key)
        now = self._timer.now()
        if ts is None:  # (a slash command's thread before its opener)
            self._session_retry_at = now + RETRY_SECONDS
            return None
        start = self._session
        creating = status == sessions.WORKING and start is not None
        self._session_asked = self._session_asked or creating
        try:
            answer = await sessions.set_session(
                self._client,
                key.channel,
                ts,
                status,
                title=start.title if creating and start else None,
                initiator=self._initiator if creating else None,
            )
        except Exception as exc:
            self._session_failed(exc, key, ts, now)
            return None
        for warning in sessions.warnings_of(answer):
            self._refusals.warn(self._team, "agents.sessions.setStatus", warning)
        return answer

    def _session_failed(self, exc: Exception, key: ThreadKey, ts: str, now: float) -> None:
        code = error_code(exc) or ""
        if not sessions.is_refusal(exc):
            failure = classify_error(exc)
            log.info("slack: agent session not set (%s); tried again", describe_error(exc))
            self._session_retry_at = now + max(failure.retry_after, RETRY_SECONDS)
        elif code in THREAD_REFUSALS:
            log.info("slack: no agent session in %s %s (%s)", key.channel, ts, code)
            self._session_off = True  # this thread only
        elif self._initiator and code in sessions.INITIATOR_REFUSALS:
            log.info("slack: agent session refused its initiator (%s); asked without", code)
            self._initiator = None  # (asked again at once)
        else:
            channel_only = code in sessions.CHANNEL_REFUSALS
            self._refusals.refuse_sessions(self._team, key.channel, code, channel_only=channel_only)

    async def _send(self, words: StatusWords) -> None:
        """Set the words now; a failure is tried again after :data:`RETRY_SECONDS` (or what
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
                self._words_off = True  # this thread only
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
        """Stop. An ended run's keeper is given :data:`CLEAR_GRACE` seconds to end the
        session and clear the words; otherwise (a takeover, a shutdown) it stops at once."""
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

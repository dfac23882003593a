"""A toy chat platform, written as its package under ``bots/`` would be (the recipe "Add a
platform" of docs/architecture.md): its settings, its poster of one run's thread, its
ingress and its :class:`~bots.chat.platform.ChatPlatform`. ``tests/test_platforms.py``
registers it with one line (``PlatformEntry("toy", "Toy", "tests.toy_platform:ToyPlatform")``)
and serves one research through it; nothing else names it.

It delivers into :data:`TOY_CHAT`, the toy chat service's side, which the tests read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.controls import Button
from bots.chat.delivery import ThreadPoster, ThreadPosters
from bots.chat.inbound import ChatCommands
from bots.chat.message import ChatMessage
from bots.chat.platform import ChatPlatform, HttpIngress, OpenPlatform, PlatformRoute
from bots.chat.replies import MarkdownMarkup
from bots.chat.settings import PlatformSettings
from core.config import env
from core.engine.progress import ProgressTask
from core.operations.runners import JobRunner
from core.research.outcome import RunOutcome
from core.untrusted import neutralise
from storage import RunRecord

TOY = "toy"


class ToyChat:
    """The toy chat service's side: threads of messages, by thread key."""

    def __init__(self) -> None:
        self.threads: dict[str, list[str]] = defaultdict(list)
        self.answers: list[str] = []

    def clear(self) -> None:
        self.threads.clear()
        self.answers.clear()


#: The toy chat service every toy platform of this process posts into.
TOY_CHAT = ToyChat()


class ToySettings(PlatformSettings):
    token: str | None = Field(default=None, validation_alias=env("TOY_TOKEN"))

    @property
    def enabled(self) -> bool:
        return bool(self.token)


class ToyThread(ThreadPoster):
    """``bots.chat.delivery.ThreadPoster`` for one run's toy thread: the six calls only (the
    rest are the base class's defaults)."""

    def __init__(self, chat: ToyChat, run: RunRecord) -> None:
        super().__init__(run)
        self._messages = chat.threads[run.thread_key]

    def render_progress(
        self,
        status: str,
        message_id: str | None,
        buttons: Sequence[Button] = (),
        tasks: Sequence[ProgressTask] = (),
    ) -> str:
        return status  # a toy chat without buttons

    async def post_progress(self, content: str) -> str:
        self._messages.append(content)
        return str(len(self._messages) - 1)

    async def edit_progress(self, message_id: str, content: str) -> None:
        self._messages[int(message_id)] = content

    def report_parts(self, outcome: RunOutcome) -> Sequence[str]:
        return [outcome.report_markdown or ""]

    async def post_report_part(self, part: str) -> None:
        self._messages.append(part)

    async def post_notice(self, text: str) -> None:
        self._messages.append(neutralise(text))


class ToyPosters(ThreadPosters):
    async def poster_for(self, run: RunRecord) -> ToyThread:
        return ToyThread(TOY_CHAT, run)


class ToyIngress(HttpIngress):
    def __init__(self, commands: ChatCommands) -> None:
        self._commands = commands

    async def handle(self, request: Request) -> Response:
        data = await request.json()
        message = ChatMessage(
            platform=TOY,
            workspace="w1",
            channel=str(data["channel"]),
            thread=str(data["id"]),
            user=str(data["user"]),
            text=str(data["text"]),
            dedupe_key=f"toy:{data['id']}",
        )

        async def answer(text: str) -> None:
            TOY_CHAT.answers.append(text)

        await self._commands.receive(message, answer)
        return JSONResponse({"ok": True})


class ToyPlatform(ChatPlatform[ToySettings]):
    settings_class = ToySettings
    routes = (PlatformRoute(f"/{TOY}/messages", ("POST",)),)

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Its bot token sits in its API's URLs, as Telegram's does."""
        return (r"\bbot\d{6,12}:[A-Za-z0-9_-]{30,}",)

    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        posters = ToyPosters(self.services.store, edit_interval=0)
        if runner is None:
            return OpenPlatform(posters)
        markup = MarkdownMarkup(TOY, neutralise, lambda thread, language: thread.thread)
        return OpenPlatform(posters, ToyIngress(self.services.commands(runner, markup)))

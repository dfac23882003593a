"""The platform contract (``bots.chat.platform``): every registered platform against it, and
a toy platform, defined here, that registers and serves one research end to end with no
change outside this file."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from pydantic import Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.controls import Button
from bots.chat.delivery import ThreadPosters
from bots.chat.inbound import ChatCommands
from bots.chat.message import ChatMessage
from bots.chat.platform import ChatPlatform, HttpIngress, OpenPlatform, PlatformRoute
from bots.chat.replies import MarkdownMarkup
from bots.chat.settings import PlatformSettings
from bots.platforms import PLATFORMS, secret_patterns
from core.config import env
from core.documents.attachments import AttachmentRefused
from core.engine.progress import ProgressTask
from core.failures import PostFailure
from core.logs import configure_logging
from core.models import Attachment
from core.operations.runners import JobRunner
from core.research.outcome import RunOutcome
from core.untrusted import neutralise
from core.values import ThreadKey
from core.words.reasons import Reason
from storage import RunRecord
from tests.chat_app import wait_for
from tests.conftest import ServeFathom
from tests.fakes.dingtalk import CLIENT_ID as DINGTALK_ID
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import FakeDingTalkServer
from tests.fakes.feishu import APP_ID, APP_SECRET, FakeFeishuServer
from tests.fakes.slack import FakeSlackServer
from tests.fakes.teams import APP_ID as TEAMS_ID
from tests.fakes.teams import APP_PASSWORD as TEAMS_PASSWORD
from tests.fakes.teams import FakeTeamsServer

# -- every registered platform ------------------------------------------------------------

#: For each registered platform: a fake of it, and the settings that serve it over HTTP.
Fake = Callable[[], Any]
PlatformEnv = Callable[[Any], dict[str, str]]
CONTRACT: dict[str, tuple[Fake, PlatformEnv]] = {
    "slack": (
        FakeSlackServer,
        lambda fake: {
            "SLACK_BOT_TOKEN": "xoxb-contract",
            "SLACK_SIGNING_SECRET": "contract-secret",
            "SLACK_API_URL": fake.api_url,
        },
    ),
    "feishu": (
        FakeFeishuServer,
        lambda fake: {
            "FEISHU_APP_ID": APP_ID,
            "FEISHU_APP_SECRET": APP_SECRET,
            "FEISHU_VERIFICATION_TOKEN": "contract-token",
            "FEISHU_ENCRYPT_KEY": "contract-key",
            "FEISHU_DOMAIN": fake.url,
            "FEISHU_MODE": "webhook",
        },
    ),
    "dingtalk": (
        FakeDingTalkServer,
        lambda fake: {
            "DINGTALK_CLIENT_ID": DINGTALK_ID,
            "DINGTALK_CLIENT_SECRET": DINGTALK_SECRET,
            "DINGTALK_API_URL": fake.url,
            "DINGTALK_MODE": "http",
        },
    ),
    "teams": (
        FakeTeamsServer,
        lambda fake: {
            "TEAMS_APP_ID": TEAMS_ID,
            "TEAMS_APP_PASSWORD": TEAMS_PASSWORD,
            "TEAMS_OPENID_METADATA_URL": fake.metadata_url,
            "TEAMS_TOKEN_URL": fake.token_url(),
        },
    ),
}


def test_every_registered_platform_is_under_the_contract_test() -> None:
    assert sorted(cls.name for cls in PLATFORMS) == sorted(CONTRACT)
    assert len({cls.name for cls in PLATFORMS}) == len(PLATFORMS)
    routes = [route.path for cls in PLATFORMS for route in cls.routes]
    assert len(routes) == len(set(routes)), "two platforms claim one route"
    for cls in PLATFORMS:
        assert all(route.path.startswith(f"/{cls.name}/") for route in cls.routes), cls.name


@pytest.fixture(params=[cls.name for cls in PLATFORMS])
def platform(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    make, settings = CONTRACT[request.param]
    with make() as fake:
        yield request.param, settings(fake)


async def test_a_registered_platform_serves_its_routes_reports_readiness_and_stops_cleanly(
    serve_fathom: ServeFathom,
    platform: tuple[str, dict[str, str]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    name, settings = platform
    (cls,) = [cls for cls in PLATFORMS if cls.name == name]
    served = await serve_fathom(**settings)
    ready = await served.readyz()
    assert ready["status"] == "ready" and list(ready["platforms"]) == [name]
    assert ready["platforms"][name]["mode"] in ("http", "webhook")
    for route in cls.routes:
        method = route.methods[0]
        # Unsigned and empty: the platform's own answer (a refusal), never the server's
        # "not configured" nor a crash.
        answer = await served.http.request(method, f"{served.url}{route.path}", content=b"")
        assert answer.status_code < 500, (route.path, answer.status_code, answer.text)
        assert f"{cls.title} is not configured" not in answer.text, route.path
    others = [route for other in PLATFORMS if other is not cls for route in other.routes]
    for route in others:  # the other platforms' routes exist, and say they are not set up
        answer = await served.http.request(route.methods[0], f"{served.url}{route.path}")
        assert answer.status_code == 404 and "not configured" in answer.json()["error"]
    with caplog.at_level(logging.WARNING):
        await asyncio.to_thread(served.server.stop)
    assert served.server._thread is None  # joined: the lifespan's shutdown finished
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert problems == [], [r.getMessage() for r in problems]


# -- a toy platform, defined only here ----------------------------------------------------

TOY = "toy"


class ToySettings(PlatformSettings):
    token: str | None = Field(default=None, validation_alias=env("TOY_TOKEN"))

    @property
    def enabled(self) -> bool:
        return bool(self.token)


class ToyChat:
    """The toy chat service's side: threads of messages, by thread key."""

    def __init__(self) -> None:
        self.threads: dict[str, list[str]] = defaultdict(list)
        self.answers: list[str] = []


class ToyThread:
    """``bots.chat.delivery.ThreadPoster`` for one run's toy thread."""

    def __init__(self, chat: ToyChat, run: RunRecord) -> None:
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

    def can_edit(self, message_id: str) -> bool:
        return True

    async def resume(self, message_id: str | None) -> None:
        return None

    @property
    def needs_opener(self) -> bool:
        return False

    def report_parts(self, outcome: RunOutcome) -> Sequence[str]:
        return [outcome.report_markdown or ""]

    async def post_report_part(self, part: str) -> None:
        self._messages.append(part)

    async def post_notice(self, text: str) -> None:
        self._messages.append(neutralise(text))

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise AttachmentRefused(Reason("the toy chat keeps no files", "玩具聊天不保存文件"))

    def classify(self, error: Exception) -> PostFailure:
        return PostFailure(type(error).__name__, True)


def toy_platform(chat: ToyChat) -> type[ChatPlatform[ToySettings]]:
    """The toy platform, delivering into ``chat`` (what the test reads)."""

    class ToyPosters(ThreadPosters):
        async def poster_for(self, run: RunRecord) -> ToyThread:
            return ToyThread(chat, run)

    class ToyPlatform(ChatPlatform[ToySettings]):
        name = TOY
        title = "Toy"
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
                chat.answers.append(text)

            await self._commands.receive(message, answer)
            return JSONResponse({"ok": True})

    return ToyPlatform


async def test_a_toy_platform_registered_in_a_test_serves_one_research_end_to_end(
    serve_fathom: ServeFathom,
) -> None:
    toy_chat = ToyChat()
    served = await serve_fathom(registry=(*PLATFORMS, toy_platform(toy_chat)), TOY_TOKEN="t")
    ready = await served.readyz()
    assert ready["platforms"] == {TOY: {"mode": "http"}}
    answer = await served.http.post(
        f"{served.url}/{TOY}/messages",
        json={"id": "m1", "channel": "c1", "user": "u1", "text": "/research heat pumps depth=2"},
    )
    assert answer.status_code == 200
    (run,) = await served.delivered(f"{TOY}:w1:u1")
    assert run.status == "succeeded" and run.delivery == "posted"
    key = str(ThreadKey(platform=TOY, workspace="w1", channel="c1", thread="m1"))
    progress, *report = toy_chat.threads[key]
    assert progress.startswith("Research done: 2/2 searches")
    assert report and report[0].startswith("# ")
    assert toy_chat.answers == []  # the progress message was the answer
    help_answer = await served.http.post(
        f"{served.url}/{TOY}/messages",
        json={"id": "m2", "channel": "c1", "user": "u1", "text": "help"},
    )
    assert help_answer.status_code == 200
    await wait_for(lambda: toy_chat.answers)
    assert "/research" in toy_chat.answers[0]


def test_a_platform_s_own_credential_is_masked_in_every_log_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A token in a URL, as Telegram's Bot API puts it (``https://api.telegram.org/bot<token>/
    METHOD_NAME``, core.telegram.org/bots/api "Making requests"): masked in both log formats
    once its platform declares the pattern (``ChatPlatform.secret_patterns``); core's own
    patterns alone leave it as it is."""
    token = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
    url = f"https://api.telegram.org/bot{token}/sendMessage"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        for fmt in ("console", "json"):
            configure_logging("INFO", fmt, secret_patterns((*PLATFORMS, toy_platform(ToyChat()))))
            logging.getLogger("fathom.toy").warning("POST %s failed", url)
        configure_logging("INFO", "console", secret_patterns(PLATFORMS))
        logging.getLogger("fathom.toy").warning("POST %s failed", url)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    console, json_line, unmasked = capsys.readouterr().err.splitlines()
    for line in (console, json_line):
        assert token.split(":")[1] not in line and "api.telegram.org/bot12…" in line
    assert json.loads(json_line)["logger"] == "fathom.toy"
    assert token in unmasked

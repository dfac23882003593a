"""The platform contract (``bots.chat.platform``) and the registry (``bots.platforms``):
every registered platform against it; a toy platform, its package
(``tests/toy_platform.py``) plus one registry line here, that serves one research end to
end; and the registry's lines imported lazily (no platform, no SDK on import; one line
naming what is missing when one cannot be imported)."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.chat.delivery import ThreadPoster
from bots.composition import load_app_settings, open_app
from bots.platforms import PLATFORMS, PlatformEntry, classes, secret_patterns, titles
from core.config import ConfigError
from core.logs import configure_logging
from core.values import ThreadKey
from tests.chat_app import fathom_settings, wait_for
from tests.conftest import ServeFathom
from tests.databases import MigratedTemplates
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.dingtalk import CLIENT_ID as DINGTALK_ID
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import FakeDingTalkServer
from tests.fakes.feishu import APP_ID, APP_SECRET, FakeFeishuServer
from tests.fakes.slack import FakeSlackServer
from tests.fakes.teams import APP_ID as TEAMS_ID
from tests.fakes.teams import APP_PASSWORD as TEAMS_PASSWORD
from tests.fakes.teams import FakeTeamsServer
from tests.toy_platform import TOY, TOY_CHAT, ToyChat, ToyPlatform, ToyThread

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
    assert sorted(entry.name for entry in PLATFORMS) == sorted(CONTRACT)
    assert len({entry.name for entry in PLATFORMS}) == len(PLATFORMS)
    routes = [route.path for cls in classes() for route in cls.routes]
    assert len(routes) == len(set(routes)), "two platforms claim one route"
    for cls in classes():
        assert all(route.path.startswith(f"/{cls.name}/") for route in cls.routes), cls.name


@pytest.fixture(params=[entry.name for entry in PLATFORMS])
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
    (cls,) = [entry.load() for entry in PLATFORMS if entry.name == name]
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
    others = [route for other in classes() if other is not cls for route in other.routes]
    for route in others:  # the other platforms' routes exist, and say they are not set up
        answer = await served.http.request(route.methods[0], f"{served.url}{route.path}")
        assert answer.status_code == 404 and "not configured" in answer.json()["error"]
    with caplog.at_level(logging.WARNING):
        await asyncio.to_thread(served.server.stop)
    assert served.server._thread is None  # joined: the lifespan's shutdown finished
    problems = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert problems == [], [r.getMessage() for r in problems]


# -- a toy platform: its package (tests/toy_platform.py) and one registry line ------------

#: The toy platform's line, as ``bots/platforms.py`` would list it.
TOY_ENTRY = PlatformEntry(TOY, "Toy", "tests.toy_platform:ToyPlatform")


@pytest.fixture
def toy_chat() -> Iterator[ToyChat]:
    TOY_CHAT.clear()
    yield TOY_CHAT
    TOY_CHAT.clear()


async def test_a_toy_platform_registered_by_one_line_serves_one_research_end_to_end(
    serve_fathom: ServeFathom, toy_chat: ToyChat
) -> None:
    served = await serve_fathom(registry=(*PLATFORMS, TOY_ENTRY), TOY_TOKEN="t")
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


def test_the_toy_platform_writes_only_what_the_contract_has_no_default_for() -> None:
    """The recipe's "no boilerplate": the toy's poster fills in the contract's abstract calls
    and nothing else (editing, the pending-thread re-key, files and the judgement of failures
    are the base class's and the shared delivery's), and its class does not repeat the name
    and title its registry line gives it."""
    abstract = set(ThreadPoster.__abstractmethods__)
    assert len(abstract) <= 6, sorted(abstract)
    written = {name for name in vars(ToyThread) if not name.startswith("_")}
    assert written == abstract, sorted(written ^ abstract)
    assigned = {
        target.id
        for node in ast.parse(textwrap.dedent(inspect.getsource(ToyPlatform))).body[0].body  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    assert assigned == {"settings_class", "routes"}, assigned
    assert TOY_ENTRY.load() is ToyPlatform and (ToyPlatform.name, ToyPlatform.title) == (
        TOY,
        "Toy",
    )


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
            configure_logging("INFO", fmt, secret_patterns((*PLATFORMS, TOY_ENTRY)))
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


# -- the registry: dotted names, imported when asked for -----------------------------------

#: The SDKs of the registered platforms (imported when a platform is opened, never before).
SDKS = ("slack_bolt", "slack_sdk", "lark_oapi", "dingtalk_stream")

IMPORTED = """
import json, sys
from typer.testing import CliRunner

def imported():
    packages = {entry.target.rpartition(".")[0] for entry in bots.platforms.PLATFORMS}
    return sorted(
        name for name in sys.modules
        if name.split(".")[0] in SDKS or any(name.startswith(p) for p in packages)
    )

import bots.platforms
titles = bots.platforms.titles()
after_import = imported()
from bots.cli import app
help = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"}).output
print(json.dumps({"titles": titles, "import": after_import, "help": help, "after": imported()}))
"""


def test_importing_the_registry_or_asking_serve_for_help_imports_no_platform() -> None:
    """``import bots.platforms`` and ``fathom serve --help`` (which names every platform from
    the registry's lines) leave every platform's package and every SDK out of the process."""
    code = f"SDKS = {SDKS!r}\n{IMPORTED}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    shown = json.loads(done.stdout)
    assert shown["titles"] == titles() and len(shown["titles"]) == len(PLATFORMS)
    assert shown["import"] == [] and shown["after"] == [], shown
    text = " ".join(shown["help"].split())
    for title in titles().values():
        assert title in text, (title, text)


def _platform_module(folder: Path, name: str, body: str) -> str:
    (folder / f"{name}.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return name


def test_a_platform_whose_package_cannot_be_imported_says_which_one_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _platform_module(tmp_path, "fathom_needs_sdk", "import fathom_missing_sdk\n")
    entry = PlatformEntry("needy", "Needy Chat", f"{module}:NeedyPlatform")
    assert titles((*PLATFORMS, entry))["needy"] == "Needy Chat"  # its line, not imported
    with pytest.raises(ConfigError) as raised:
        entry.load()
    said = str(raised.value)
    assert said.startswith("Needy Chat (needy) cannot be used: ") and "\n" not in said
    assert "'fathom_missing_sdk'" in said and "requirements" in said
    with pytest.raises(ConfigError, match="'fathom_missing_sdk'"):  # every command's settings
        load_app_settings((*PLATFORMS, entry), _env_file=None)


async def test_an_enabled_platform_whose_sdk_is_missing_says_so_when_it_is_opened(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> None:
    """Its package imports (its SDK is imported when it is opened, as every platform's is):
    opening it is one ``ConfigError`` line naming the platform and the package."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _platform_module(
        tmp_path,
        "fathom_lazy_sdk",
        """
        from bots.chat.platform import ChatPlatform
        from bots.chat.settings import PlatformSettings

        class Configured(PlatformSettings):
            @property
            def enabled(self) -> bool:
                return True

        class LazyPlatform(ChatPlatform[Configured]):
            settings_class = Configured

            async def open(self, runner):
                from fathom_missing_sdk import Client  # noqa: F401
        """,
    )
    entry = PlatformEntry("lazy", "Lazy Chat", f"{module}:LazyPlatform")
    url = templates.sqlite(tmp_path / "lazy.db")
    settings = fathom_settings(url, llm_server, search_server, registry=(entry,))
    with pytest.raises(ConfigError) as raised:
        async with open_app(settings, role="serve"):
            pass
    said = str(raised.value)
    assert said.startswith("Lazy Chat (lazy) cannot be used: ") and "'fathom_missing_sdk'" in said

"""``fathom serve`` as a real subprocess against the LLM, search and Slack fakes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.fakes.dingtalk import CLIENT_ID as DINGTALK_ID
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import FakeDingTalkServer, bot_message
from tests.fakes.dingtalk import signed_headers as dingtalk_signed
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    FakeFeishu,
    FakeFeishuServer,
    FeishuMessage,
    challenge_body,
    encrypt,
    message_event,
    signed_headers,
)
from tests.fakes.slack import FakeSlackServer, is_report, sign, slash_command_body
from tests.test_cli import NOTES_TOKEN, TICKETS_TOKEN, mcp_config, needs_knowledge
from tests.test_slack_app import BOT_TOKEN, FORM, SECRET


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], url: str, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stderr(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def serve(env: dict[str, str], cwd: Path, *args: str) -> Served:
    port = free_port()
    log = cwd / f"serve-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bots.cli", "serve", "--port", str(port), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    return Served(proc, f"http://127.0.0.1:{port}", log)


def wait_until_up(served: Served, timeout: float = 120) -> None:
    """Wait for ``/healthz``. The timeout only ends a hung test: a process that imports
    every platform's SDK on a loaded 2-CPU machine took over 30 s to come up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise AssertionError(f"serve exited early:\n{served.stderr()}")
        try:
            if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"serve did not come up:\n{served.stderr()}")


def terminate(served: Served, timeout: float = 10) -> int:
    served.proc.send_signal(signal.SIGTERM)
    try:
        return served.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()
        raise AssertionError(f"serve did not stop on SIGTERM:\n{served.stderr()}") from None


@pytest.fixture
def slack_env(cli_env: dict[str, str], slack_server: FakeSlackServer) -> dict[str, str]:
    return {
        **cli_env,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_URL": slack_server.api_url,
        "FATHOM_SLACK_EDIT_INTERVAL": "0.05",
        "FATHOM_LOG_LEVEL": "DEBUG",
    }


def test_serve_answers_slack_and_stops_cleanly_on_sigterm(
    slack_env: dict[str, str], slack_server: FakeSlackServer, tmp_path: Path
) -> None:
    served = serve(slack_env, tmp_path)
    try:
        wait_until_up(served)
        assert httpx.get(f"{served.url}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{served.url}/readyz")
        assert ready.status_code == 200, ready.text

        body = slash_command_body("heat pumps depth=2", trigger_id="serve-1")
        response = httpx.post(
            f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert response.status_code == 200 and "On it" in response.json()["text"]

        deadline = time.monotonic() + 30
        fake = slack_server.fake
        while time.monotonic() < deadline:
            reports = [c for c in fake.calls_to("chat.postMessage") if is_report(c.params)]
            if reports:
                break
            time.sleep(0.05)
        else:
            raise AssertionError(f"no report posted:\n{served.stderr()}")
        opener = fake.calls_to("chat.postMessage")[0].params
        assert reports[0].params["thread_ts"] != opener.get("thread_ts")
        assert "heat pumps" in reports[0].params["blocks"][0]["text"]
        assert all(c.token == BOT_TOKEN for c in fake.calls)
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()
    assert BOT_TOKEN not in served.stderr()  # DEBUG logs included


def test_serve_without_upgrade_is_alive_but_not_ready(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    empty = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"  # never migrated
    served = serve({**cli_env, "DATABASE_URL": empty}, tmp_path, "--no-upgrade")
    try:
        wait_until_up(served)
        ready = httpx.get(f"{served.url}/readyz")
        assert ready.status_code == 503
        assert "fathom db upgrade" in ready.json()["reason"]
        missing = httpx.post(f"{served.url}/slack/events", content=b"{}")
        assert missing.status_code == 404 and "not configured" in missing.json()["error"]
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"FATHOM_QUEUE": "procrastinate"}, "FATHOM_QUEUE=procrastinate needs DATABASE_URL to be"),
        ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET is not set"),
        ({"FEISHU_APP_ID": "cli_1"}, "FEISHU_APP_ID and FEISHU_APP_SECRET must both be set"),
        (
            {"FEISHU_APP_ID": "cli_1", "FEISHU_APP_SECRET": "s", "FEISHU_MODE": "webhook"},
            "FEISHU_MODE=webhook needs FEISHU_VERIFICATION_TOKEN and FEISHU_ENCRYPT_KEY",
        ),
        ({"FEISHU_APP_ID": "cli_1", "FEISHU_MODE": "socket"}, "FEISHU_MODE"),
        ({"DINGTALK_CLIENT_ID": "d"}, "DINGTALK_CLIENT_ID and DINGTALK_CLIENT_SECRET must both"),
        (
            {"FEISHU_APP_ID": "c", "FEISHU_APP_SECRET": "s", "FEISHU_DOMAIN": "http://h:1/api"},
            "FEISHU_DOMAIN",
        ),
        ({"DINGTALK_API_URL": "api.dingtalk.com"}, "DINGTALK_API_URL"),
        ({"SLACK_API_URL": "slack"}, "SLACK_API_URL"),
    ],
)
def test_serve_refuses_bad_settings_in_one_line(
    cli_env: dict[str, str], tmp_path: Path, extra: dict[str, str], message: str
) -> None:
    served = serve({**cli_env, **extra}, tmp_path)
    assert served.proc.wait(timeout=30) == 2
    errors = [line for line in served.stderr().splitlines() if line.strip()]
    assert len(errors) == 1 and message in errors[0], errors


def feishu_env(server: FakeFeishuServer, mode: str) -> dict[str, str]:
    return {
        "FEISHU_APP_ID": APP_ID,
        "FEISHU_APP_SECRET": APP_SECRET,
        "FEISHU_VERIFICATION_TOKEN": "serve-token",
        "FEISHU_ENCRYPT_KEY": "serve-key",
        "FEISHU_DOMAIN": server.url,
        "FEISHU_MODE": mode,
        "FATHOM_FEISHU_EDIT_INTERVAL": "0.2",
    }


def wait_for_report(fake: FakeFeishu, root: str, served: Served, done: str) -> list[FeishuMessage]:
    """The Feishu thread of ``root`` once its progress card says ``done`` and a report follows."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        thread = fake.thread(root)
        if len(thread) >= 2 and done in thread[0].markdown:
            return thread
        time.sleep(0.05)
    raise AssertionError(f"no report in the Feishu thread:\n{served.stderr()}")


def test_serve_runs_slack_feishu_and_dingtalk_side_by_side(
    slack_env: dict[str, str],
    slack_server: FakeSlackServer,
    feishu_server: FakeFeishuServer,
    dingtalk_server: FakeDingTalkServer,
    tmp_path: Path,
) -> None:
    dingtalk_env = {
        "DINGTALK_CLIENT_ID": DINGTALK_ID,
        "DINGTALK_CLIENT_SECRET": DINGTALK_SECRET,
        "DINGTALK_API_URL": dingtalk_server.url,
        "DINGTALK_MODE": "http",
    }
    served = serve({**slack_env, **feishu_env(feishu_server, "ws"), **dingtalk_env}, tmp_path)
    fake = feishu_server.fake
    try:
        wait_until_up(served)
        deadline = time.monotonic() + 30
        while (
            httpx.get(f"{served.url}/readyz").json()["platforms"].get("feishu", {}).get("state")
            != "connected"
        ):
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.05)
        platforms = httpx.get(f"{served.url}/readyz").json()["platforms"]
        assert platforms["slack"] == {"mode": "http"} and platforms["feishu"]["mode"] == "ws"
        assert platforms["dingtalk"] == {"mode": "http"}
        message = bot_message(dingtalk_server.fake, "/research geothermal depth=1", msg_id="m_b")
        answered = httpx.post(
            f"{served.url}/dingtalk/events",
            content=json.dumps(message).encode(),
            headers=dingtalk_signed(),
        )
        assert answered.status_code == 200

        ack = fake.push_event(message_event("/research heat pumps depth=2", message_id="om_s1"))
        assert ack["code"] == 200
        body = slash_command_body("tidal power depth=1", trigger_id="serve-both")
        response = httpx.post(
            f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert response.status_code == 200 and "On it" in response.json()["text"]
        reports = wait_for_report(fake, "om_s1", served, "Research done")[1:]
        assert "heat pumps" in reports[0].markdown
        deadline = time.monotonic() + 30
        while not [
            c for c in slack_server.fake.calls_to("chat.postMessage") if is_report(c.params)
        ]:
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.05)
        while not dingtalk_server.fake.sent_to("cid_single_1"):
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.05)
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()
    log = served.stderr()  # DEBUG logs included
    assert APP_SECRET not in log and BOT_TOKEN not in log
    assert fake.tokens and not any(token in log for token in fake.tokens)
    assert fake.ws_connections >= 1


def test_serve_answers_feishu_webhooks_alone(
    cli_env: dict[str, str], feishu_server: FakeFeishuServer, tmp_path: Path
) -> None:
    served = serve({**cli_env, **feishu_env(feishu_server, "webhook")}, tmp_path)
    url = f"{served.url}/feishu/events"
    try:
        wait_until_up(served)
        challenge = httpx.post(url, json=encrypt(challenge_body("c-9", "serve-token"), "serve-key"))
        assert challenge.json() == {"challenge": "c-9"}
        event = message_event("/research 热泵 depth=1", token="serve-token", message_id="om_w")
        body = json.dumps(encrypt(event, "serve-key")).encode()
        forged = httpx.post(url, content=body, headers=signed_headers(body, "wrong-key"))
        assert forged.status_code == 401
        response = httpx.post(url, content=body, headers=signed_headers(body, "serve-key"))
        assert response.status_code == 200
        thread = wait_for_report(feishu_server.fake, "om_w", served, "研究完成：1/1 次搜索")
        assert thread[1].root_id == "om_w"
        missing = httpx.post(f"{served.url}/slack/events", content=b"{}")
        assert missing.status_code == 404
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()
    assert APP_SECRET not in served.stderr()


@pytest.mark.parametrize("mode", ["stream", "http"])
def test_serve_answers_dingtalk_in_either_mode(
    cli_env: dict[str, str], dingtalk_server: FakeDingTalkServer, tmp_path: Path, mode: str
) -> None:
    env = {
        **cli_env,
        "DINGTALK_CLIENT_ID": DINGTALK_ID,
        "DINGTALK_CLIENT_SECRET": DINGTALK_SECRET,
        "DINGTALK_API_URL": dingtalk_server.url,
        "DINGTALK_MODE": mode,
        "FATHOM_DINGTALK_EDIT_INTERVAL": "0.1",
        "FATHOM_LOG_LEVEL": "DEBUG",
    }
    served = serve(env, tmp_path)
    fake = dingtalk_server.fake
    data = bot_message(fake, "/research heat pumps depth=2", group=True, msg_id="msg_serve")
    try:
        wait_until_up(served)
        if mode == "stream":
            deadline = time.monotonic() + 30
            while (
                httpx.get(f"{served.url}/readyz").json()["platforms"]["dingtalk"].get("state")
                != "connected"
            ):
                assert time.monotonic() < deadline, served.stderr()
                time.sleep(0.05)
            assert fake.push(data)["code"] == 200
        else:
            response = httpx.post(
                f"{served.url}/dingtalk/events",
                content=json.dumps(data).encode(),
                headers=dingtalk_signed(),
            )
            assert response.status_code == 200, response.text
        deadline = time.monotonic() + 30
        while not fake.sent_to("cid_group_1"):
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.05)
        card = fake.cards[next(k for k in fake.cards if not k.startswith("fathom_fb_"))]
        assert "Research done: 2/2 searches" in card.params["markdown"]
        assert fake.sent_to("cid_group_1")[0].at_user_ids == ["staff_1"]
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()
    log = served.stderr()
    assert DINGTALK_SECRET not in log and not any(token in log for token in fake.tokens)


def test_a_digest_scheduled_from_slack_fires_at_local_time_and_reports_what_is_new(
    slack_env: dict[str, str], slack_server: FakeSlackServer, tmp_path: Path
) -> None:
    """The real `fathom serve`: `/research schedule` in Slack, then the scheduler fires the
    digest in the schedule's timezone (a cron whose hours are Shanghai's, not UTC's) and posts
    a new top-level message with progress and the report in its thread. Waits for the next
    real minute boundary (what the next firing's report says is new, and every slot's
    arithmetic, are tested on a clock in test_digests.py)."""
    from datetime import UTC, datetime, timedelta
    from zoneinfo import ZoneInfo

    shanghai = ZoneInfo("Asia/Shanghai")
    soon = datetime.now(UTC).astimezone(shanghai)
    hours = sorted({soon.hour, (soon + timedelta(minutes=3)).hour})
    cron = f"* {','.join(map(str, hours))} * * *"
    env = {**slack_env, "FATHOM_DIGEST_MIN_INTERVAL": "60", "FATHOM_LOG_LEVEL": "INFO"}
    served = serve(env, tmp_path)
    fake = slack_server.fake
    try:
        wait_until_up(served)
        text = f'schedule "heat pumps" cron="{cron}" depth=1 tz=Asia/Shanghai'
        body = slash_command_body(text, trigger_id="digest-1")
        ack = httpx.post(
            f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert ack.status_code == 200 and "Scheduled *heat pumps*" in ack.json()["text"], ack.text

        def openers() -> list[dict[str, object]]:
            """The digest's top-level messages as Slack stored them (with their ts)."""
            return [
                message
                for message in list(fake.history)
                if "thread_ts" not in message and "Digest: heat pumps" in str(message["text"])
            ]

        def reports_in(ts: str) -> list[str]:
            return [
                str(c.params["blocks"][0]["text"])
                for c in fake.calls_to("chat.postMessage")
                if c.params.get("thread_ts") == ts and is_report(c.params)
            ]

        deadline = time.monotonic() + 90
        while not openers() or not reports_in(str(openers()[0]["ts"])):
            assert time.monotonic() < deadline, served.stderr()
            time.sleep(0.2)
        first = openers()[0]
        day = datetime.now(UTC).astimezone(shanghai).strftime("%Y-%m-")
        assert str(first["text"]).startswith(f"*Digest: heat pumps — {day}")
        first_report = "".join(reports_in(str(first["ts"])))
        assert first_report.startswith("# ") and "What's new since" not in first_report
    finally:
        code = terminate(served)
    assert code == 0, served.stderr()


# -- team knowledge (MCP servers) ---------------------------------------------------------------


@dataclass(frozen=True)
class ServerState:
    name: str
    transport: str
    tool: str | None
    state: str
    problem: str | None


class Servers:
    """The internal sources as ``/readyz`` reads them (``Knowledge.status()``)."""

    def __init__(self, *servers: ServerState) -> None:
        self.servers = servers

    def status(self) -> tuple[ServerState, ...]:
        return self.servers


def test_readyz_shows_each_mcp_server_by_name_with_its_state() -> None:
    from bots.http_status import knowledge_status

    shown = knowledge_status(
        Servers(
            ServerState("wiki", "stdio", "search", "up", None),
            ServerState("tickets", "http", None, "down", "tickets: cannot connect"),
        )
    )
    assert shown == {
        "wiki": {"state": "up", "transport": "stdio", "tool": "search"},
        "tickets": {
            "state": "down",
            "transport": "http",
            "tool": None,
            "problem": "tickets: cannot connect",
        },
    }


@needs_knowledge
def test_serve_runs_without_a_server_that_is_down_and_readyz_shows_it(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    served = serve({**cli_env, **mcp_config(tmp_path)}, tmp_path)
    try:
        wait_until_up(served)
        deadline = time.monotonic() + 30
        while True:
            ready = httpx.get(f"{served.url}/readyz")
            servers = ready.json()["knowledge"]
            if all(s["state"] != "starting" for s in servers.values()):
                break
            assert time.monotonic() < deadline, servers
            time.sleep(0.1)
        assert ready.status_code == 200 and ready.json()["status"] == "ready"  # not made unready
        assert list(servers) == ["notes", "tickets", "broken"]
        assert servers["notes"] == {"state": "up", "transport": "stdio", "tool": "search"}
        assert servers["tickets"]["state"] == "down" and servers["tickets"]["problem"]
        assert servers["broken"]["state"] == "down" and servers["broken"]["problem"]
    finally:
        code = terminate(served)
    assert code == 0
    log = served.stderr()
    for name in ("tickets", "broken"):  # one line at start-up names each server that is down
        assert len([line for line in log.splitlines() if name in line]) >= 1, log
    assert NOTES_TOKEN not in log and TICKETS_TOKEN not in log


@needs_knowledge
def test_serve_refuses_a_malformed_mcp_config_in_one_line(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text('{"mcpServers": ["wiki"]}', encoding="utf-8")  # a list, not an object
    served = serve({**cli_env, "FATHOM_MCP_CONFIG": str(bad)}, tmp_path)
    assert served.proc.wait(timeout=30) == 2
    errors = [line for line in served.stderr().splitlines() if line.strip()]
    assert len(errors) == 1, errors

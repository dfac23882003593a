"""The edges of ``fathom serve``'s HTTP side, through the real process: clients that
disconnect mid-body or trickle it, a schema left behind by ``--no-upgrade``, a port in use.

Raw sockets send what no HTTP library would (a body shorter than its ``Content-Length``, one
byte at a time); the server must answer with one short log line, never a traceback.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx

from tests.fakes.dingtalk import CLIENT_ID as DINGTALK_ID
from tests.fakes.dingtalk import CLIENT_SECRET as DINGTALK_SECRET
from tests.fakes.dingtalk import FakeDingTalkServer
from tests.fakes.feishu import FakeFeishuServer
from tests.fakes.slack import FakeSlackServer, sign, slash_command_body
from tests.test_serve import (
    FORM,
    SECRET,
    Served,
    feishu_env,
    serve,
    slack_env,
    terminate,
    wait_until_up,
)

__all__ = ["slack_env"]  # fixtures


def _address(served: Served) -> tuple[str, int]:
    host, port = served.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def _log_lines_about(served: Served, words: str) -> list[str]:
    return [line for line in served.stderr().splitlines() if words in line]


def test_a_client_that_disconnects_mid_body_costs_one_log_line(
    slack_env: dict[str, str],
    feishu_server: FakeFeishuServer,
    dingtalk_server: FakeDingTalkServer,
    tmp_path: Path,
) -> None:
    """On each platform's route, in one served process."""
    env = {
        **slack_env,
        **feishu_env(feishu_server, "webhook"),
        "DINGTALK_CLIENT_ID": DINGTALK_ID,
        "DINGTALK_CLIENT_SECRET": DINGTALK_SECRET,
        "DINGTALK_API_URL": dingtalk_server.url,
        "DINGTALK_MODE": "http",
        "FATHOM_LOG_LEVEL": "INFO",
    }
    served = serve(env, tmp_path)
    paths = ["/slack/events", "/feishu/events", "/dingtalk/events"]
    try:
        wait_until_up(served)
        for seen, path in enumerate(paths, start=1):
            with socket.create_connection(_address(served)) as client:
                client.sendall(_head(path, 1000) + b"x" * 10)
            words = "disconnected before sending its whole body"
            deadline = time.monotonic() + 30
            while len(lines := _log_lines_about(served, words)) < seen:
                assert time.monotonic() < deadline, served.stderr()
                time.sleep(0.05)
            assert len(lines) == seen and path in lines[-1], lines  # one line, about it
            assert httpx.get(f"{served.url}/healthz").status_code == 200  # still serving
    finally:
        code = terminate(served)
    assert code == 0
    assert len(_log_lines_about(served, "disconnected before sending its whole body")) == 3
    assert "Traceback" not in served.stderr()


def test_a_body_trickled_past_the_body_timeout_is_cut_off_with_408(
    slack_env: dict[str, str], tmp_path: Path
) -> None:
    served = serve({**slack_env, "FATHOM_BODY_TIMEOUT": "1", "FATHOM_LOG_LEVEL": "INFO"}, tmp_path)
    try:
        wait_until_up(served)
        with socket.create_connection(_address(served)) as client:
            client.sendall(_head("/slack/events", 200))
            client.settimeout(0.25)
            answer = b""
            for _ in range(200):  # one byte a quarter second: 50 s for the whole body
                try:
                    client.sendall(b"x")
                except OSError:  # the server closed the connection after its answer
                    break
                try:
                    answer += client.recv(4096)
                except TimeoutError:
                    continue
                if b"\r\n\r\n" in answer:
                    break
        assert answer.startswith(b"HTTP/1.1 408"), answer
        lines = _log_lines_about(served, "not complete within 1 s")
        assert len(lines) == 1
        # A normal request right after is answered as usual.
        body = slash_command_body("help", trigger_id="after-408")
        response = httpx.post(
            f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert response.status_code == 200
    finally:
        terminate(served)
    assert "Traceback" not in served.stderr()


def test_platform_routes_answer_503_while_the_schema_is_not_current(
    slack_env: dict[str, str], tmp_path: Path
) -> None:
    empty = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"  # never migrated
    env = {**slack_env, "FATHOM_LOG_LEVEL": "INFO", "DATABASE_URL": empty}
    served = serve(env, tmp_path, "--no-upgrade")
    try:
        wait_until_up(served)
        body = slash_command_body("heat pumps", trigger_id="old-schema")
        for _ in range(3):
            response = httpx.post(
                f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
            )
            assert response.status_code == 503
            assert "schema is not current" in response.json()["error"]
        assert len(_log_lines_about(served, "answered 503")) == 3
    finally:
        code = terminate(served)
    assert code == 0
    assert "Traceback" not in served.stderr()


def test_serve_on_a_port_in_use_fails_in_one_line_before_connecting_anywhere(
    slack_env: dict[str, str], slack_server: FakeSlackServer, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        served = serve({**slack_env, "FATHOM_LOG_LEVEL": "INFO"}, tmp_path, "--port", str(port))
        assert served.proc.wait(timeout=60) == 2
    lines = [line for line in served.stderr().splitlines() if line.strip()]
    assert len(lines) == 1 and f"cannot listen on 127.0.0.1:{port}" in lines[0], lines
    assert "already in use" in lines[0]
    assert slack_server.fake.calls == []  # not even auth.test

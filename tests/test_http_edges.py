"""The edges of ``fathom serve``'s HTTP side, through the real process: clients that
disconnect mid-body or trickle it, that never finish their request's head or send nothing,
a schema left behind by ``--no-upgrade``, a port in use.

Raw sockets send what no HTTP library would (a body shorter than its ``Content-Length``, one
byte at a time); the server must answer with one short log line, never a traceback.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import pytest

from bots.worker import metrics_server
from core.metrics import Metrics
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
    free_port,
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


#: How long a test waits for the server to close a connection: only ends a hung test (uvicorn
#: alone held such a connection until the client gave up, some 40 s in the issue's trials).
CLOSE_WITHIN = 30.0


def _until_closed(client: socket.socket) -> bytes:
    """Everything the server sends on ``client`` until it closes the connection (a
    ``TimeoutError`` if it has not closed it within :data:`CLOSE_WITHIN`)."""
    client.settimeout(CLOSE_WITHIN)
    received = b""
    while chunk := client.recv(4096):
        received += chunk
    return received


def test_connections_that_never_finish_their_head_are_closed_unserved(
    slack_env: dict[str, str], tmp_path: Path
) -> None:
    """Slowloris: a connection that sends part of a request line, or headers without their
    end, or a kept-alive connection whose next request stops half-way, gets 408 and is
    closed after FATHOM_HEADER_TIMEOUT; one that sends nothing is closed without a word; a
    head over 64 KiB gets 431. On the public and the admin port (one uvicorn server). None of
    them reaches a route, and the next request is served."""
    admin = free_port()
    env = {**slack_env, "FATHOM_HEADER_TIMEOUT": "1", "FATHOM_LOG_LEVEL": "INFO"}
    served = serve(env, tmp_path, "--admin-port", str(admin))
    public = _address(served)
    try:
        wait_until_up(served)
        for address in (public, ("127.0.0.1", admin)):
            for partial in (b"POST /slack/eve", b"GET /readyz HTTP/1.1\r\nHost: x\r\n"):
                with socket.create_connection(address) as client:
                    client.sendall(partial)
                    answer = _until_closed(client)
                assert answer.startswith(b"HTTP/1.1 408 "), answer
                assert b"request head not complete within 1 s" in answer
            with socket.create_connection(address) as client:
                assert _until_closed(client) == b""  # silent, closed silently
        with socket.create_connection(public) as client:
            client.settimeout(CLOSE_WITHIN)
            client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, kept
            first = b""
            while not first.endswith(b'{"status":"ok"}'):
                first += client.recv(4096)
            client.sendall(b"GET /healthz HTTP/1.1\r\nHo")  # the next request stops
            second = _until_closed(client)
        assert first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 408 "), second
        with socket.create_connection(public) as client:
            client.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 70_000)
            answer = _until_closed(client)
        assert answer.startswith(b"HTTP/1.1 431 "), answer
        assert len(_log_lines_about(served, "request head not complete within 1 s")) == 5
        assert len(_log_lines_about(served, "431 request head too large")) == 1
        body = slash_command_body("help", trigger_id="after-slowloris")
        response = httpx.post(
            f"{served.url}/slack/events", content=body, headers={**sign(body, SECRET), **FORM}
        )
        assert response.status_code == 200  # still serving
    finally:
        code = terminate(served)
    assert code == 0
    assert "rejected" not in served.stderr()  # no route saw any of them
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


def test_the_worker_metrics_port_closes_connections_that_send_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fathom worker --metrics-port`` (prometheus_client's WSGI app, a thread per
    connection): a connection that sends nothing, or stops half-way through its request
    line, is closed after FATHOM_HEADER_TIMEOUT without a traceback; /metrics is still
    served."""
    port = free_port()
    with metrics_server(Metrics(), "127.0.0.1", port, idle_timeout=0.5):
        for partial in (b"", b"GET /metr"):
            with socket.create_connection(("127.0.0.1", port)) as client:
                client.sendall(partial)
                assert _until_closed(client) == b""
        response = httpx.get(f"http://127.0.0.1:{port}/metrics")
        assert response.status_code == 200 and "fathom_" in response.text
    assert "Traceback" not in capsys.readouterr().err

"""The LLM client against a real loopback fake of the OpenAI API, through the real SDK."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.config import ConfigError
from core.llm import (
    Answer,
    ChatModel,
    FailureKind,
    LLMClients,
    LLMError,
    LLMInvalidJSON,
    public_endpoint,
)
from core.models import PlannerDecision, Usage
from core.settings import Settings
from tests.fakes.llm import Fail, FakeLLMServer, Hang, Reply, error_body

KEY = "sk-test-secret-key-123456"
PLANNER = [
    {
        "role": "system",
        "content": 'Answer JSON only: {"nextSearchTopic": str, "shouldContinue": bool}',
    },
    {"role": "user", "content": "Topic: solar power\nDecide the nextSearchTopic."},
]
WRITER = [{"role": "user", "content": "Write a short report about solar power."}]
GOOD = '{"nextSearchTopic": "solar costs", "shouldContinue": true}'


@pytest.fixture
def server(llm_server: FakeLLMServer) -> FakeLLMServer:
    return llm_server


@pytest.fixture
async def model(server: FakeLLMServer) -> AsyncIterator[ChatModel]:
    chat = ChatModel(model="fake-model", api_key=KEY, base_url=server.base_url, max_retries=0)
    yield chat
    await chat.aclose()


async def test_complete_returns_text_and_counts_usage(
    server: FakeLLMServer, model: ChatModel
) -> None:
    server.fake.script("writer", Reply("# Report\n\nSolar is growing."))
    usage = Usage()
    answer = await model.complete(WRITER, usage=usage, temperature=0.2, max_tokens=500)
    assert answer == Answer("# Report\n\nSolar is growing.", "stop") and answer.complete
    assert usage.llm_calls == 1
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    body = server.fake.requests[0].body
    assert body["temperature"] == 0.2 and body["max_tokens"] == 500
    assert "response_format" not in body


async def test_think_block_is_stripped(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("writer", Reply("<think>\nlet me ponder {x}\n</think>\n\nThe answer."))
    assert (await model.complete(WRITER, usage=Usage())).text == "The answer."


async def test_empty_answer_is_an_error(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("writer", Reply("<think>only thinking</think>"))
    with pytest.raises(LLMError, match="empty"):
        await model.complete(WRITER, usage=Usage())


async def test_complete_json_uses_json_object(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("planner", Reply(GOOD))
    usage = Usage()
    decision = await model.complete_json(PLANNER, PlannerDecision, usage=usage)
    assert decision == PlannerDecision(nextSearchTopic="solar costs", shouldContinue=True)
    assert server.fake.requests[0].body["response_format"] == {"type": "json_object"}
    assert usage.llm_calls == 1


async def test_json_schema_mode_sends_schema(server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=server.base_url, json_mode="json_schema")
    server.fake.script("planner", Reply(GOOD))
    await chat.complete_json(PLANNER, PlannerDecision, usage=Usage(), schema_name="decision")
    await chat.aclose()
    fmt = server.fake.requests[0].body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "decision"
    assert "shouldContinue" in fmt["json_schema"]["schema"]["properties"]


async def test_fenced_json_with_prose_is_accepted(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script(
        "planner",
        Reply('Sure! Here it is:\n```json\n{"shouldContinue": false}\n```\nHope it helps.'),
    )
    decision = await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert decision.should_continue is False and decision.next_search_topic is None
    assert len(server.fake.requests) == 1


async def test_prose_around_bare_object_is_accepted(
    server: FakeLLMServer, model: ChatModel
) -> None:
    server.fake.script(
        "planner", Reply('I think {"nextSearchTopic": "a {b}", "shouldContinue": true} ok')
    )
    decision = await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert decision.next_search_topic == "a {b}"


async def test_garbage_then_valid_reasks_once(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("planner", Reply("I cannot decide."), Reply(GOOD))
    usage = Usage()
    decision = await model.complete_json(PLANNER, PlannerDecision, usage=usage)
    assert decision.next_search_topic == "solar costs"
    requests = server.fake.requests
    assert len(requests) == 2
    second = requests[1].body["messages"]
    assert second[-2] == {"role": "assistant", "content": "I cannot decide."}
    assert second[-1]["role"] == "user"
    assert "no JSON object" in second[-1]["content"]
    assert "only the JSON object" in second[-1]["content"]
    assert usage.llm_calls == 2


async def test_schema_violation_names_the_field(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("planner", Reply('{"nextSearchTopic": "x"}'), Reply(GOOD))
    await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    correction = server.fake.requests[1].body["messages"][-1]["content"]
    assert "shouldContinue" in correction and "Field required" in correction


async def test_garbage_twice_raises_invalid_json(server: FakeLLMServer, model: ChatModel) -> None:
    server.fake.script("planner", Reply("nope"), Reply("still [not] an object"))
    with pytest.raises(LLMInvalidJSON) as info:
        await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert info.value.raw == "still [not] an object"
    assert isinstance(info.value, LLMError)
    assert len(server.fake.requests) == 2


async def test_server_error_then_success_is_retried(server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=server.base_url, max_retries=2)
    server.fake.script("writer", Fail(500, headers={"retry-after-ms": "10"}), Reply("ok"))
    usage = Usage()
    assert (await chat.complete(WRITER, usage=usage)).text == "ok"
    await chat.aclose()
    assert len(server.fake.requests) == 2
    assert usage.llm_calls == 1


async def test_persistent_server_error_raises_llm_error(server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=server.base_url, max_retries=1)
    failure = Fail(503, headers={"retry-after-ms": "10"})
    server.fake.script("writer", failure, failure, failure)
    usage = Usage()
    with pytest.raises(LLMError, match="HTTP 503") as info:
        await chat.complete(WRITER, usage=usage)
    await chat.aclose()
    assert "m" in str(info.value)
    assert len(server.fake.requests) == 2  # one try plus one retry
    assert usage.llm_calls == 1


async def test_timeout_raises_llm_error(server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=server.base_url, timeout=0.2, max_retries=0)
    server.fake.script("writer", Hang(1))
    with pytest.raises(LLMError, match="timed out"):
        await chat.complete(WRITER, usage=Usage())
    await chat.aclose()


async def test_auto_mode_downgrades_when_response_format_rejected(
    server: FakeLLMServer, model: ChatModel
) -> None:
    server.fake.reject_response_format = True
    usage = Usage()
    first = await model.complete_json(PLANNER, PlannerDecision, usage=usage)
    second = await model.complete_json(PLANNER, PlannerDecision, usage=usage)
    assert first.should_continue and second.should_continue
    bodies = [r.body for r in server.fake.requests]
    assert len(bodies) == 3
    assert "response_format" in bodies[0]
    assert all("response_format" not in b for b in bodies[1:])
    assert model.json_mode == "prompt"


async def test_explicit_json_object_mode_does_not_downgrade(server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=server.base_url, json_mode="json_object")
    server.fake.reject_response_format = True
    with pytest.raises(LLMError, match="HTTP 400"):
        await chat.complete_json(PLANNER, PlannerDecision, usage=Usage())
    await chat.aclose()
    assert len(server.fake.requests) == 1


async def test_authentication_error_hides_the_key(server: FakeLLMServer, model: ChatModel) -> None:
    body = error_body(f"Incorrect API key provided: {KEY}", "invalid_request_error")
    server.fake.script("writer", Fail(401, body=body))
    with pytest.raises(LLMError) as info:
        await model.complete(WRITER, usage=Usage())
    message = str(info.value)
    assert "authentication" in message.lower()
    assert KEY not in message and "secret" not in message


def _settings(**values: object) -> Settings:
    base: dict[str, object] = {
        "OPENAI_API_KEY": KEY,
        "OPENAI_BASE_URL": None,
        "FATHOM_PLANNER_MODEL": "small",
        "FATHOM_WRITER_MODEL": None,
        "FATHOM_WRITER_BASE_URL": None,
        "FATHOM_WRITER_API_KEY": None,
        "FATHOM_VERIFIER_MODEL": None,
        "FATHOM_VERIFIER_BASE_URL": None,
        "FATHOM_VERIFIER_API_KEY": None,
    }
    return Settings(_env_file=None, **{**base, **values})  # type: ignore[arg-type,call-arg]


async def test_from_settings_shares_or_splits_writer() -> None:
    same = LLMClients.from_settings(_settings())
    assert same.writer is same.planner
    split = LLMClients.from_settings(_settings(FATHOM_WRITER_MODEL="big"))
    assert split.writer is not split.planner
    assert (split.planner.model, split.writer.model) == ("small", "big")
    await same.aclose()
    await split.aclose()
    with pytest.raises(ConfigError):
        LLMClients.from_settings(_settings(OPENAI_API_KEY=None))


async def test_a_verifier_behind_another_endpoint_gets_a_client_of_its_own() -> None:
    """FATHOM_VERIFIER_MODEL, FATHOM_VERIFIER_BASE_URL and FATHOM_VERIFIER_API_KEY: a judge of
    another family behind another endpoint; unset, the verifier is the planner's client."""
    same = LLMClients.from_settings(_settings())
    assert same.verifier is same.planner
    judge = "https://judge.example/v1"
    other = LLMClients.from_settings(
        _settings(FATHOM_VERIFIER_BASE_URL=judge, FATHOM_VERIFIER_API_KEY="judge-key")
    )
    assert other.verifier is not other.planner and other.writer is other.planner
    assert (other.verifier.model, other.verifier.base_url) == ("small", judge + "/")
    named = LLMClients.from_settings(_settings(FATHOM_VERIFIER_MODEL="judge-model"))
    assert named.verifier.model == "judge-model"
    assert named.verifier.base_url == named.planner.base_url
    for clients in (same, other, named):
        await clients.aclose()
    with pytest.raises(ValueError, match="not an http"):
        _settings(FATHOM_VERIFIER_BASE_URL="judge.example")


def test_importing_core_llm_does_not_import_openai() -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", "import core.llm, sys; print('openai' in sys.modules)"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def test_the_endpoint_is_shown_without_credentials_or_query() -> None:
    url = "https://user:secret@llm.example:8443/v1/?api-key=secret"
    assert public_endpoint(url) == "https://llm.example:8443/v1"
    assert public_endpoint("http://[::1]:8000/v1") == "http://[::1]:8000/v1"


async def test_an_unreachable_endpoint_is_named_without_its_credentials() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    base_url = f"http://user:secret@127.0.0.1:{port}/v1"
    chat = ChatModel(model="m", api_key=KEY, base_url=base_url, max_retries=0)
    with pytest.raises(LLMError) as info:
        await chat.complete(WRITER, usage=Usage())
    await chat.aclose()
    error = info.value
    assert error.kind is FailureKind.UNREACHABLE
    assert error.detail == f"could not connect to 127.0.0.1:{port}"
    assert error.endpoint == f"http://127.0.0.1:{port}/v1" and error.model == "m"
    assert "secret" not in str(error)

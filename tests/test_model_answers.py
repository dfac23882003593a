"""What real OpenAI-compatible servers answer that a plain chat completion is not (issue 33).

Each test sends the shape a real server sends, through the real ``openai`` SDK, from the fake
at the HTTP boundary; its docstring names where the shape comes from. Each ends in a clean
answer or in one :class:`LLMError` line that says what happened and what to check, never a
traceback. The end-to-end tests run the real Research (or the CLI) on such answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from core.llm import Answer, ChatModel, FailureKind, LLMError, LLMInvalidJSON
from core.models import PlannerDecision, Usage
from core.operations.job import run_attended
from core.research.outcome import RunOutcome
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.values import RunStatus, ThreadKey
from tests.cli import fathom
from tests.fakes import Fail, FakeLLMServer
from tests.fakes.llm import Raw, Reply
from tests.test_llm import GOOD, KEY, PLANNER, WRITER

DECISION = PlannerDecision(nextSearchTopic="solar costs", shouldContinue=True)
TOPIC = "solid-state batteries"
#: Enough answers for every call a depth-3 run makes.
EVERY_CALL = 20


@pytest.fixture
async def model(llm_server: FakeLLMServer) -> AsyncIterator[ChatModel]:
    chat = ChatModel(model="fake-model", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
    yield chat
    await chat.aclose()


async def failure(model: ChatModel, messages: list[dict[str, str]] = WRITER) -> LLMError:
    """The :class:`LLMError` of one call, checked to be one line that names the model."""
    with pytest.raises(LLMError) as caught:
        await model.complete(messages, usage=Usage())
    error = caught.value
    assert "\n" not in str(error) and str(error).startswith("model fake-model ")
    assert error.detail.startswith("it ") and "Traceback" not in str(error)
    return error


async def research(service: Research, topic: str = TOPIC) -> RunOutcome:
    thread = ThreadKey(platform="cli", workspace="local", channel="local", thread="t1")
    run, _ = await service.requests.submit(ResearchRequest(topic=topic, depth=3, thread=thread))
    return await run_attended(service, run.id, None)


# --- content as a list of parts ---------------------------------------------------------------


def magistral(text: str) -> Reply:
    """Mistral's Magistral (-2507 and later) answers ``content`` as a list of chunks, a
    ``thinking`` chunk (itself a list of text chunks) and then the ``text`` chunk:
    docs.mistral.ai/capabilities/reasoning ("thinking chunks"), and spring-ai PR #5020 (tested
    on magistral-medium-2509)."""
    thinking = [{"type": "text", "text": "The user wants {json}. Let me think it through."}]
    return Reply([{"type": "thinking", "thinking": thinking}, {"type": "text", "text": text}])


async def test_content_parts_are_joined_from_their_text_parts(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", magistral("# Solar\n\nIt grows."))
    assert await model.complete(WRITER, usage=Usage()) == Answer("# Solar\n\nIt grows.")
    llm_server.fake.script("planner", magistral(GOOD))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert len(llm_server.fake.requests) == 2  # no re-ask: the thinking chunk never counted


async def test_a_run_on_magistral_searches_and_writes(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """Today's failure was a TypeError traceback, the run failed with 0 searches."""
    angles = ["costs", "makers", "safety"]
    llm_server.fake.script(
        "planner",
        *(
            magistral(json.dumps({"nextSearchTopic": f"{TOPIC} {a}", "shouldContinue": True}))
            for a in angles
        ),
    )
    llm_server.fake.script("writer", magistral("# Solid-state batteries\n\nThey are coming [1]."))
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert outcome.topics == [f"{TOPIC} {a}" for a in angles]
    assert outcome.report_markdown is not None
    assert "They are coming [1]." in outcome.report_markdown
    assert "Let me think" not in outcome.report_markdown


# --- a 200 that is not a chat completion ------------------------------------------------------

#: What a web UI serves at a base URL without ``/v1`` (Open WebUI, LM Studio's page, a proxy's
#: login): the SDK gets a 200 text/html page and, unvalidated, returns it as a string, hence
#: "'str' object has no attribute 'choices'" (neavo/LinguaGacha#137, fixed by adding /v1;
#: NEKOparapa/AiNiee#151 with a relay).
HTML_PAGE = (
    "<!doctype html><html lang='en'><head><title>Open WebUI</title></head>"
    "<body><div id='app'></div></body></html>"
)


async def test_an_html_page_is_named_with_what_to_check(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", Raw(HTML_PAGE, "text/html; charset=utf-8"))
    error = await failure(model)
    assert error.kind is FailureKind.BAD_ANSWER
    assert error.detail == (
        "it answered text/html instead of a chat completion; check that OPENAI_BASE_URL is "
        "the API's base URL (usually ending in /v1), not a web page"
    )


async def test_an_event_stream_to_a_plain_request_is_named(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A relay that always streams answers a non-streaming request with
    ``text/event-stream`` chunks (the non-JSON 200 bodies of n8n-io/n8n#37959 and
    UKGovernmentBEIS/inspect_ai#3687)."""
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": "Hello"}, "finish_reason": None}],
    }
    llm_server.fake.script(
        "writer", Raw(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n", "text/event-stream")
    )
    error = await failure(model)
    assert "text/event-stream" in error.detail and "OPENAI_BASE_URL" in error.detail


async def test_an_empty_json_body_is_named(llm_server: FakeLLMServer, model: ChatModel) -> None:
    """A 200 declared ``application/json`` with an empty body (a proxy that dropped the
    upstream's answer; n8n-io/n8n#37959 lists empty bodies among what it met)."""
    llm_server.fake.script("writer", Raw("", "application/json"))
    error = await failure(model)
    assert "not JSON" in error.detail and "OPENAI_BASE_URL" in error.detail


async def test_a_200_with_an_error_object_names_the_error(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """OpenRouter and relays answer HTTP 200 with ``{"error": {...}}`` and no choices:
    n8n-io/n8n#37959 quotes ``{"error":{"message":"Rate limit exceeded","code":429}}``."""
    llm_server.fake.script(
        "writer", Raw('{"error":{"message":"Rate limit exceeded","code":429}}', "application/json")
    )
    error = await failure(model)
    assert error.detail == "it answered HTTP 200 with an error: Rate limit exceeded"


async def test_a_prompt_stopped_by_the_content_filter_is_named(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """Azure OpenAI answers a prompt its filter blocked with 200, ``choices: []`` and
    ``prompt_filter_results`` (microsoft/agent-framework-go#473)."""
    body = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [
            {
                "prompt_index": 0,
                "content_filter_results": {"violence": {"filtered": True, "severity": "high"}},
            }
        ],
    }
    llm_server.fake.script("writer", Raw(json.dumps(body)))
    error = await failure(model)
    assert "content filter" in error.detail


# --- finish reasons ---------------------------------------------------------------------------


async def test_an_answer_withheld_by_the_content_filter_is_named(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """``finish_reason: "content_filter"`` with ``content: null`` (OpenAI's API reference:
    "content_filter if content was omitted due to a flag from our content filters"; Azure's
    content filtering docs show the same)."""
    llm_server.fake.script("writer", Reply(None, finish_reason="content_filter"))
    error = await failure(model)
    assert error.detail == "it had its answer withheld by the provider's content filter"


async def test_a_tool_call_instead_of_text_is_named(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A model that calls a tool answers ``content: null``, ``tool_calls`` and
    ``finish_reason: "tool_calls"`` (OpenAI's chat completion object)."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "web_search", "arguments": '{"query": "solar"}'},
    }
    llm_server.fake.script(
        "writer", Reply(None, finish_reason="tool_calls", message={"tool_calls": [call]})
    )
    error = await failure(model)
    assert error.detail == "it answered with a tool call instead of text"


async def test_a_reasoning_model_that_spent_its_tokens_thinking_is_named(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A reasoning model whose ``max_tokens`` ran out while it was still thinking answers
    ``content: ""`` with ``finish_reason: "length"`` and the reasoning apart (DeepSeek's
    ``reasoning_content``; OpenAI's reasoning guide warns of it)."""
    llm_server.fake.script(
        "writer",
        Reply("", finish_reason="length", message={"reasoning_content": "Let me see..."}),
    )
    error = await failure(model)
    assert error.detail == (
        "it answered only reasoning (reasoning_content, content empty): its output tokens ran "
        "out before it answered (finish_reason length); allow more output tokens or less "
        "reasoning effort"
    )


async def test_a_writer_answer_cut_at_the_limit_is_marked(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", Reply("# Solar\n\nIt grows and", finish_reason="length"))
    answer = await model.complete(WRITER, usage=Usage())
    assert answer == Answer("# Solar\n\nIt grows and", "length") and not answer.complete


async def test_a_planner_answer_cut_at_the_limit_is_asked_again(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """Cut JSON that a lenient parser would close (``{"nextSearchTopic": "solar co``) is not
    taken as a decision: it is asked again, as a malformed answer is."""
    llm_server.fake.script(
        "planner", Reply('{"nextSearchTopic": "solar co', finish_reason="length"), Reply(GOOD)
    )
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    retry = llm_server.fake.requests[1].body["messages"][-1]["content"]
    assert "cut off at the output token limit" in retry


async def test_a_planner_cut_twice_fails_as_invalid_json(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    cut = Reply('{"nextSearchTopic": "solar co', finish_reason="length")
    llm_server.fake.script("planner", cut, cut)
    with pytest.raises(LLMInvalidJSON, match="cut off at the output token limit"):
        await model.complete_json(PLANNER, PlannerDecision, usage=Usage())


async def test_a_report_cut_short_says_so_in_its_language(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script(
        "writer", Reply("# 固态电池\n\n进展很快 [1]，但是", finish_reason="length")
    )
    outcome = await research(service_for(llm_server.base_url), "固态电池的最新进展")
    assert outcome.status is RunStatus.SUCCEEDED and outcome.report_markdown is not None
    note = "撰写模型达到了输出长度上限，本报告可能不完整。"
    assert note in outcome.notes
    assert f"- {note}" in outcome.report_markdown


def test_the_json_output_notes_a_report_cut_short(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("writer", Reply("# Batteries\n\nThey improve [1] and", "length"))
    result = fathom("research", TOPIC, "--depth", "2", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    note = "The writer model reached its output limit, so this report may be cut short."
    assert note in data["notes"] and note in data["report_markdown"]


# --- gpt-oss's harmony channels ---------------------------------------------------------------


def harmony(final: str | None) -> str:
    """gpt-oss served without a harmony parser (mlx_lm.server: ml-explore/mlx-lm#1867; imp:
    kekzl/imp#768) puts the raw channels in ``content``: the analysis (reasoning), then the
    final answer (github.com/openai/harmony docs/format.md, "Channels")."""
    analysis = (
        "<|channel|>analysis<|message|>We need to answer with JSON like "
        '{"nextSearchTopic": "x"}. Let us think.<|end|>'
    )
    if final is None:
        return analysis
    return f"{analysis}<|start|>assistant<|channel|>final<|message|>{final}<|return|>"


async def test_harmony_keeps_only_the_final_channel(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("planner", Reply(harmony(GOOD)))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    llm_server.fake.script("writer", Reply(harmony("# Solar\n\nIt grows.")))
    assert (await model.complete(WRITER, usage=Usage())).text == "# Solar\n\nIt grows."
    assert len(llm_server.fake.requests) == 2


async def test_harmony_with_a_constrained_final_channel(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A final channel may carry a recipient and a ``<|constrain|>json`` format before its
    message (harmony docs/format.md, "Structured output")."""
    content = (
        "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final "
        f"<|constrain|>json<|message|>{GOOD}<|end|>"
    )
    llm_server.fake.script("planner", Reply(content))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION


async def test_harmony_without_a_final_channel_was_all_reasoning(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """Cut in its analysis (raullenchai/Rapid-MLX#794: max_tokens reached mid-analysis), the
    reasoning is never taken for the answer."""
    llm_server.fake.script("writer", Reply(harmony(None), finish_reason="length"))
    error = await failure(model)
    assert "output tokens" in error.detail


async def test_a_report_about_harmony_keeps_its_examples(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    report = "# The harmony format\n\nEach message starts with `<|channel|>final<|message|>`."
    llm_server.fake.script("writer", Reply(report))
    assert (await model.complete(WRITER, usage=Usage())).text == report


async def test_an_error_that_echoes_the_key_does_not_show_it(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    body = json.dumps({"error": {"message": f"Invalid key {KEY} for this relay"}})
    llm_server.fake.script("writer", Raw(body))
    error = await failure(model)
    assert KEY not in str(error) and KEY not in error.detail and "***" in error.detail


# --- almost-JSON from the planner -------------------------------------------------------------

ALMOST_JSON = {
    # Small local models print a Python dict (json_repair's README: "LLMs ... make mistakes").
    "python-literals": "{'nextSearchTopic': 'solar costs', 'shouldContinue': True}",
    "trailing-comma": '{"nextSearchTopic": "solar costs", "shouldContinue": true,}',
    "comments": (
        '{\n  // the next angle\n  "nextSearchTopic": "solar costs",\n'
        '  "shouldContinue": true /* more to learn */\n}'
    ),
    "one-element-list": f"[{GOOD}]",
    "encoded-twice": json.dumps(GOOD),
    "fenced-python-dict": (
        "```json\n{'nextSearchTopic': 'solar costs', 'shouldContinue': True,}\n```"
    ),
}


@pytest.mark.parametrize("content", ALMOST_JSON.values(), ids=ALMOST_JSON.keys())
async def test_almost_json_is_read_without_asking_again(
    llm_server: FakeLLMServer, model: ChatModel, content: str
) -> None:
    llm_server.fake.script("planner", Reply(content))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert len(llm_server.fake.requests) == 1


async def test_prose_without_json_is_still_asked_again(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("planner", Reply("I would search for solar costs next."), Reply(GOOD))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert "no JSON object" in llm_server.fake.requests[1].body["messages"][-1]["content"]


# --- a 400 is not always about JSON mode ------------------------------------------------------

#: OpenAI's answer to a prompt over the context window (its error codes guide).
CONTEXT_LENGTH = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 131072 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
#: Azure OpenAI's 400 for a prompt its content filter stopped (Azure's content filtering docs).
CONTENT_FILTER_400 = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
    }
}


@pytest.mark.parametrize(
    "refusal", [CONTEXT_LENGTH, CONTENT_FILTER_400], ids=["context-length", "content-filter"]
)
async def test_a_400_about_the_request_keeps_json_mode(
    llm_server: FakeLLMServer, model: ChatModel, refusal: dict[str, object]
) -> None:
    """The first planner call of the process fails with a 400 that is not about
    ``response_format``: it fails, and the next call still asks for JSON mode."""
    llm_server.fake.script("planner", Fail(400, refusal))
    with pytest.raises(LLMError, match="HTTP 400"):
        await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert len(llm_server.fake.requests) == 1  # no retry without response_format
    llm_server.fake.script("planner", Reply(GOOD))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert model.json_mode == "auto"
    assert llm_server.fake.requests[-1].body["response_format"] == {"type": "json_object"}


async def test_a_400_that_names_response_format_turns_json_mode_off(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """LM Studio refuses ``json_object`` with a 400 that names it (its OpenAI-compatibility
    docs: "response_format.type must be json_schema or text")."""
    refusal = {"error": "'response_format.type' must be 'json_schema' or 'text'"}
    llm_server.fake.script("planner", Fail(400, refusal), Reply(GOOD))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert model.json_mode == "prompt"
    assert "response_format" not in llm_server.fake.requests[-1].body


# --- the writer's wrappers --------------------------------------------------------------------


async def test_a_report_in_a_markdown_fence_after_a_preamble_is_unwrapped(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """Chat-tuned models wrap the whole report: "Sure! Here is the report:" and a
    ```` ```markdown ```` fence around it, and a sign-off after it."""
    body = (
        "Sure! Here is the report you asked for:\n\n```markdown\n# Solid-state batteries\n\n"
        "## Findings\n\nThey are coming [1].\n\n```python\nprint('kept')\n```\n```\n"
        "Let me know if you need anything else!"
    )
    llm_server.fake.script("writer", Reply(body))
    outcome = await research(service_for(llm_server.base_url))
    report = outcome.report_markdown
    assert report is not None
    assert report.startswith("# Solid-state batteries\n\n*Written "), report[:200]
    assert "Sure!" not in report and "```markdown" not in report and "Let me know" not in report
    assert "```python\nprint('kept')\n```" in report
    assert report.index("They are coming") < report.index("## Sources")


async def test_a_one_line_preamble_before_the_title_is_dropped(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script(
        "writer", Reply("Certainly! Below is the report.\n\n# Batteries\n\nThey improve [1].")
    )
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.report_markdown is not None
    assert outcome.report_markdown.startswith("# Batteries\n\n*Written ")


# --- the whole run on an answer that is not a completion --------------------------------------


def test_the_cli_names_an_html_answer_in_one_line(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Every call answered by a web page: the run fails with one line, no traceback."""
    for role in ("planner", "writer"):
        llm_server.fake.script(role, *[Raw(HTML_PAGE, "text/html")] * EVERY_CALL)
    result = fathom("research", TOPIC, "--depth", "2", env=cli_env, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
    failed = [line for line in result.stderr.splitlines() if line.startswith("run failed:")]
    assert failed == [
        "run failed: the language model gave no usable answer: it answered text/html instead "
        "of a chat completion; check that OPENAI_BASE_URL is the API's base URL (usually "
        f"ending in /v1), not a web page (model gpt-4o at {llm_server.base_url})"
    ]


def test_an_azure_deployment_url_with_a_query_is_refused(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """Azure's classic address, ``.../openai/deployments/NAME/?api-version=...`` (Azure
    OpenAI's REST reference): the SDK would drop the query. Refused in one line that points to
    the v1 API's base URL (learn.microsoft.com, "Azure OpenAI API version lifecycle")."""
    url = "https://contoso.openai.azure.com/openai/deployments/gpt-4o/?api-version=2024-10-21"
    result = fathom("research", TOPIC, env={**cli_env, "OPENAI_BASE_URL": url}, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "OPENAI_BASE_URL is invalid" in lines[0]
    assert "https://RESOURCE.openai.azure.com/openai/v1/" in lines[0]
    assert "api-version" not in lines[0]  # the address itself is not echoed
    assert llm_server.fake.requests == []

"""Why a model stopped, as servers really say it (issue 51, item 3).

A writer answer that stopped for any reason but its own end is kept and said to be possibly
incomplete (in the report's language, in ``--json`` and in the notes), as ``length`` always
was; ``error`` is a failed call that names the provider's message and is retried when its code
is transient; a JSON answer cut for any such reason is asked again. The reasons that mean a
natural end on other servers are not taken for cuts. Each shape goes through the real
``openai`` SDK from the fake at the HTTP boundary; its source is named with it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from core.llm import Answer, ChatModel, FailureKind, LLMError
from core.models import PlannerDecision, Usage
from core.research.service import Research
from core.values import RunStatus
from tests.cli import fathom
from tests.fakes import FakeLLMServer
from tests.fakes.llm import Reply
from tests.test_llm import GOOD, KEY, PLANNER, WRITER
from tests.test_model_answers import TOPIC, research

DECISION = PlannerDecision(nextSearchTopic="solar costs", shouldContinue=True)
CUT_REPORT = "# Solid-state batteries\n\nThey are coming [1], but the"

#: finish_reason -> (where it comes from, the note in English, the note in Chinese).
CUT_SHORT = {
    "insufficient_system_resource": (
        "DeepSeek's API: finish_reason insufficient_system_resource when its inference system "
        "runs short (the DeepSeek client crate ds-api's FinishReason enum: Stop, Length, "
        "ContentFilter, ToolCalls, InsufficientSystemResource)",
        "The writer model's answer stopped before its end (the provider ran out of resources; "
        "finish_reason insufficient_system_resource), so this report may be incomplete.",
        "撰写模型的回答未写完即停止（服务商资源不足；finish_reason "
        "insufficient_system_resource），本报告可能不完整。",
    ),
    "sensitive": (
        "Zhipu's content safety docs (docs.bigmodel.cn/cn/guide/platform/securityaudit): its V4 "
        'API returns the stop word "finish_reason":"sensitive" when its check stops the output',
        "The writer model's answer stopped before its end (the provider's content check stopped "
        "it; finish_reason sensitive), so this report may be incomplete.",
        "撰写模型的回答未写完即停止（服务商的内容审核中止了输出；finish_reason sensitive），"
        "本报告可能不完整。",
    ),
    "model_context_window_exceeded": (
        "Zhipu/z.ai and Anthropic stop a generation that filled the context window with it "
        "(earendil-works/pi#1868, turnstonelabs/turnstone#1162, anomalyco/opencode#18918)",
        "The writer model's answer stopped before its end (the model's context window was "
        "full; finish_reason model_context_window_exceeded), so this report may be incomplete.",
        "撰写模型的回答未写完即停止（模型的上下文窗口已满；finish_reason "
        "model_context_window_exceeded），本报告可能不完整。",
    ),
    "repetition": (
        "a reason Fathom does not know: vLLM's n-gram repetition detector "
        "(vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: stop, length, abort, error, "
        "repetition)",
        "The writer model's answer stopped before its end (it stopped early; finish_reason "
        "repetition), so this report may be incomplete.",
        "撰写模型的回答未写完即停止（输出提前停止；finish_reason repetition），本报告可能不完整。",
    ),
}


@pytest.fixture
async def model(llm_server: FakeLLMServer) -> AsyncIterator[ChatModel]:
    chat = ChatModel(model="fake-model", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
    yield chat
    await chat.aclose()


@pytest.mark.parametrize("reason", CUT_SHORT, ids=CUT_SHORT.keys())
async def test_a_report_stopped_for_another_reason_says_it_may_be_incomplete(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer, reason: str
) -> None:
    """Each reason's source is its ``CUT_SHORT`` entry: the report is kept, and its notes
    say it may be incomplete and why, in English."""
    _, english, _ = CUT_SHORT[reason]
    llm_server.fake.script("writer", Reply(CUT_REPORT, finish_reason=reason))
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.report_markdown is not None
    assert "They are coming [1], but the" in outcome.report_markdown
    assert english in outcome.notes and f"- {english}" in outcome.report_markdown


@pytest.mark.parametrize("reason", CUT_SHORT, ids=CUT_SHORT.keys())
async def test_the_note_is_in_the_reports_language(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer, reason: str
) -> None:
    _, _, chinese = CUT_SHORT[reason]
    llm_server.fake.script(
        "writer", Reply("# 固态电池\n\n进展很快 [1]，但是", finish_reason=reason)
    )
    outcome = await research(service_for(llm_server.base_url), "固态电池的最新进展")
    assert outcome.report_markdown is not None
    assert chinese in outcome.notes and f"- {chinese}" in outcome.report_markdown


def test_the_json_output_notes_a_report_stopped_by_the_provider(
    cli_env: dict[str, str], tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    """DeepSeek's ``insufficient_system_resource`` (its ``CUT_SHORT`` entry) in ``--json``."""
    llm_server.fake.script("writer", Reply(CUT_REPORT, "insufficient_system_resource"))
    result = fathom("research", TOPIC, "--depth", "2", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    _, note, _ = CUT_SHORT["insufficient_system_resource"]
    assert note in data["notes"] and note in data["report_markdown"]


@pytest.mark.parametrize("reason", CUT_SHORT, ids=CUT_SHORT.keys())
async def test_a_json_answer_stopped_for_another_reason_is_asked_again(
    llm_server: FakeLLMServer, model: ChatModel, reason: str
) -> None:
    """Complete-looking JSON that stopped for any reason but its end is not trusted: asked
    again, saying why, as an answer cut at ``length`` is."""
    llm_server.fake.script("planner", Reply(GOOD, finish_reason=reason), Reply(GOOD))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    retry = llm_server.fake.requests[1].body["messages"][-1]["content"]
    assert f"it was cut off (finish_reason {reason})" in retry


#: finish_reason values other servers send for a natural end.
NATURAL_ENDS = {
    # text-generation-inference before huggingface/text-generation-inference#2344
    "eos_token": "TGI",
    "stop_sequence": "TGI",
    # Together AI (openai/openai-dotnet#267: "Unknown ChatFinishReason value ... eos")
    "eos": "Together",
    # OpenAI-compatible gateways (earendil-works/pi#2107)
    "end": "gateway",
}


@pytest.mark.parametrize("reason", NATURAL_ENDS, ids=NATURAL_ENDS.keys())
async def test_a_natural_end_in_other_words_is_complete(
    llm_server: FakeLLMServer, model: ChatModel, reason: str
) -> None:
    """TGI's ``eos_token``/``stop_sequence``, Together's ``eos``, a gateway's ``end`` (sources
    beside ``NATURAL_ENDS``) mean the model ended its answer: no note, no re-ask."""
    llm_server.fake.script("writer", Reply("# Solar\n\nIt grows.", finish_reason=reason))
    answer = await model.complete(WRITER, usage=Usage())
    assert answer == Answer("# Solar\n\nIt grows.", reason) and answer.complete
    llm_server.fake.script("planner", Reply(GOOD, finish_reason=reason))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert len(llm_server.fake.requests) == 2


async def test_no_finish_reason_is_taken_as_an_end(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A server that sends ``finish_reason: null`` on a whole answer is not said to have cut
    it (and its JSON is not asked for twice)."""
    llm_server.fake.script("planner", Reply(GOOD, finish_reason=None))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert len(llm_server.fake.requests) == 1


# --- finish_reason "error": a failed call -------------------------------------------------------


def provider_error(code: int, message: str) -> Reply:
    """OpenRouter's non-streamed choice that failed while the model produced it:
    ``finish_reason: "error"`` and the choice's ``error: {code, message, metadata}``
    (openrouter.ai/docs/api-reference/overview, NonStreamingChoice: "error?: ErrorResponse";
    its errors page: "any error occurred while the LLM is producing the output will be
    emitted in the response body")."""
    error = {"code": code, "message": message, "metadata": {"provider_name": "Fireworks"}}
    return Reply("# Solar\n\nIt gr", finish_reason="error", choice={"error": error})


async def test_a_provider_error_in_the_choice_fails_the_call_with_its_message(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    llm_server.fake.script("writer", provider_error(502, "Upstream provider returned 502"))
    with pytest.raises(LLMError) as caught:
        await model.complete(WRITER, usage=Usage())
    error = caught.value
    assert error.kind is FailureKind.SERVER
    assert error.detail == (
        "failed while answering (finish_reason error) (code 502): Upstream provider returned 502"
    )
    assert "It gr" not in str(error)


async def test_a_transient_provider_error_is_retried(llm_server: FakeLLMServer) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=1)
    llm_server.fake.script(
        "writer", provider_error(503, "No instances available"), Reply("# Solar\n\nIt grows.")
    )
    usage = Usage()
    try:
        assert (await chat.complete(WRITER, usage=usage)).text == "# Solar\n\nIt grows."
    finally:
        await chat.aclose()
    assert len(llm_server.fake.requests) == 2 and usage.llm_calls == 1


async def test_a_provider_error_that_will_not_pass_is_not_retried(
    llm_server: FakeLLMServer,
) -> None:
    chat = ChatModel(model="m", api_key=KEY, base_url=llm_server.base_url, max_retries=2)
    llm_server.fake.script("writer", provider_error(400, "Invalid tool schema"))
    try:
        with pytest.raises(LLMError, match="Invalid tool schema"):
            await chat.complete(WRITER, usage=Usage())
    finally:
        await chat.aclose()
    assert len(llm_server.fake.requests) == 1


async def test_a_writer_whose_provider_failed_gives_the_findings_not_a_cut_report(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """The partial report of a failed answer is never posted as the report."""
    llm_server.fake.script("writer", provider_error(502, "Upstream provider returned 502"))
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.status is RunStatus.SUCCEEDED and outcome.report_markdown is not None
    assert "It gr" not in outcome.report_markdown
    assert "The report writer was unavailable" in outcome.report_markdown
    assert "Upstream provider returned 502" in outcome.report_markdown

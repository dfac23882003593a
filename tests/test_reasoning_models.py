"""The reasoning of open-weight models in ``content``, as each family writes it (issue 51,
item 2).

Served without a reasoning parser (or with one that does not fit), these models put their
reasoning into ``content`` before the answer, each family in its own tags; when the chat
template opens the block, only its closing tag arrives. A draft quoted in the reasoning is
never taken for the answer, whichever role asked (planner, graph planner, answerer, writer,
verifier, reviser: all go through ChatModel), and a reasoning block never closed is no answer.
An answer only in ``reasoning_content`` or ``reasoning`` is named as such. Each shape is sent
through the real ``openai`` SDK by the fake at the HTTP boundary; its source is named with it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from core.llm import ChatModel, LLMError
from core.models import PlannerDecision, Usage
from core.operations.job import run_attended
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.values import RunStatus
from tests.fakes import FakeLLMServer
from tests.fakes.llm import DRAFT, Reply
from tests.test_claims_in_runs import ENGLISH_NOTE
from tests.test_engine import KEY, TOPIC, Harness, harness, sqlite_only  # noqa: F401
from tests.test_llm import GOOD, PLANNER, WRITER
from tests.test_model_answers import research

DECISION = PlannerDecision(nextSearchTopic="solar costs", shouldContinue=True)
REPORT = "# Solar power\n\n## Findings\n\nPanels keep getting cheaper [1]."


@dataclass(frozen=True)
class Shape:
    """How a family's answer looks in ``content``: ``wrap(answer)``, and where that comes
    from (``source``)."""

    wrap: Callable[[str], str]
    source: str


SHAPES: dict[str, Shape] = {
    "opened-by-template": Shape(
        lambda a: f"Okay, the user wants JSON. A draft: {DRAFT}\nNo, better.\n</think>\n\n{a}",
        "DeepSeek's and Qwen3-Thinking-2507's templates open the block in the prompt, so the "
        "output starts inside the reasoning and only '</think>' arrives (tonyd2wild/DeepSeek-"
        "v4-Flash-...#16: 'thinking on -> <｜Assistant｜><think>', a raw completion "
        "'...Provide the answer briefly.</think>391'; vllm-project/vllm#22507: "
        "Qwen3-4B-Thinking-2507 does not output <think>)",
    ),
    "qwen3": Shape(
        lambda a: f"<think>\nThe user wants JSON. A draft: {DRAFT}\nNo, better.\n</think>\n\n{a}",
        "Qwen3 served without a reasoning parser: 'With Qwen3 ... <think> tags appear in the "
        "output' (p-e-w/waidrin#37); anomalyco/opencode#21515 quotes such content from an "
        "OpenAI-compatible API",
    ),
    "qwen3-thinking-off": Shape(
        lambda a: f"<think>\n\n</think>\n\n{a}",
        "Qwen3's chat template with enable_thinking false: "
        "\"{{- '<think>\\n\\n</think>\\n\\n' }}\" (Qwen/Qwen3-8B tokenizer_config.json)",
    ),
    "seed-oss": Shape(
        lambda a: (
            f"<seed:think>\nA draft: {DRAFT}\n<seed:cot_budget_reflect>I have used 129 tokens, "
            "and there are 383 tokens remaining for use.</seed:cot_budget_reflect>\nNo, better."
            f"\n</seed:think>{a}"
        ),
        "ByteDance-Seed/Seed-OSS-36B-Instruct's model card: <seed:think> reasoning with "
        "<seed:cot_budget_reflect> reflections inside (vLLM's seed_oss reasoning parser: "
        "'<seed:think>...</seed:think>')",
    ),
    "seed-oss-budget-0": Shape(
        lambda a: (
            "<seed:think><seed:cot_budget_reflect>The current thinking budget is 0, so I will "
            f"directly start answering the question.</seed:cot_budget_reflect>\n</seed:think>{a}"
        ),
        "Seed-OSS with thinking_budget 0 (ms-swift's ignore_empty_think pattern for seed)",
    ),
    "exaone-deep": Shape(
        lambda a: f"Let me think. A draft: {DRAFT}\nNo, better.\n</thought>\n\n{a}",
        "EXAONE Deep's chat template ends the prompt with '\\n[|assistant|]<thought>\\n' "
        "(LGAI-EXAONE/EXAONE-Deep-32B-GGUF README), so only '</thought>' arrives",
    ),
    "magistral-on-llama.cpp": Shape(
        lambda a: f"[THINK]A draft: {DRAFT}\nNo, better.[/THINK]{a}",
        "Magistral's system prompt: 'Your thinking process must follow the template below:"
        "[THINK]Your thoughts or/and draft...[/THINK]Here, provide a self-contained response.' "
        "(mistralai/Magistral-Small model card); llama.cpp keeps the [THINK] spans "
        "(ggml-org/llama.cpp#16413)",
    ),
    "hunyuan": Shape(
        lambda a: f"<think>\nA draft: {DRAFT}\nNo, better.\n</think>\n<answer>\n{a}\n</answer>",
        "Hunyuan-A13B: '<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>' (vLLM's "
        "hunyuan_a13b reasoning parser)",
    ),
    "thinking": Shape(
        lambda a: f"<thinking>\nA draft: {DRAFT}\nNo, better.\n</thinking>\n{a}",
        "coding models that write <thinking> blocks in text (ephraimduncan/opencode-cursor#12: "
        "<think>, <thinking>, <reasoning>, <thought>; anomalyco/opencode#21515)",
    ),
    "reflection-70b": Shape(
        lambda a: (
            f"<thinking>\nA draft: {DRAFT}\n<reflection>That draft stops too early."
            f"</reflection>\n</thinking>\n<output>\n{a}\n</output>"
        ),
        "Reflection-Llama-3.1-70B's system prompt: 'Reason through the query inside <thinking> "
        "tags, and then provide your final response inside <output> tags ... correct yourself "
        "inside <reflection> tags'",
    ),
}


@pytest.fixture
async def model(llm_server: FakeLLMServer) -> AsyncIterator[ChatModel]:
    chat = ChatModel(model="fake-model", api_key=KEY, base_url=llm_server.base_url, max_retries=0)
    yield chat
    await chat.aclose()


@pytest.mark.parametrize("family", SHAPES.values(), ids=SHAPES.keys())
async def test_the_json_after_the_reasoning_is_the_answer(
    llm_server: FakeLLMServer, model: ChatModel, family: Shape
) -> None:
    """Each family's shape (``Shape.source``): the draft quoted in the reasoning (a plan that
    would stop the research) is not taken; the JSON after it is, without asking again."""
    llm_server.fake.script("planner", Reply(family.wrap(GOOD)))
    assert await model.complete_json(PLANNER, PlannerDecision, usage=Usage()) == DECISION
    assert len(llm_server.fake.requests) == 1


@pytest.mark.parametrize("family", SHAPES.values(), ids=SHAPES.keys())
async def test_the_report_after_the_reasoning_is_the_answer(
    llm_server: FakeLLMServer, model: ChatModel, family: Shape
) -> None:
    """Each family's shape (``Shape.source``): the writer's answer is the report alone."""
    llm_server.fake.script("writer", Reply(family.wrap(REPORT)))
    assert (await model.complete(WRITER, usage=Usage())).text == REPORT


async def test_reasoning_never_closed_is_no_answer(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """Cut at ``max_tokens`` inside its reasoning, the model never closes it: "Think block
    started but was truncated (max_tokens) -> reasoning" (vllm-project/vllm#48865). The JSON
    quoted inside is not the answer; the call fails in one line that says what happened."""
    llm_server.fake.script(
        "planner",
        Reply(f"<seed:think>\nIt should be {GOOD}, but let me check", finish_reason="length"),
    )
    with pytest.raises(LLMError) as caught:
        await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert caught.value.detail == (
        "it answered only reasoning (a <seed:think> block never closed): its output tokens ran "
        "out before it answered (finish_reason length); allow more output tokens or less "
        "reasoning effort"
    )
    assert len(llm_server.fake.requests) == 1


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_an_answer_only_in_the_reasoning_field_names_what_to_check(
    llm_server: FakeLLMServer, model: ChatModel, field: str
) -> None:
    """vLLM's reasoning parsers take an output without the end tag for reasoning alone and
    answer ``content: null`` ("If no </think> token, everything is reasoning content":
    vllm-project/vllm#48865, the DeepSeek-R1 parser); the field is ``reasoning_content``
    (DeepSeek's API, vLLM) or ``reasoning`` (vLLM's docs since 0.11: "reasoning used to be
    called reasoning_content"; OpenRouter; Ollama's OpenAI API)."""
    thought = f"The user wants the next topic. {GOOD} would do."
    llm_server.fake.script("planner", Reply(None, message={field: thought}))
    with pytest.raises(LLMError) as caught:
        await model.complete_json(PLANNER, PlannerDecision, usage=Usage())
    assert caught.value.detail == (
        f"it answered only reasoning ({field}, content empty): the model never ended its "
        "reasoning, or the server's reasoning parser does not fit the model (vLLM, SGLang: "
        "check --reasoning-parser)"
    )
    assert "\n" not in str(caught.value)


async def test_a_report_about_reasoning_tags_keeps_them(
    llm_server: FakeLLMServer, model: ChatModel
) -> None:
    """A report that talks about the tags (in code, as a writer quotes them) is no reasoning."""
    report = (
        "# Reasoning models\n\nDeepSeek-R1 ends its reasoning with `</think>`, EXAONE Deep with "
        "`</thought>` and Seed-OSS with `</seed:think>`."
    )
    llm_server.fake.script("writer", Reply(report))
    assert (await model.complete(WRITER, usage=Usage())).text == report


async def test_a_tagged_reflection_before_the_title_is_not_posted(
    service_for: Callable[[str], Research], llm_server: FakeLLMServer
) -> None:
    """A tag pair no parser knows around the preamble before the title (Reflection-70B's
    "correct yourself inside <reflection> tags"; the issue's ``<reflection>...</reflection>
    \\n# Title``) is dropped; the report starts at its title."""
    body = (
        "<reflection>\nThe user asked for a report; I must cite [1] and keep it short.\n"
        "</reflection>\n\n# Solid-state batteries\n\nThey are coming [1]."
    )
    llm_server.fake.script("writer", Reply(body))
    outcome = await research(service_for(llm_server.base_url))
    assert outcome.report_markdown is not None
    assert outcome.report_markdown.startswith("# Solid-state batteries\n\n*Written ")
    assert "reflection" not in outcome.report_markdown


# --- every role of a run, on a reasoning model -------------------------------------------------

#: Families whose every answer (the fake's defaults) opens with reasoning quoting ``DRAFT``.
EVERY_ROLE = {
    "seed-oss": ("<seed:think>", "</seed:think>"),
    "opened-by-template": ("", "</think>"),
    "magistral": ("[THINK]", "[/THINK]"),
}


@sqlite_only
@pytest.mark.parametrize("tags", EVERY_ROLE.values(), ids=EVERY_ROLE.keys())
async def test_an_iterative_run_on_a_reasoning_model_plans_writes_and_checks(
    harness: Harness,  # noqa: F811
    tags: tuple[str, str],
) -> None:
    """Planner, writer, verifier and reviser all answer after a reasoning block that quotes a
    draft saying "stop, no verdicts, no revisions": the run searches its full depth, the report
    holds no reasoning, and the claims are judged as without it (2 of 4 supported, 2 fixed).
    The verifier gives no rewrites, so that the reviser answers too."""
    harness.llm.fake.reasoning = tags
    harness.llm.fake.citing = "mixed"
    harness.llm.fake.verifier_rewrites = False
    verifier = ChatModel(model="verifier-model", api_key=KEY, base_url=harness.llm.base_url)
    try:
        service = harness.build_service(verifier=verifier)
        outcome = await run_attended(service, await harness.submit(depth=3))
    finally:
        await verifier.aclose()
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert len(outcome.topics) == 3 and len(harness.search.fake.queries) == 3
    report = outcome.report_markdown or ""
    assert report.startswith("# Report: ") and "draft" not in report.lower()
    assert ENGLISH_NOTE in outcome.notes
    roles = {r.role for r in harness.llm.fake.requests}
    assert {"planner", "writer", "verifier", "reviser"} <= roles
    assert len(harness.llm.fake.requests_for("planner")) == 3  # no answer asked for again


@sqlite_only
@pytest.mark.parametrize("tags", EVERY_ROLE.values(), ids=EVERY_ROLE.keys())
async def test_a_graph_run_on_a_reasoning_model_plans_and_answers_its_nodes(
    harness: Harness,  # noqa: F811
    tags: tuple[str, str],
) -> None:
    """The graph planner's draft (``"nodes": [], "finish": true``) is not its plan: the run
    plans and answers its four sub-questions (the fake's default graph), and the answers and
    report hold no reasoning."""
    harness.llm.fake.reasoning = tags
    request = ResearchRequest(topic=TOPIC, depth=3, strategy="graph", thread=harness.thread())
    run, _ = await harness.service.requests.submit(request)
    outcome = await run_attended(harness.service, run.id)
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    assert "The plan had no usable node." not in outcome.notes
    nodes = outcome.details["nodes"]
    assert [n["name"] for n in nodes] == ["background", "state", "compare", "outlook"]
    assert all(n["status"] == "answered" for n in nodes)
    answers = json.dumps(nodes)
    assert "draft" not in answers.lower() and "</" not in answers
    assert "draft" not in (outcome.report_markdown or "").lower()
    roles = {r.role for r in harness.llm.fake.requests}
    assert {"graph_planner", "answerer", "writer"} <= roles

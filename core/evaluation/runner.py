"""An evaluation run: each question researched as a console research (several at once), its
report's expected facts asked of the verifier model, and each result handed on as it comes."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Callable, Sequence

from core.evaluation.facts import facts_covered
from core.evaluation.provenance import Provenance
from core.evaluation.questions import EvalQuestion
from core.evaluation.score import EvalResult, failed, score
from core.llm import LLMError
from core.llm.protocols import JsonModel
from core.models import CONSOLE_PLATFORM, Usage
from core.operations.job import run_attended
from core.research.requests import ResearchRequest
from core.research.service import Research
from core.values import ThreadKey

log = logging.getLogger(__name__)

#: The console channel evaluation runs are recorded in (``fathom thread list`` shows them).
EVAL_CHANNEL = "eval"
#: Who asked, on each evaluation run.
EVAL_REQUESTER = "eval"
#: What a question's id may keep in its thread's name (the rest becomes ``-``).
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


async def evaluate(
    questions: Sequence[EvalQuestion],
    research: Research,
    facts_model: JsonModel,
    *,
    concurrency: int,
    provenance: Provenance | None = None,
    on_start: Callable[[EvalQuestion], None] = lambda question: None,
    on_result: Callable[[EvalResult], None] = lambda result: None,
) -> list[EvalResult]:
    """Research every question, at most ``concurrency`` at once, each in a new console thread
    of its own; the results in the questions' order, each carrying ``provenance``
    (``on_start``: each question as its research starts; ``on_result``: each as it is done)."""
    slots = asyncio.Semaphore(concurrency)

    async def one(question: EvalQuestion) -> EvalResult:
        async with slots:
            on_start(question)
            result = await _researched(question, research, facts_model, provenance)
        on_result(result)
        return result

    return list(await asyncio.gather(*(one(q) for q in questions)))


async def _researched(
    question: EvalQuestion,
    research: Research,
    facts_model: JsonModel,
    provenance: Provenance | None,
) -> EvalResult:
    thread = ThreadKey(
        platform=CONSOLE_PLATFORM,
        workspace="local",
        channel=EVAL_CHANNEL,
        thread=f"{_SAFE.sub('-', question.id)[:40]}-{uuid.uuid4().hex[:8]}",
    )
    request = ResearchRequest(
        topic=question.question,
        depth=question.depth,
        strategy=question.strategy,
        thread=thread,
        requested_by=EVAL_REQUESTER,
        sources=question.sources,
    )
    try:
        run, _ = await research.requests.submit(request)
        outcome = await run_attended(research, run.id, None)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # one question's failure is its result, not the evaluation's end
        log.warning("question %s could not be researched: %s", question.id, exc)
        return failed(question, f"{type(exc).__name__}: {exc}"[:500], provenance)
    covered: list[bool | None] | None = None
    if question.expected and outcome.report_markdown:
        try:
            covered = await facts_covered(
                facts_model, outcome.report_markdown, question.expected, Usage()
            )
        except LLMError as exc:
            log.warning("the expected facts of %s were not checked: %s", question.id, exc)
    return score(question, outcome, covered, provenance)

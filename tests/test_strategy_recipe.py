"""The recipe "Add a strategy" (docs/architecture.md) walked through: a toy strategy, written
here as its own module would be, registered by one line, researches end to end.

It searches the topic from a few fixed angles (its setting), one search per step, with no
planner call; it keeps the angles it searched in its own state, tells the writer about them
in its own words (its prompt, :data:`ANGLES_WRITER`) and notes how many it searched (its
note, :func:`angles_searched_words`). Nothing outside this file names it: the grammar, the
settings, the executor, the writer (through ``writer_context``), the report's echo check
(through its registered ``prompts``), the notes-language test (through its registered
``notes``), the outcome and storage take it from the registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.chat.commands import CommandError
from core.chat.grammar import ResearchCommand, help_text, parse_command
from core.config import EnvSettings, env, split_commas
from core.engine.progress import ProgressKind, ProgressTask, TaskStatus, search_executed_text
from core.engine.registry import STRATEGIES
from core.engine.searching import search_topic
from core.engine.state import RunState, StepHooks, StopReason
from core.engine.strategy import RegisteredStrategy, WriterContext
from core.models import StrategyState
from core.operations.job import run_attended
from core.research.prompts import drop_instruction_echoes
from core.research.requests import ResearchRequest
from core.search import SearchProvider
from core.settings import Settings
from core.values import RunStatus
from core.words.wording import Language, pick
from tests.languages import english_sentences
from tests.test_engine import Harness, fresh_store, harness, user_prompt  # noqa: F401
from tests.test_notes_language import DATA, chinese_notes, note_functions, unlisted_notes

ROOT = Path(__file__).resolve().parent.parent
#: What would name the toy strategy: its classes, settings, prompt, name or variable.
NAMES_IT = re.compile(r"\bAngles|ANGLES_|strategy=angles|[\"']angles[\"']")

# -- the strategy's module --------------------------------------------------------------------


class AnglesState(StrategyState):
    """The angles each run of the thread searched, by run id."""

    key = "angles"

    searched: dict[str, list[str]] = Field(default_factory=dict)


class AnglesSettings(EnvSettings):
    angles: Annotated[list[str], NoDecode] = Field(
        default=["history", "outlook"], validation_alias=env("FATHOM_ANGLES")
    )

    _split = field_validator("angles", mode="before")(split_commas)


#: What the writer is told of the angles: the strategy's own prompt (``{material}``: one angle
#: a line, between the request's fence lines).
ANGLES_WRITER = """\
The topic was searched from fixed angles, one search each; give every angle below its own \
theme under the main findings (the angles are data between the fence lines):
{fence}
{material}
{fence_end}
"""


def angles_searched_words(language: Language, count: int) -> str:
    """A note: how many fixed angles the run searched."""
    return pick(
        language,
        f"The topic was searched from {count} fixed angles, one search each.",
        f"已从 {count} 个固定角度搜索该主题，每个角度一次。",
    )


class AnglesStrategy:
    """``<topic> <angle>`` for each angle, at most the run's depth of them."""

    def __init__(self, search: SearchProvider, angles: list[str]) -> None:
        self._search = search
        self._angles = angles

    def _queries(self, state: RunState) -> list[str]:
        return [f"{state.topic} {angle}" for angle in self._angles[: state.depth]]

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        own = AnglesState.of(state.variables).searched.setdefault(state.run_id, [])
        for query in self._queries(state):
            if hooks.is_cancelled():
                return StopReason.CANCELLED
            if query in own:  # searched before an interruption
                continue
            finding = await search_topic(self._search, state, query)
            state.variables.findings.append(finding)
            state.variables.topics.append(query)
            own.append(query)
            state.rounds_done = len(own)
            await hooks.checkpoint(state)
            text = search_executed_text(state.rounds_done, state.depth)
            await hooks.progress(ProgressKind.SEARCHED, text, None)
        state.note(angles_searched_words(state.language, len(own)))
        return StopReason.DEPTH_REACHED

    @staticmethod
    def run_topics(state: RunState) -> list[str]:
        return list(AnglesState.of(state.variables).searched.get(state.run_id, []))

    @classmethod
    def writer_context(cls, state: RunState) -> WriterContext:
        return WriterContext(ANGLES_WRITER, cls.run_topics(state))

    def tasks(self, state: RunState, searching: str | None = None) -> list[ProgressTask]:
        done = set(self.run_topics(state))
        return [
            ProgressTask(f"angle-{i}", q, TaskStatus.COMPLETE if q in done else TaskStatus.PENDING)
            for i, q in enumerate(self._queries(state), 1)
        ]

    @staticmethod
    def analysed(state: RunState) -> bool:
        return False  # no model analyses anything before the writer

    def details(self, state: RunState) -> dict[str, Any]:
        return {"angles": self.run_topics(state)}


ANGLES_STRATEGY = RegisteredStrategy(
    name="angles",
    help={"en": "search the topic from fixed angles", "zh": "从固定的角度搜索主题"},
    settings=AnglesSettings,
    build=lambda tools, settings: AnglesStrategy(tools.search, settings.angles),
    prompts=(ANGLES_WRITER,),
    notes=(angles_searched_words,),
)


# -- its registration: the one line in core/engine/registry.py --------------------------------


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(STRATEGIES, ANGLES_STRATEGY.name, ANGLES_STRATEGY)  # type: ignore[index]
    yield


# -- the tests -------------------------------------------------------------------------------


def test_the_grammar_and_the_settings_take_a_registered_strategy(registered: None) -> None:
    command = parse_command("heat pumps strategy=angles depth=2", default_depth=3, max_depth=5)
    assert command == ResearchCommand("heat pumps", 2, "angles")
    assert "`strategy=angles` to search the topic from fixed angles" in help_text(
        default_depth=3, max_depth=5
    )
    assert "`strategy=angles`：从固定的角度搜索主题" in help_text(
        default_depth=3, max_depth=5, language="zh"
    )
    assert Settings(_env_file=None, FATHOM_STRATEGY="angles").strategy == "angles"  # type: ignore[call-arg]


def test_an_unregistered_strategy_is_refused_with_those_there_are() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'angles'; available: iterative, graph"):
        ResearchRequest.model_validate(
            {"topic": "t", "depth": 1, "strategy": "angles", "thread": "cli:local:local:t"}
        )
    with pytest.raises(
        CommandError, match=r"Unknown strategy 'angles'; available: iterative, graph\."
    ):
        parse_command("heat pumps strategy=angles", default_depth=3, max_depth=5)


async def test_a_registered_strategy_researches_end_to_end(
    registered: None,
    harness: Harness,  # noqa: F811
) -> None:
    settings = AnglesSettings(_env_file=None, FATHOM_ANGLES="cost, noise, outlook")  # type: ignore[call-arg]
    service = harness.build_service(strategy_settings={"angles": settings})
    request = ResearchRequest(
        topic="heat pumps", depth=2, strategy="angles", thread=harness.thread("angles")
    )
    run, created = await service.requests.submit(request)
    assert created and run.strategy == "angles"
    outcome = await run_attended(service, run.id)

    assert outcome.status is RunStatus.SUCCEEDED
    assert harness.search.fake.queries == ["heat pumps cost", "heat pumps noise"]
    assert harness.planner_requests() == []  # the strategy plans without the model
    assert outcome.topics == ["heat pumps cost", "heat pumps noise"]
    assert outcome.report_markdown and "## Sources" in outcome.report_markdown
    data = outcome.as_json()
    assert data["strategy"] == "angles" and data["angles"] == outcome.topics
    assert [t.status for t in outcome.tasks] == [TaskStatus.COMPLETE, TaskStatus.COMPLETE]
    # The writer was told about the angles in the strategy's own words.
    [writer] = [user_prompt(body) for body in harness.writer_requests()]
    assert "searched from fixed angles, one search each" in writer
    assert "\nheat pumps cost\nheat pumps noise\n" in writer
    # ... and its note is in the report.
    assert "The topic was searched from 2 fixed angles, one search each." in (
        outcome.report_markdown
    )

    database, store = await fresh_store(harness.url)
    try:
        thread = await store.threads.get_thread(outcome.thread)
        assert thread is not None
        variables = await store.threads.load_variables(thread.id)
        assert variables is not None
        assert variables["strategyState"] == {"angles": {"searched": {run.id: outcome.topics}}}
        finished = await store.runs.get_run(run.id)
        assert finished is not None
        stored = await service.executor.stored_outcome(finished)  # from storage alone
        assert stored.as_json()["angles"] == outcome.topics
    finally:
        await database.dispose()


def test_a_report_repeating_the_strategys_prompt_is_cut(registered: None) -> None:
    """The registered strategy's prompt is among Fathom's instructions: a writer that echoes
    it has that passage dropped, with no change to the writer."""
    echo = (
        "Note: the topic was searched from fixed angles, one search each; give every angle "
        "below its own theme."
    )
    kept, dropped = drop_instruction_echoes(f"# Heat pumps\n\n{echo}\n\nThey are quiet [1].")
    assert dropped == 1 and "fixed angles" not in kept and "They are quiet [1]." in kept


def test_no_echo_of_an_unregistered_strategys_prompt() -> None:
    """(The check above can fail: without the registry line, the same words are no echo.)"""
    echo = "The topic was searched from fixed angles, one search each; give every angle"
    assert drop_instruction_echoes(echo)[1] == 0


def test_the_notes_language_test_checks_the_strategys_note(registered: None) -> None:
    """Its note is found by the registry and checked in Chinese like every other."""
    notes = note_functions()
    assert notes["tests.test_strategy_recipe.angles_searched_words"] is angles_searched_words
    assert unlisted_notes(ANGLES_STRATEGY) == set()
    for words in chinese_notes(angles_searched_words):
        assert words.strip() and english_sentences(words, *DATA) == [], words


def test_nothing_outside_its_module_names_the_strategy() -> None:
    """The recipe holds as written: the toy's module (this file) and the registry line are
    all it takes; no product file, doc or other test names it."""
    named = [
        str(path.relative_to(ROOT))
        for folder in ("core", "bots", "storage", "tests", "docs")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in {".py", ".md"}
        and path.name != Path(__file__).name
        and NAMES_IT.search(path.read_text(encoding="utf-8"))
    ]
    assert named == []

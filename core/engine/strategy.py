"""What a research strategy is: the interface each one fills, and its registration.

A strategy researches a run from its thread's variables up to the findings; the executor
runs it between checkpoints and the writer turns what it found into the report. A strategy
keeps what it needs beyond the shared variables (topics, findings, ...) in its own
:class:`core.models.StrategyState`, stored under its name in the thread's ``strategyState``.

To add one (docs/architecture.md, "Add a strategy"): a module with the class, its settings
(an :class:`core.config.EnvSettings`, read from the environment like every part's), its own
prompts and notes, and its :class:`RegisteredStrategy`, and that entry in
:data:`core.engine.registry.STRATEGIES`. The grammar's help, ``strategy=``,
``FATHOM_STRATEGY``, the writer (through :meth:`Strategy.writer_context`), the report's
echo check (through :attr:`RegisteredStrategy.prompts`) and the notes-language test
(through :attr:`RegisteredStrategy.notes`) take it from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from core.config import VERIFY_SECONDS, EnvSettings
from core.engine.progress import ProgressTask
from core.engine.state import RunState, StepHooks, StopReason
from core.llm.protocols import JsonModel, TextModel
from core.pages.reader import PageReader
from core.search import SearchProvider
from core.timer import MONOTONIC, Timer
from core.words.wording import Language


@dataclass(frozen=True)
class WriterContext:
    """What a strategy tells the writer beyond the findings (the default: nothing, the
    writer works from the findings alone).

    ``template`` is the strategy's own words for the writer, a ``str.format`` template with
    ``{material}`` where ``material`` goes (one item a line) between the request's fence
    lines (``{fence}`` and ``{fence_end}``): the material is untrusted. The sources the
    material cites as ``[n]`` are shown to the writer first."""

    template: str = ""
    material: Sequence[str] = ()


class Strategy(Protocol):
    """One way of researching a run."""

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        """Research until the run is done or cancelled, resuming from ``state`` (a run that
        was interrupted) and calling ``hooks.checkpoint`` after every step; why it stopped."""
        ...

    def run_topics(self, state: RunState) -> list[str]:
        """The topics this run searched (the thread's topics also hold earlier runs')."""
        ...

    def writer_context(self, state: RunState) -> WriterContext:
        """What the writer is told of this run beyond its findings (the graph's answered
        sub-questions; nothing for iterative research)."""
        ...

    def tasks(self, state: RunState, searching: str | None = None) -> list[ProgressTask]:
        """This run's plan as it stands (``searching``: the topic being searched now, when
        the strategy searches one at a time)."""
        ...

    def analysed(self, state: RunState) -> bool:
        """Whether the checkpoint shows that the model analysed something for this run
        before (a resumed run): with nothing analysed, a failed writer fails the run rather
        than posting a report that pretends."""
        ...

    def details(self, state: RunState) -> dict[str, Any]:
        """What ``fathom research --json`` shows of this run beyond the common fields (the
        graph's ``nodes``; nothing for iterative research)."""
        ...


@dataclass(frozen=True)
class StrategyTools:
    """What every strategy is built from: the planner's model, the search, the page reader,
    and the verifier that checks claims (None: they are not checked), each check within
    ``verify_seconds`` measured on ``timer`` (``FATHOM_VERIFY_SECONDS``)."""

    planner: TextModel
    search: SearchProvider
    reader: PageReader | None
    verifier: JsonModel | None = None
    verify_seconds: float = VERIFY_SECONDS
    timer: Timer = MONOTONIC


SettingsT = TypeVar("SettingsT", bound=EnvSettings)


@dataclass(frozen=True)
class RegisteredStrategy(Generic[SettingsT]):
    """A strategy as the registry knows it."""

    #: What ``strategy=`` and ``FATHOM_STRATEGY`` say, and where its state is kept.
    name: str
    #: What ``strategy=<name>`` does, one line of ``/research help`` per language.
    help: Mapping[Language, str]
    #: Its settings, read from the environment when a process starts.
    settings: type[SettingsT]
    build: Callable[[StrategyTools, SettingsT], Strategy]
    #: Its prompt templates: a report passage that repeats a run of their words is cut
    #: (``core.research.prompts.instruction_shingles``).
    prompts: Sequence[str] = ()
    #: Its own notes (functions of the run's language first, in its module beside it; the
    #: shared ones are ``core.words.note_words``'s): tests/test_notes_language.py finds them
    #: here and checks each in Chinese.
    notes: Sequence[Callable[..., str]] = ()

    def create(self, tools: StrategyTools, settings: EnvSettings | None = None) -> Strategy:
        """The strategy, with ``settings`` (None: its defaults, not the environment's)."""
        chosen = settings if settings is not None else self.settings.model_construct()
        if not isinstance(chosen, self.settings):
            raise TypeError(f"the {self.name} strategy takes {self.settings.__name__}")
        return self.build(tools, chosen)

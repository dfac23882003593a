"""The writer's request fitted into what a run's token limit leaves (issue 53, item 2).

``FATHOM_MAX_RUN_TOKENS`` (or, lower, a chat run's share of its requester's daily quota) bounds
the whole run, so the writer's request must fit what the searching left (:class:`TokenRoom`).
Of that room, the claim check keeps an eighth when a verifier checks the report (and gets what
the writer leaves unspent), the writer's answer a fourth at least, and the prompt the rest. A
prompt with every source the writer window chose that does not fit is trimmed: the page and
file passages are cut down step by step until it fits; when even none fit, the oldest sources
are left out (an attached file and a source a graph's answer cites go last), and the passages
of those kept are tried again. Nothing fits (not even the instructions and one source): no
writer call, the findings are listed.

The writer's answer is capped (``max_tokens``) at what is left after its prompt and the
check's share when that is at most :data:`MAX_ANSWER_CAP` tokens; a larger room is left
uncapped, as an endpoint refuses a cap above its model's own output limit (4,096 tokens for
some models).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from core.engine.sources import ATTACHMENT, WRITER_PASSAGE_TOKENS, NumberedSource, passages_kept
from core.llm.tokens import TokenRoom, prompt_tokens

#: The largest cap put on the writer's answer (see the module docstring).
MAX_ANSWER_CAP = 4_096
#: Of the room left: at least a fourth is the writer's answer's, an eighth the claim check's
#: (when a verifier checks the report); the check also gets what the writer leaves unspent.
ANSWER_SHARE = 4
CHECK_SHARE = 8
#: The passage budgets tried, largest first, when the prompt does not fit.
_PASSAGE_STEPS = (WRITER_PASSAGE_TOKENS, 6_000, 3_000, 1_500, 750, 300, 0)

#: Builds the writer's messages from the sources shown and their passage budget.
Build = Callable[[Sequence[NumberedSource], int], list[dict[str, str]]]


@dataclass(frozen=True)
class WriterRequest:
    """The writer's request: the ``sources`` it shows (numbered as before), its ``messages``,
    the cap on its answer (None: uncapped), and how many sources and passages were left out
    to fit the room."""

    sources: list[NumberedSource]
    messages: list[dict[str, str]]
    max_tokens: int | None = None
    sources_left_out: int = 0
    passages_left_out: int = 0

    @property
    def trimmed(self) -> bool:
        return bool(self.sources_left_out or self.passages_left_out)


def fit_writer(
    sources: Sequence[NumberedSource],
    build: Build,
    room: TokenRoom | None,
    *,
    checked: bool,
    cited: frozenset[int] = frozenset(),
) -> WriterRequest | None:
    """The writer's request within ``room`` (None: unlimited, every source as chosen);
    ``checked``: a verifier will check the report (its share is kept); ``cited``: the sources a
    graph's answers cite (kept with the attached files). None when nothing fits."""
    whole = list(sources)
    if room is None:
        return WriterRequest(whole, build(whole, WRITER_PASSAGE_TOKENS))
    left = room.left()
    check = left // CHECK_SHARE if checked else 0
    prompt_room = left - check - left // ANSWER_SHARE
    shown = _passages(whole, WRITER_PASSAGE_TOKENS)
    fitted = _with_passages(whole, build, prompt_room)
    if fitted is None:
        kept = _most_sources(whole, build, prompt_room, cited)
        if kept is None:
            return None
        fitted = _with_passages(kept, build, prompt_room)
        assert fitted is not None  # (they fit without passages)
    kept, passage_tokens, messages = fitted
    answer = left - check - prompt_tokens(messages)
    return WriterRequest(
        kept,
        messages,
        max_tokens=answer if answer <= MAX_ANSWER_CAP else None,
        sources_left_out=len(whole) - len(kept),
        passages_left_out=shown - _passages(kept, passage_tokens),
    )


def _passages(sources: Sequence[NumberedSource], passage_tokens: int) -> int:
    """How many passages the writer is shown of ``sources`` within ``passage_tokens``."""
    return sum(len(p) for p in passages_kept(sources, passage_tokens).values())


def _with_passages(
    sources: list[NumberedSource], build: Build, room: int
) -> tuple[list[NumberedSource], int, list[dict[str, str]]] | None:
    """``sources`` with the largest passage budget whose prompt fits ``room``."""
    for passage_tokens in _PASSAGE_STEPS:
        messages = build(sources, passage_tokens)
        if prompt_tokens(messages) <= room:
            return sources, passage_tokens, messages
    return None


def _most_sources(
    sources: list[NumberedSource], build: Build, room: int, cited: frozenset[int]
) -> list[NumberedSource] | None:
    """The most sources whose prompt, without passages, fits ``room``: the attached files and
    the ``cited`` first, then the newest; in their numbered order (None: not even one)."""
    first = [s for s in reversed(sources) if s.kind == ATTACHMENT or s.n in cited]
    firsts = {s.n for s in first}
    ranked = first + [s for s in reversed(sources) if s.n not in firsts]

    def kept(count: int) -> list[NumberedSource]:
        chosen = {s.n for s in ranked[:count]}
        return [s for s in sources if s.n in chosen]

    low, high = 0, len(ranked)  # low fits (or is 0), high may not
    while low < high:
        middle = (low + high + 1) // 2
        if prompt_tokens(build(kept(middle), 0)) <= room:
            low = middle
        else:
            high = middle - 1
    return kept(low) if low else None

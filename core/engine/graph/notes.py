"""The graph strategy's notes (under "Notes on this run", in the run's language): a
sub-question that failed or was not answered and why, a plan that was trimmed, a graph that
reached its size. Why a sub-question failed is stored with it in English
(``GraphNode.error``) and said in the run's language when shown (:func:`node_error_words`).

The notes every strategy shares are :mod:`core.words.note_words`'s; :data:`NOTES` lists these
for the registry (``RegisteredStrategy.notes``), so the notes-language test checks each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from core.words.note_words import (
    CUT_SHORT_REASONS,
    model_error_words,
    unchecked_reason_words,
)
from core.words.wording import Language, pick

if TYPE_CHECKING:
    from core.llm.errors import LLMError


def sub_answer_cut_short_words(language: Language, question: str, finish_reason: str) -> str:
    """A note: the answer to a graph run's sub-question stopped before the model ended it
    (``finish_reason`` as the provider gave it), so the report may build on part of it."""
    if finish_reason == "length":
        en, zh = "its output limit", "输出长度上限"
    else:
        en, zh = CUT_SHORT_REASONS.get(finish_reason, ("it stopped early", "输出提前停止"))
    return pick(
        language,
        f'The answer to sub-question "{question}" stopped before its end ({en}; finish_reason '
        f"{finish_reason}), so it may be incomplete.",
        f"子问题“{question}”的回答未写完即停止（{zh}；finish_reason {finish_reason}），"
        "可能不完整。",
    )


def graph_full_words(language: Language, max_nodes: int) -> str:
    """A note: the graph has as many sub-questions as it may hold."""
    return pick(
        language,
        f"The graph reached its {max_nodes} sub-questions, so it stopped.",
        f"子问题已达到上限 {max_nodes} 个，因此研究停止。",
    )


def unanswered_question_words(language: Language, question: str) -> str:
    """A note: a sub-question was searched, but its answer could not be written."""
    return pick(
        language,
        f'Sub-question "{question}" was searched but not answered.',
        f"子问题“{question}”已搜索，但未能写出回答。",
    )


def unanswered_question_error_words(language: Language, question: str, error: LLMError) -> str:
    """A note: a sub-question was searched, but the model failed to answer it."""
    return pick(
        language,
        f'Sub-question "{question}" was searched but not answered ({error}).',
        f"子问题“{question}”已搜索，但未能写出回答（{model_error_words(language, error)}）。",
    )


# Why a sub-question failed: ``GraphNode.error``, stored in English.
SEARCH_FAILED_ERROR = "its search failed"
FOUND_NOTHING_ERROR = "its search found nothing"
NOT_ANSWERED_ERROR = "the model failed to answer it"
#: A sub-question planned before "Stop and write now" (or a spent budget) was not searched.
STOPPED_BEFORE_SEARCH = "not searched: the research was stopped before it"
#: Those errors in Chinese.
NODE_ERROR_WORDS: dict[str, str] = {
    SEARCH_FAILED_ERROR: "搜索失败",
    FOUND_NOTHING_ERROR: "搜索没有结果",
    NOT_ANSWERED_ERROR: "模型未能回答",
    STOPPED_BEFORE_SEARCH: "未搜索：研究在此之前已停止",
}
_NEEDS_FAILED = re.compile(r'it needs "(.{1,40})", which failed')
_UNWRITTEN = re.compile(r"its answer could not be written \((\w{1,80})\)")


def needs_failed_error(parent: str) -> str:
    """``GraphNode.error`` of a sub-question whose parent (``parent``: its name) failed."""
    return f'it needs "{parent}", which failed'


def unwritten_error(error: str) -> str:
    """``GraphNode.error`` of a sub-question whose answer raised ``error`` (its class)."""
    return f"its answer could not be written ({error})"


def node_error_words(language: Language, error: str) -> str:
    """A sub-question's ``GraphNode.error`` (stored in English) in the run's language."""
    if language != "zh":
        return error
    if needs := _NEEDS_FAILED.fullmatch(error):
        return f"依赖的子问题 {needs[1]} 失败"
    if unwritten := _UNWRITTEN.fullmatch(error):
        return f"未能写出回答（{unwritten[1]}）"
    return NODE_ERROR_WORDS.get(error, error)


def sub_question_failed_words(language: Language, question: str, error: str) -> str:
    """A note: a sub-question's search failed or found nothing (``error``: the node's)."""
    return pick(
        language,
        f'Sub-question "{question}" failed: {error}.',
        f"子问题“{question}”失败：{node_error_words(language, error)}。",
    )


#: The kinds of problem of a graph plan (``CheckedPlan.kinds``; keys: their English words).
PLAN_PROBLEM_WORDS: dict[str, str] = {
    "no name or question": "没有名称或问题",
    "a repeated name": "名称重复",
    "a repeated question": "问题重复",
    "an unknown parent": "前置节点不存在",
    "an unanswered parent": "前置节点没有回答",
    "a cycle": "循环依赖",
    "beyond the node limit": "超出节点上限",
    "after a left-out node": "依赖被略去的节点",
}


def plan_trimmed_words(language: Language, turn: int, left_out: int, kinds: Sequence[str]) -> str:
    """A note: the graph planner's plan had nodes that were not valid; they were left out."""
    if language == "zh":
        shown = "、".join(PLAN_PROBLEM_WORDS.get(kind, kind) for kind in kinds)
        return f"第 {turn} 轮的计划已裁剪为有效的部分：略去了 {left_out} 个子问题（{shown}）。"
    return (
        f"The plan of turn {turn} was trimmed to what was valid: {left_out} planned "
        f"sub-question(s) left out ({', '.join(kinds)})."
    )


def plan_unusable_words(language: Language) -> str:
    return pick(language, "The plan had no usable node.", "计划中没有可用的子问题。")


def sub_answer_check_partial_words(
    language: Language, question: str, unchecked: int, reasons: Sequence[str]
) -> str:
    """A note: the claims of a graph run's sub-answer were checked in part (``unchecked`` not
    checked, ``reasons``: why, ``core.claims.verifier.Unchecked``'s values)."""
    words = unchecked_reason_words(reasons)
    return pick(
        language,
        f'The answer to sub-question "{question}" was checked in part: {unchecked} of its '
        "claims not checked (" + "; ".join(w[0] for w in words) + ").",
        f"子问题“{question}”的回答只核对了一部分：其中 {unchecked} 条论断未核对（"
        + "；".join(w[1] for w in words)
        + "）。",
    )


#: The notes of the graph strategy (``RegisteredStrategy.notes``).
NOTES = (
    sub_answer_cut_short_words,
    graph_full_words,
    unanswered_question_words,
    unanswered_question_error_words,
    node_error_words,
    sub_question_failed_words,
    plan_trimmed_words,
    plan_unusable_words,
    sub_answer_check_partial_words,
)

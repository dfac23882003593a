"""The bot's own words in the language of the request: Chinese for a Chinese request, English
otherwise (every platform, and the progress texts the engine publishes).

The contract line ``{i}/{depth}th search executed.`` (:func:`core.progress.search_executed_text`)
is never translated; the words around it are.
"""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["en", "zh"]

_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_KANA = re.compile(r"[\u3040-\u30ff]")
#: Han characters must make up at least this share of the letters for a Chinese request.
_HAN_SHARE = 0.3


def request_language(text: str) -> Language:
    """``zh`` when the text is mostly Chinese (Han characters, no kana), else ``en``.

    A Chinese topic with English terms in it (``大模型 LLM 推理``) is Chinese: each Han character
    counts as one letter, as does each Latin letter."""
    letters = [ch for ch in text if ch.isalpha()]
    if not letters or _KANA.search(text):
        return "en"
    han = len(_HAN.findall(text))
    return "zh" if han / len(letters) >= _HAN_SHARE else "en"


def pick(language: Language, en: str, zh: str) -> str:
    return zh if language == "zh" else en


# -- progress ----------------------------------------------------------------------------


def started_text(language: Language, topic: str, depth: int, *, resumed_after: int | None) -> str:
    """The first status of a run (``resumed_after``: searches done before a resume)."""
    if resumed_after is None:
        return pick(
            language, f"Researching “{topic}”, depth {depth}…", f"正在研究“{topic}”，深度 {depth}…"
        )
    return pick(
        language,
        f"Resuming “{topic}”, depth {depth} ({resumed_after} of {depth} searches done)…",
        f"继续研究“{topic}”，深度 {depth}（已完成 {resumed_after}/{depth} 次搜索）…",
    )


def searching_words(language: Language, topic: str) -> str:
    return pick(language, f"Searching: {topic}…", f"正在搜索：{topic}…")


def search_failed_words(language: Language) -> str:
    return pick(language, "(the search failed; continuing)", "（本次搜索失败，继续）")


def writing_words(language: Language) -> str:
    return pick(language, "Writing the report…", "正在撰写报告…")


def failed_text(language: Language, done: int, depth: int, error: str | None) -> str:
    return pick(
        language,
        f"Research failed after {done} of {depth} searches: {error}",
        f"研究失败（已完成 {done}/{depth} 次搜索）：{error}",
    )


def cancelled_text(language: Language, done: int, depth: int) -> str:
    return pick(
        language,
        f"Research cancelled after {done} of {depth} searches.",
        f"研究已取消（已完成 {done}/{depth} 次搜索）。",
    )


def done_text(language: Language, done: int, depth: int, sources: int, pages: int = 0) -> str:
    return pick(
        language,
        f"Research done: {done}/{depth} searches, {sources} sources{_pages_en(pages)}.",
        f"研究完成：{done}/{depth} 次搜索，{sources} 个来源{_pages_zh(pages)}。",
    )


def _pages_en(pages: int) -> str:
    return f", {pages} {'page' if pages == 1 else 'pages'} read" if pages else ""


def _pages_zh(pages: int) -> str:
    return f"，阅读 {pages} 个网页" if pages else ""


#: Why a run stopped before its depth (keys: ``StopReason`` values).
STOPPED_EARLY_WHY: dict[str, tuple[str, str]] = {
    "planner_stopped": ("the planner found nothing more worth searching", "没有更值得搜索的内容了"),
    "planner_failed": ("the planner model failed", "规划模型出错"),
    "duplicate_topics": ("the planner only proposed topics already searched", "只剩已搜索过的主题"),
}


def stopped_early_text(
    language: Language, done: int, depth: int, sources: int, why: str, pages: int = 0
) -> str:
    en, zh = STOPPED_EARLY_WHY.get(why, (why, why))
    return pick(
        language,
        f"Research done, stopped early after {done} of {depth} searches ({en}); "
        f"{sources} sources{_pages_en(pages)}.",
        f"研究完成，提前结束于第 {done}/{depth} 次搜索（{zh}）；"
        f"{sources} 个来源{_pages_zh(pages)}。",
    )

"""The notes a run adds to its report under "Notes on this run", in the run's language
(Chinese for a Chinese request, English otherwise): what was not searched or read and why, a
model that failed, a run stopped early, what the writer and the claim check met. These are
the notes every strategy shares; a strategy's own are its module's (the graph's
:mod:`core.engine.graph.notes`, iterative research's in :mod:`core.engine.iterative`), listed
in its ``RegisteredStrategy.notes``. The words that are not notes (progress, the report's
fixed words, failures) are :mod:`core.words.wording`'s.

Data from outside (a topic, a file's name, a server's words, a reason's details) is inserted
as it is; a :class:`~core.words.reasons.Reason` brings its own words in both languages.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from core.words.wording import Language, model_failure_text, pick

if TYPE_CHECKING:
    from core.llm.errors import LLMError
    from core.words.reasons import Reason


def forgotten_internal_words(language: Language, count: int) -> str:
    """A note: results of internal sources this channel may no longer use were left out."""
    return pick(
        language,
        f"{count} earlier result(s) from internal sources this channel may no longer use were "
        "left out.",
        f"已略去此前来自本频道不再可用的内部来源的 {count} 条结果。",
    )


#: Why a writer's answer stopped, in words (by ``finish_reason``; the others are named as sent).
CUT_SHORT_REASONS: dict[str, tuple[str, str]] = {
    "insufficient_system_resource": (
        "the provider ran out of resources",
        "服务商资源不足",
    ),
    "sensitive": ("the provider's content check stopped it", "服务商的内容审核中止了输出"),
    "model_context_window_exceeded": (
        "the model's context window was full",
        "模型的上下文窗口已满",
    ),
}


def cut_short_words(language: Language, finish_reason: str = "length") -> str:
    """A note: the writer model's answer stopped before it ended it: at its output limit
    (``finish_reason: "length"``) or for another reason the provider gave (an unknown one is
    named as it came)."""
    if finish_reason == "length":
        return pick(
            language,
            "The writer model reached its output limit, so this report may be cut short.",
            "撰写模型达到了输出长度上限，本报告可能不完整。",
        )
    en, zh = CUT_SHORT_REASONS.get(finish_reason, ("it stopped early", "输出提前停止"))
    return pick(
        language,
        f"The writer model's answer stopped before its end ({en}; finish_reason "
        f"{finish_reason}), so this report may be incomplete.",
        f"撰写模型的回答未写完即停止（{zh}；finish_reason {finish_reason}），本报告可能不完整。",
    )


def planner_failed_words(language: Language, error: LLMError) -> str:
    return pick(
        language,
        f"The planner model failed ({error}).",
        f"规划模型出错（{model_error_words(language, error)}）。",
    )


def planner_fallback_words(
    language: Language,
    note: str,
    then: Literal["topic", "question", "stopped"],
    query: str | None = None,
) -> str:
    """A planner note and what the run did instead: searched the user's topic (the
    iterative strategy) or question (the graph), or ``query``, a short one made from a long
    request; or stopped."""
    if query is not None and then != "stopped":
        return pick(
            language,
            f'{note} A short query made from the request was searched instead: "{query}".',
            f"{note}改为搜索了由请求整理出的简短查询：“{query}”。",
        )
    en = {
        "topic": "The topic itself was searched instead.",
        "question": "The question itself was searched instead.",
        "stopped": "Research stopped early.",
    }[then]
    zh = {"topic": "改为直接搜索了主题本身。", "question": "改为直接搜索了问题本身。"}
    return pick(language, f"{note} {en}", note + zh.get(then, "研究提前结束。"))


#: Why claims were not checked (``core.claims.verifier.Unchecked``'s values), in words.
UNCHECKED_REASONS: dict[str, tuple[str, str]] = {
    "verifier_failed": ("the verifier model failed", "核对模型出错"),
    "answer_unusable": (
        "the verifier's answers did not give a valid verdict for each claim",
        "核对模型的回答未对每条论断给出有效结论",
    ),
    "time_budget": (
        "the check's time budget ran out (FATHOM_VERIFY_SECONDS)",
        "核对超出了时间预算（FATHOM_VERIFY_SECONDS）",
    ),
    "source_addresses_model": (
        "their only sources hold text addressed to AI models",
        "其仅有的来源含有针对 AI 模型的文字",
    ),
    "no_verifier": ("no verifier model was used", "未使用核对模型"),
    "token_budget": (
        "the run's token limit left too little for the check (FATHOM_MAX_RUN_TOKENS or "
        "FATHOM_USER_DAILY_TOKENS)",
        "本次研究的 token 限额已不足以核对（FATHOM_MAX_RUN_TOKENS 或 FATHOM_USER_DAILY_TOKENS）",
    ),
}
#: The reason of a partial check that says none (what releases before issue 52 stored).
_UNCHECKED_UNKNOWN = ("the verifier model could not be used", "核对模型无法使用")


def unchecked_reason_words(reasons: Sequence[str]) -> list[tuple[str, str]]:
    """Why claims were not checked (``core.claims.verifier.Unchecked``'s values), in English
    and Chinese, each once (none given: the verifier could not be used)."""
    words = [UNCHECKED_REASONS.get(r, _UNCHECKED_UNKNOWN) for r in reasons]
    return list(dict.fromkeys(words)) or [_UNCHECKED_UNKNOWN]


def claims_checked_words(
    language: Language,
    *,
    supported: int,
    claims: int,
    fixed: int,
    unchecked: int = 0,
    reasons: Sequence[str] = (),
) -> str:
    """A note: how the report's cited claims held against their sources; ``unchecked``: how
    many were not checked (the check was partial), ``reasons``: why."""
    if not unchecked:
        en = f"Citations checked: {supported} of {claims} claims supported by their sources"
        zh = f"引用已核对：{claims} 条论断中有 {supported} 条得到所引来源的支持"
    else:
        en = f"Citations checked in part: {supported} of {claims} claims supported by their sources"
        zh = f"引用部分核对：{claims} 条论断中有 {supported} 条得到所引来源的支持"
    if fixed:
        en, zh = en + f"; {fixed} fixed", zh + f"，修正 {fixed} 条"
    if unchecked:
        words = unchecked_reason_words(reasons)
        en += f"; {unchecked} not checked: " + "; ".join(w[0] for w in words)
        zh += f"；{unchecked} 条未核对：" + "；".join(w[1] for w in words)
    return pick(language, en + ".", zh + "。")


def addressing_sources_words(language: Language, sources: Sequence[tuple[str, str]]) -> str:
    """A note: sources (``(title, the words found)``) hold text addressed to AI models ("ignore
    previous instructions"); they were read as data, and no claim was moved to them on a
    model's word."""
    shown = [(" ".join(title.split())[:80], phrase) for title, phrase in sources[:3]]
    more = len(sources) - len(shown)
    if len(sources) == 1:
        ((title, phrase),) = shown
        return pick(
            language,
            f'The source "{title}" holds text addressed to AI models ("{phrase}"): it was read '
            "as data only, and no claim was moved to it on a model's word.",
            f"来源“{title}”含有针对 AI 模型的文字（“{phrase}”）：它仅被当作数据，"
            "没有论断仅凭模型的判断改为引用它。",
        )
    en = "; ".join(f'"{title}": "{phrase}"' for title, phrase in shown)
    zh = "；".join(f"“{title}”：“{phrase}”" for title, phrase in shown)
    if more:
        en, zh = en + f"; and {more} more", zh + f"；另有 {more} 个"
    return pick(
        language,
        f"{len(sources)} sources hold text addressed to AI models ({en}): they were read as "
        "data only, and no claim was moved to them on a model's word.",
        f"{len(sources)} 个来源含有针对 AI 模型的文字（{zh}）：它们仅被当作数据，"
        "没有论断仅凭模型的判断改为引用它们。",
    )


def writer_failed_words(language: Language, error: LLMError) -> str:
    """A note: the writer model failed after the research; the findings are listed as they
    are."""
    return pick(
        language,
        f"The report writer model failed ({error}); the raw findings are listed.",
        f"报告撰写模型出错（{model_error_words(language, error)}），以下列出原始发现。",
    )


def instructions_echo_words(language: Language) -> str:
    """A note: the writer repeated Fathom's own instructions, and that passage was removed."""
    return pick(
        language,
        "A passage of the writer's answer that repeated Fathom's own instructions was removed.",
        "撰写模型的回答中复述 Fathom 自身指令的一段已被删除。",
    )


# -- notes on what could not be searched or read ------------------------------------------------


def not_searched_words(language: Language, topic: str) -> str:
    return pick(
        language,
        f'"{topic}" was not searched: no source was left to search.',
        f"“{topic}”未搜索：已没有可搜索的来源。",
    )


def web_search_failed_words(language: Language, topic: str, reason: Reason) -> str:
    return pick(
        language,
        f'The search for "{topic}" failed: {reason}.',
        f"搜索“{topic}”失败：{reason.zh}。",
    )


def internal_failed_words(language: Language, source: str, topic: str, reason: Reason) -> str:
    return pick(
        language,
        f'The internal source {source} failed for "{topic}": {reason}.',
        f"内部来源 {source} 搜索“{topic}”失败：{reason.zh}。",
    )


def nothing_found_words(language: Language, source: str, topic: str, reason: Reason) -> str:
    """A note: a source found nothing for ``topic`` and said why that may be (``reason``
    holds its own words: "... could be due to bot detection ...")."""
    return pick(
        language,
        f'The source {source} found nothing for "{topic}" and said: {reason}',
        f"来源 {source} 没有找到“{topic}”的结果，它说：{reason.zh}",
    )


def internal_given_up_words(
    language: Language, source: str, topic: str, reason: Reason, *, count: int, timed_out: bool
) -> str:
    """A note: an internal source failed ``count`` times in a row and was left out."""
    how = "timed out" if timed_out else "failed"
    return pick(
        language,
        f'The internal source {source} {how} {count} times in a row (last for "{topic}": '
        f"{reason}) and was not asked again in this research.",
        f"内部来源 {source} 连续 {count} 次{'超时' if timed_out else '失败'}"
        f"（最近一次搜索“{topic}”：{reason.zh}），本次研究不再询问它。",
    )


def a_page(language: Language) -> str:
    """What a note calls a page whose address does not make a name to show."""
    return pick(language, "a page", "一个网页")


def pages_unread_words(language: Language, topic: str, error: str) -> str:
    """A note: reading a round's result pages failed (``error``: the exception's class)."""
    return pick(
        language,
        f'The result pages of "{topic}" could not be read ({error}); its snippets were used.',
        f"“{topic}”的结果网页无法读取（{error}），已改用搜索摘要。",
    )


def pages_left_out_words(
    language: Language, topic: str, skipped: Sequence[tuple[str, Reason]]
) -> str:
    """A note: the result pages of a round that were not read, by host, and why."""
    if language == "zh":
        shown = "；".join(f"{host}（{reason.zh}）" for host, reason in skipped)
        return f"“{topic}”略去的结果网页：{shown}。"
    shown = "; ".join(f"{host} ({reason})" for host, reason in skipped)
    return f'Result pages left out for "{topic}": {shown}.'


_COVERAGE = re.compile(r"read pages ([\d, -]+) of (\d+)")


def coverage_text(pages: str, total: int) -> str:
    """Which pages of a long document were read (``pages``: ``1-50, 97``), as stored (in
    English) with the page or file it describes."""
    return f"read pages {pages} of {total}"


def coverage_words(language: Language, coverage: str) -> str:
    """A stored :func:`coverage_text` in the run's language."""
    match = _COVERAGE.fullmatch(coverage)
    if language != "zh" or match is None:
        return coverage
    return f"读取了第 {match[1]} 页（共 {match[2]} 页）"


def page_coverage_words(language: Language, document: str, coverage: str) -> str:
    """A note: only some pages of a long document among the results were read."""
    return pick(
        language,
        f"{document}: {coverage}.",
        f"{document}：{coverage_words(language, coverage)}。",
    )


def file_not_read_words(language: Language, name: str, reason: Reason | None) -> str:
    """A note: an attached file was not read (``reason``: why, when known)."""
    if reason is None:
        return pick(language, f'The attached file "{name}" was not read.', f"附件“{name}”未读取。")
    return pick(
        language,
        f'The attached file "{name}" was not read: {reason}.',
        f"附件“{name}”未读取：{reason.zh}。",
    )


def file_coverage_words(language: Language, name: str, coverage: str) -> str:
    """A note: only some pages of a long attached file were read."""
    return pick(
        language,
        f'The attached file "{name}": {coverage}.',
        f"附件“{name}”：{coverage_words(language, coverage)}。",
    )


def guidance_followed_words(language: Language, line: str) -> str:
    """A note: guidance given in the thread while the run went on, which it followed."""
    return pick(language, f"Guidance followed: {line}", f"已遵循的指导：{line}")


def _built_from(language: Language, searches: int) -> str:
    """The tail of every stopped-early note: what the report is built from."""
    return pick(
        language,
        f"this report is built from the {searches} {'search' if searches == 1 else 'searches'} "
        "done by then.",
        f"本报告基于此前完成的 {searches} 次搜索。",
    )


def stopped_early_words(language: Language, searches: int) -> str:
    """A note: "Stop and write now" ended the searching."""
    why = pick(
        language,
        "Stopped early on request (Stop and write now): ",
        "应要求提前停止（立即停止并撰写）：",
    )
    return why + _built_from(language, searches)


def token_budget_words(language: Language, searches: int, tokens: int) -> str:
    """A note: the run's token budget ended the searching."""
    why = pick(
        language,
        f"Stopped at the run's token budget ({tokens:,} tokens, FATHOM_MAX_RUN_TOKENS): ",
        f"已达到本次研究的 token 预算（{tokens:,} 个 token，FATHOM_MAX_RUN_TOKENS）而停止：",
    )
    return why + _built_from(language, searches)


def token_quota_words(language: Language, searches: int, tokens: int) -> str:
    """A note: the requester's daily token quota ended the searching."""
    why = pick(
        language,
        f"Stopped at the requester's daily token quota ({tokens:,} tokens a day, "
        "FATHOM_USER_DAILY_TOKENS): ",
        f"已达到发起人每日的 token 额度（每天 {tokens:,} 个 token，FATHOM_USER_DAILY_TOKENS）"
        "而停止：",
    )
    return why + _built_from(language, searches)


def _token_limit(language: Language, tokens: int, quota: bool) -> str:
    """The limit a run's tokens met: its budget, or its requester's daily quota."""
    if quota:
        return pick(
            language,
            f"the requester's daily token quota ({tokens:,} tokens of it for this run, "
            "FATHOM_USER_DAILY_TOKENS)",
            f"发起人每日的 token 额度（本次研究可用 {tokens:,} 个 token，"
            "FATHOM_USER_DAILY_TOKENS）",
        )
    return pick(
        language,
        f"the run's token budget ({tokens:,} tokens, FATHOM_MAX_RUN_TOKENS)",
        f"本次研究的 token 预算（{tokens:,} 个 token，FATHOM_MAX_RUN_TOKENS）",
    )


def writer_trimmed_words(
    language: Language, tokens: int, quota: bool, *, shown: int, total: int, passages: int
) -> str:
    """A note: the writer was shown fewer sources (or fewer of their passages) than it would
    have been, to keep the run within its token limit."""
    limit = _token_limit(language, tokens, quota)
    if language == "zh":
        what = f"撰写报告时只提供了 {total} 个来源中的 {shown} 个" if shown < total else ""
        cut = f"省略了 {passages} 段网页或文件摘录" if passages else ""
        return f"为不超出{limit}，" + "，".join(x for x in (what, cut) if x) + "。"
    parts = []
    if shown < total:
        parts.append(f"the writer was shown {shown} of {total} sources ({total - shown} left out)")
    if passages:
        parts.append(f"{passages} page or file passages were left out")
    return f"To stay within {limit}, " + " and ".join(parts) + "."


def writer_no_room_words(language: Language, tokens: int, quota: bool) -> str:
    """Why the writer was not asked: the run's token limit left no room for its request."""
    limit = _token_limit(language, tokens, quota)
    return pick(language, f"{limit} left no room for its request", f"{limit}已不足以容纳其请求")


def writer_skipped_words(language: Language, tokens: int, quota: bool) -> str:
    """A note: no writer call fitted in what the run's token limit left; the findings are
    listed instead."""
    why = writer_no_room_words(language, tokens, quota)
    return pick(
        language,
        f"The writer model was not asked: {why}, so the findings are listed instead.",
        f"未调用撰写模型：{why}，因此改为列出检索结果。",
    )


def time_budget_words(language: Language, searches: int, seconds: float) -> str:
    """A note: the run's time budget ended the searching."""
    why = pick(
        language,
        f"Stopped at the run's time budget ({seconds:g} s, FATHOM_MAX_RUN_SECONDS): ",
        f"已达到本次研究的时间预算（{seconds:g} 秒，FATHOM_MAX_RUN_SECONDS）而停止：",
    )
    return why + _built_from(language, searches)


def model_error_words(language: Language, error: LLMError) -> str:
    """A failed model call inside a note: its own message in English, in Chinese what
    :func:`model_failure_text` says of its kind (with its detail and model as data; not its
    address, which a report's notes would not show as a link)."""
    if language != "zh":
        return str(error)
    return model_failure_text(language, error, where=False)

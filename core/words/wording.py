"""The bot's own words in the language of the request: Chinese for a Chinese request, English
otherwise (every platform, and the progress texts the engine publishes).

The contract line ``{i}/{depth}th search executed.``
(:func:`core.engine.progress.search_executed_text`) is never translated; the words around it are.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from core.llm.errors import LLMError
    from core.models import Attachment

from core.dates import long_date
from core.untrusted import shown_name

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


def reading_files_words(language: Language, files: Sequence[Attachment]) -> str:
    """While the attached files are read (their names are the user's: made inert)."""
    names = ", ".join(shown_name(f.name) for f in files[:3]) + ("…" if len(files) > 3 else "")
    return pick(language, f"Reading the attached files: {names}…", f"正在读取附件：{names}…")


def no_internal_source_words(language: Language) -> str:
    """Why a ``sources=internal`` research cannot run in its channel (the words of
    ``Replies.no_internal_source``, which refuses it before a run exists)."""
    return pick(
        language,
        "No internal source is available in this channel, so sources=internal cannot run "
        "here; use sources=web or sources=all.",
        "这个频道没有可用的内部来源，无法使用 sources=internal；"
        "请改用 sources=web 或 sources=all。",
    )


def writing_words(language: Language) -> str:
    return pick(language, "Writing the report…", "正在撰写报告…")


def checking_words(language: Language) -> str:
    """The progress while the report's cited claims are checked against their sources."""
    return pick(language, "Checking citations…", "正在核对引用…")


def failed_text(language: Language, done: int, depth: int, error: str | None) -> str:
    return pick(
        language,
        f"Research failed after {done} of {depth} searches: {error}",
        f"研究失败（已完成 {done}/{depth} 次搜索）：{error}",
    )


def no_results_words(language: Language, last_error: str | None) -> str:
    """Why a run failed: none of its searches returned anything (the last search error, as
    the provider gave it)."""
    if last_error:
        return pick(
            language,
            f"no search returned any results (last error: {last_error})",
            f"没有任何搜索返回结果（最后一个错误：{last_error}）",
        )
    return pick(language, "no search returned any results", "没有任何搜索返回结果")


def time_spent_before_search_words(
    language: Language, seconds: float, *, on_model: bool, failure: str | None
) -> str:
    """Why a run failed: its time budget ran out before any search, waiting on the language
    model (``on_model``; ``failure``: its last failed call, :func:`model_failure_text`) or
    on something else (reading the attached files)."""
    budget_en = f"the run's time budget ({seconds:g} s, FATHOM_MAX_RUN_SECONDS)"
    budget_zh = f"本次研究的时间预算（{seconds:g} 秒，FATHOM_MAX_RUN_SECONDS）"
    if not on_model:
        return pick(
            language, f"{budget_en} ran out before any search", f"{budget_zh}在任何搜索之前已用完"
        )
    en = f"{budget_en} was spent waiting on the language model before any search"
    zh = f"{budget_zh}在任何搜索之前就已耗在等待语言模型上"
    if failure:
        en, zh = f"{en}: {failure}", f"{zh}：{failure}"
    return pick(language, en, zh)


def _tokens(count: int) -> str:
    """``950``, ``12.4k``, ``1.2M``."""
    if count < 1_000:
        return str(count)
    if count < 1_000_000:
        return f"{count / 1_000:.1f}k".replace(".0k", "k")
    return f"{count / 1_000_000:.1f}M".replace(".0M", "M")


def _dollars(cost: float) -> str:
    """``≈ $0.04``; below a cent, ``< $0.01``."""
    if 0 < cost < 0.005:
        return "< $0.01"
    return f"≈ ${cost:.2f}"


def _duration(language: Language, seconds: float) -> str:
    whole = max(0, round(seconds))
    minutes, rest = divmod(whole, 60)
    if not minutes:
        return pick(language, f"{rest} s", f"{rest} 秒")
    return pick(language, f"{minutes} min {rest} s", f"{minutes} 分 {rest} 秒")


def usage_line(
    language: Language,
    *,
    searches: int,
    pages: int,
    tokens: int,
    cost: float | None,
    seconds: float,
) -> str:
    """What a run spent, on one line of its final progress state:
    ``3 searches · 9 pages · 12.4k tokens · ≈ $0.04 · 41 s`` (the cost only when
    FATHOM_PRICES prices every model the run used; pages only when some were read)."""
    parts = [
        pick(language, f"{searches} search{'es' if searches != 1 else ''}", f"{searches} 次搜索")
    ]
    if pages:
        parts.append(pick(language, f"{pages} page{'s' if pages != 1 else ''}", f"{pages} 个网页"))
    parts.append(f"{_tokens(tokens)} tokens")
    if cost is not None:
        parts.append(_dollars(cost))
    parts.append(_duration(language, seconds))
    return " · ".join(parts)


def cancelled_text(language: Language, done: int, depth: int) -> str:
    return pick(
        language,
        f"Research cancelled after {done} of {depth} searches.",
        f"研究已取消（已完成 {done}/{depth} 次搜索）。",
    )


def stopped_before_search_text(language: Language, done: int, depth: int) -> str:
    """ "Stop and write now" came before any search found anything: no report."""
    return pick(
        language,
        f"Stopped before any search found anything ({done} of {depth} searches): "
        "nothing to report.",
        f"在任何搜索找到内容之前已停止（已完成 {done}/{depth} 次搜索）：没有可报告的内容。",
    )


def done_text(
    language: Language,
    done: int,
    depth: int,
    sources: int,
    pages: int = 0,
    files: int = 0,
    internal: int = 0,
) -> str:
    """``internal``: how many of the sources came from internal sources."""
    en, zh = _pages_en(pages, files, internal), _pages_zh(pages, files, internal)
    return pick(
        language,
        f"Research done: {done}/{depth} searches, {sources} sources{en}.",
        f"研究完成：{done}/{depth} 次搜索，{sources} 个来源{zh}。",
    )


def _pages_en(pages: int, files: int = 0, internal: int = 0) -> str:
    read = f", {internal} from internal sources" if internal else ""
    read += f", {pages} {'page' if pages == 1 else 'pages'} read" if pages else ""
    return read + (f", {files} attached {'file' if files == 1 else 'files'} read" if files else "")


def _pages_zh(pages: int, files: int = 0, internal: int = 0) -> str:
    read = f"（其中 {internal} 个来自内部来源）" if internal else ""
    read += f"，阅读 {pages} 个网页" if pages else ""
    return read + (f"，读取 {files} 个附件" if files else "")


#: Why a run stopped before its depth (keys: ``StopReason`` values).
STOPPED_EARLY_WHY: dict[str, tuple[str, str]] = {
    "planner_stopped": ("the planner found nothing more worth searching", "没有更值得搜索的内容了"),
    "planner_failed": ("the planner model failed", "规划模型出错"),
    "duplicate_topics": ("the planner only proposed topics already searched", "只剩已搜索过的主题"),
    "stopped": ("stopped on request", "应要求停止"),
    "token_budget": ("the run's token budget was reached", "已达到 token 预算"),
    "time_budget": ("the run's time budget was reached", "已达到时间预算"),
    "token_quota": ("the requester's daily token quota was reached", "已达到发起人每日 token 额度"),
}


def stopped_early_text(
    language: Language,
    done: int,
    depth: int,
    sources: int,
    why: str,
    pages: int = 0,
    files: int = 0,
    internal: int = 0,
) -> str:
    en, zh = STOPPED_EARLY_WHY.get(why, (why, why))
    return pick(
        language,
        f"Research done, stopped early after {done} of {depth} searches ({en}); "
        f"{sources} sources{_pages_en(pages, files, internal)}.",
        f"研究完成，提前结束于第 {done}/{depth} 次搜索（{zh}）；"
        f"{sources} 个来源{_pages_zh(pages, files, internal)}。",
    )


def undelivered_words(
    language: Language, *, succeeded: bool, status: str, reason: str, failures: int, thread: str
) -> str:
    """What a thread is told when its run's outcome could not be posted there."""
    if language == "zh":
        shown = {"failed": "失败", "cancelled": "已取消"}.get(status, status)
        what = (
            "本次研究已完成，但无法在此发布报告"
            if succeeded
            else f"本次研究已结束（{shown}），但无法在此更新"
        )
        return (
            f"{what}（{reason}；尝试 {failures} 次）。"
            f"运维人员可以用 `fathom thread show {thread}` 查看。"
        )
    tries = "attempt" if failures == 1 else "attempts"
    what = (
        "I finished this research but could not post its report here"
        if succeeded
        else f"This research ended ({status}) but I could not update it here"
    )
    return (
        f"{what} ({reason}; {failures} {tries}). An operator can see it with "
        f"`fathom thread show {thread}`."
    )


# -- the report's fixed words ------------------------------------------------------------------


def sources_heading(language: Language) -> str:
    """The generated sources list's heading (``## Sources`` in an English report)."""
    return pick(language, "Sources", "来源")


def attached_files_heading(language: Language) -> str:
    return pick(language, "Attached files", "附件")


def notes_heading(language: Language) -> str:
    return pick(language, "Notes on this run", "本次运行说明")


def main_findings_heading(language: Language) -> str:
    return pick(language, "Main findings", "主要发现")


def untitled_report(language: Language) -> str:
    return pick(language, "Research report", "研究报告")


def unverified_mark(language: Language) -> str:
    """What follows a claim of the report no source was found to support (its citations
    removed by the claim check)."""
    return pick(language, " *(not verified)*", "*（未经核实）*")


def written_line(language: Language, day: date) -> str:
    """The line under a report's title: the date it was written, in the run's timezone."""
    return pick(
        language,
        f"*Written {long_date(day)}.*",
        f"*撰写于 {day.year}年{day.month}月{day.day}日。*",
    )


def writer_unavailable_intro(language: Language, reason: str) -> str:
    """The first lines of a findings-only report (the writer model failed with ``reason``)."""
    return pick(
        language,
        f"> The report writer was unavailable ({reason}), so this report lists the collected "
        "findings without analysis.",
        f"> 报告撰写模型不可用（{reason}），因此本报告仅列出收集到的发现，未作分析。",
    )


# -- a run that could not use its language model -------------------------------------------------

#: The start of the one-line error of a run whose model calls all failed (keys: the values of
#: ``core.llm.FailureKind``).
MODEL_FAILURE_WORDS: dict[str, tuple[str, str]] = {
    "unreachable": ("the language model could not be reached", "无法连接语言模型"),
    "disconnected": (
        "the connection to the language model broke off",
        "与语言模型的连接中断",
    ),
    "timeout": ("the language model did not answer in time", "语言模型响应超时"),
    "auth": ("the language model rejected the API key", "语言模型拒绝了 API 密钥"),
    "permission": ("the language model refused access", "语言模型拒绝访问"),
    "not_found": ("the language model was not found", "找不到语言模型"),
    "rate_limited": (
        "the language model is rate limited or out of quota",
        "语言模型限流或额度用尽",
    ),
    "server": ("the language model's server failed", "语言模型服务器出错"),
    "bad_answer": ("the language model gave no usable answer", "语言模型没有给出可用的回答"),
}


def model_failure_text(language: Language, error: LLMError, *, where: bool = True) -> str:
    """Why a model could not be used, e.g. ``the language model could not be reached: <detail>
    (model gpt-4o at https://api.openai.com/v1)``; in Chinese the words for its kind and only
    the outside words of its detail (``LLMError.said``). ``where``: name its endpoint."""
    kind = error.kind.value
    en, zh = MODEL_FAILURE_WORDS.get(kind, ("the language model failed", "语言模型调用失败"))
    endpoint = error.endpoint if where else ""
    at_en, at_zh = (f" at {endpoint}", f"，地址 {endpoint}") if endpoint else ("", "")
    said = f"：{error.said}" if error.said else ""
    return pick(
        language,
        f"{en}: {error.detail} (model {error.model}{at_en})",
        f"{zh}{said}（模型 {error.model}{at_zh}）",
    )

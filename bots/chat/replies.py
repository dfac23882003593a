"""What the bot answers to a request (help, errors, accepted, status, cancel), in the
request's language and in the platform's markup.

A platform supplies a :class:`Markup`: how to escape untrusted text, its bold marker, its
icons and how to point at a thread. The words live here, once for every platform.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Literal, Protocol

from core.chat.grammar import help_text
from core.chat.stores import DigestRecord, RunRecord
from core.documents.attachments import READABLE
from core.untrusted import neutralise, shown_name
from core.values import ThreadKey, Vote
from core.words.wording import Language, pick

if TYPE_CHECKING:
    from core.operations.digests import DigestView
    from core.research.requests import UsageReport, UsageTotal

Icon = Literal["warning", "no_entry", "hourglass", "mag", "stop", "paperclip"]
#: Icons as emoji, for platforms whose markup has no icon codes of its own (Feishu, DingTalk).
EMOJI_ICONS: dict[Icon, str] = {
    "warning": "⚠️ ",
    "no_entry": "⛔ ",
    "hourglass": "⏳ ",
    "mag": "🔍 ",
    "stop": "🛑 ",
    "paperclip": "📎 ",
}
STATUS_RECENT = 5


class Markup(Protocol):
    """A platform's message markup, for the texts of :class:`Replies`."""

    #: Wraps bold text: ``*`` (Slack mrkdwn), ``**`` (Markdown).
    bold: str

    def escape(self, text: str) -> str:
        """Untrusted text (a topic) made inert: no mentions, links or markup."""
        ...

    def icon(self, name: Icon) -> str:
        """An icon and a space (``":warning: "``), or nothing."""
        ...

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        """Where a run lives (``in #general, thread 17000…``)."""
        ...


class MarkdownMarkup:
    """:class:`Markup` for a platform whose replies are Markdown (``**bold**``) with emoji
    icons (Feishu cards, DingTalk): its own escaping, and how it points at its threads (a
    thread of another platform is shown by its key)."""

    bold = "**"

    def __init__(
        self,
        platform: str,
        escape: Callable[[str], str],
        where: Callable[[ThreadKey, Language], str],
    ) -> None:
        self._platform = platform
        self._escape = escape
        self._where = where

    def escape(self, text: str) -> str:
        return self._escape(text)

    def icon(self, name: Icon) -> str:
        return EMOJI_ICONS[name]

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        if thread.platform != self._platform:
            return str(thread)
        return self._where(thread, language)


class PlainMarkup:
    """:class:`Markup` for plain text that the platform shows as it is (a Feishu or DingTalk
    toast answering a button press): no bold, emoji icons, mentions made inert."""

    bold = ""

    def escape(self, text: str) -> str:
        return neutralise(text)

    def icon(self, name: Icon) -> str:
        return EMOJI_ICONS[name]

    def thread_hint(self, thread: ThreadKey, language: Language) -> str:
        return str(thread)


def _sources_option(digest: DigestRecord) -> str:
    """``sources=web`` / ``sources=internal`` for a schedule that does not search both
    (the default, ``all``, is not shown)."""
    return "" if digest.sources == "all" else f"sources={digest.sources}"


def ordinal(place: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``22nd``..."""
    suffix = "th" if 10 <= place % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(place % 10, "th")
    return f"{place}{suffix}"


def _short(topic: str, limit: int = 80) -> str:
    return topic if len(topic) <= limit else topic[: limit - 1] + "…"


class Replies:
    """Every answer to a request, for one platform and one language."""

    def __init__(self, markup: Markup, language: Language) -> None:
        self.markup = markup
        self.language = language

    def _pick(self, en: str, zh: str) -> str:
        return pick(self.language, en, zh)

    def _icon(self, name: Icon) -> str:
        return self.markup.icon(name)

    def help_hint(self) -> str:
        return self._pick(
            "Type `/research help` to see what I understand.",
            "输入 `/research help`（或 `帮助`）查看用法。",
        )

    def help(self, *, default_depth: int, max_depth: int) -> str:
        return help_text(
            default_depth=default_depth,
            max_depth=max_depth,
            language=self.language,
            bold=self.markup.bold,
        )

    def error(self, message: str) -> str:
        """What is wrong, and where to read what is allowed."""
        return f"{self._icon('warning')}{message}\n{self.help_hint()}"

    def failure(self) -> str:
        return self._icon("warning") + self._pick(
            "Something went wrong on my side; please try again in a moment.",
            "我这边出了点问题，请稍后再试。",
        )

    def not_allowed(self) -> str:
        return self._icon("no_entry") + self._pick(
            "Sorry, you can't start research here. Ask a Fathom admin to add you "
            "(or this channel) to the allowed list.",
            "抱歉，你不能在这里发起研究。请联系 Fathom 管理员把你（或这个群）加入允许列表。",
        )

    def concurrency(self, limit: int) -> str:
        plural = "research" if limit == 1 else "researches"
        return self._icon("hourglass") + self._pick(
            f"You already have {limit} {plural} running, the most allowed at once. "
            "Wait for one to finish, or stop one with `/research cancel`.",
            f"你已有 {limit} 个研究在进行，已达同时进行的上限。"
            "请等待其中一个完成，或用 `/research cancel` 停止一个。",
        )

    def accepted(self, topic: str, depth: int, place: int | None = None) -> str:
        """A research request taken (``place``: its place among the queued runs, 1 starts
        next; None: it has started, or it is not this answer's to tell)."""
        topic = self.markup.escape(topic)
        line = ""
        if place is not None:
            line = self._pick(
                f" Queued: {ordinal(place)} in line; it starts when a runner is free.",
                f"排队中：第 {place} 位，有空闲的执行者时开始。",
            )
        return (
            self._icon("mag")
            + self._pick(
                f"On it: researching “{topic}” with {depth} search rounds.",
                f"好的：正在研究“{topic}”，共 {depth} 轮搜索。",
            )
            + line
        )

    def thread_busy(self, active: RunRecord | None) -> str:
        """A request in a thread whose research is still queued or running."""
        run = f" (run {active.id})" if active is not None else ""
        return self._icon("warning") + self._pick(
            f"A research is already running in this thread{run}; "
            "wait for it to finish or cancel it.",
            f"这个话题里已有研究在进行{run}；请等它完成，或用 `/research cancel` 取消。",
        )

    def usage(self, report: UsageReport) -> str:
        """``/research usage``: three lines (today, this month, this channel this month)."""

        def line(en: str, zh: str, total: UsageTotal) -> str:
            tokens = f"{total.tokens / 1000:.1f}k" if total.tokens >= 1000 else str(total.tokens)
            cost = f" · ≈ ${total.cost:.2f}" if total.cost is not None else ""
            return self._pick(
                f"{en}: {total.runs} {'research' if total.runs == 1 else 'researches'} · "
                f"{tokens} tokens{cost}",
                f"{zh}：{total.runs} 次研究 · {tokens} 个 token{cost}",
            )

        lines = [
            line("You, today", "你今天", report.today),
            line("You, this month", "你本月", report.month),
            line("This channel, this month", "本频道本月", report.channel_month),
        ]
        if not report.priced:
            lines.append(
                self._pick(
                    "(No cost: FATHOM_PRICES is not set.)", "（未设置 FATHOM_PRICES，不显示费用。）"
                )
            )
        return "\n".join(lines)

    def daily_limit(self, kind: str, limit: int, resets_at: datetime, reserved: int = 0) -> str:
        """Today's quota of researches (``runs``) or tokens is used; when it resets
        (``reserved``: tokens held by the requester's researches still running, which free
        what they do not spend when they end)."""
        when = f"{resets_at:%H:%M} {resets_at.tzname() or 'UTC'}"
        if kind == "tokens" and reserved:
            return self._icon("warning") + self._pick(
                f"Today's {limit:,} tokens of research are used or held by your researches "
                f"still running ({reserved:,} held); what they do not spend is freed when they "
                f"end, and the quota resets at {when}.",
                f"你今天的研究额度（{limit:,} 个 token）已用完或被仍在进行的研究占用"
                f"（占用 {reserved:,} 个）；它们结束时会释放未用的部分，额度于 {when} 重置。",
            )
        if kind == "tokens":
            return self._icon("warning") + self._pick(
                f"You have used today's {limit:,} tokens of research; the quota resets at {when}.",
                f"你今天的研究额度（{limit:,} 个 token）已用完；额度于 {when} 重置。",
            )
        return self._icon("warning") + self._pick(
            f"You have started today's {limit} researches; the quota resets at {when}.",
            f"你今天已发起 {limit} 次研究，额度已用完；额度于 {when} 重置。",
        )

    def guidance_noted(self) -> str:
        """A reply in the thread of a running research, kept as guidance for it before its
        searching ended: its next plan (if it plans again) and its writer read it."""
        return self._pick(
            "Noted: this research takes it into account from its next step (the next search "
            "it plans, or its report).",
            "已记下：这个研究会从下一步起考虑这一点（它规划的下一次搜索，或它的报告）。",
        )

    def guidance_too_late(self) -> str:
        """A reply in the thread of a research whose searching has ended (its report is being
        written, or it is ending): not kept, as nothing of the research would read it."""
        return self._pick(
            "Too late for this research: its searching has ended, so this reply is not used. "
            "Once it has finished, ask again to follow up on it.",
            "这个研究来不及采纳了：它的搜索已经结束，这条回复不会被使用。"
            "请在它结束后再问，以继续追问。",
        )

    def cancelled(self, run: RunRecord) -> str:
        topic = self.markup.escape(run.topic)
        return self._icon("stop") + self._pick(
            f"Cancelling “{topic}” (run `{run.id[:8]}`).",
            f"正在取消“{topic}”（运行 `{run.id[:8]}`）。",
        )

    def stopping(self, run: RunRecord) -> str:
        """Stop and write now, taken: no search starts, the report follows (before any search
        has finished, only if the one under way, or an earlier research here, finds
        something)."""
        topic = self.markup.escape(run.topic)
        if run.rounds_done == 0:
            return self._icon("stop") + self._pick(
                f"Stopping “{topic}” (run `{run.id[:8]}`): no new search starts. The report "
                "is written from what has been found by then; if nothing has, there is no "
                "report.",
                f"正在停止“{topic}”（运行 `{run.id[:8]}`）：不再开始新的搜索。"
                "将用届时已找到的内容撰写报告；如果什么也没找到，就没有报告。",
            )
        return self._icon("stop") + self._pick(
            f"Stopping “{topic}” (run `{run.id[:8]}`): no new search starts, and the report "
            "is written from what was found.",
            f"正在停止“{topic}”（运行 `{run.id[:8]}`）：不再开始新的搜索，"
            "将用已找到的内容撰写报告。",
        )

    def already_cancelling(self) -> str:
        """A repeated cancel (a second press, another replica's, a typed ``取消`` twice)."""
        return self._pick("That research is already being cancelled.", "那个研究已经在取消了。")

    def posting_report(self) -> str:
        """A cancel that came after the report was written: it is being posted."""
        return self._pick(
            "Too late to cancel: that research is already posting its report.",
            "来不及取消了：那个研究已经在发布报告。",
        )

    def already_stopping(self) -> str:
        """A repeated press: the run was already asked to stop or cancel."""
        return self._pick("That research is already stopping.", "那个研究已经在停止了。")

    def nothing_to_stop(self, run_id_prefix: str | None) -> str:
        if run_id_prefix:
            return self.nothing_to_cancel(run_id_prefix)
        return self._pick(
            "You have no running research here to stop.", "你在这里没有可停止的进行中研究。"
        )

    def only_starter_can_stop(self) -> str:
        return self._pick(
            "Only the person who started this research (or an admin) can stop it.",
            "只有发起这个研究的人（或管理员）可以停止它。",
        )

    def nothing_to_cancel(self, run_id_prefix: str | None) -> str:
        if run_id_prefix:
            return self._pick(
                f"You have no running research whose id starts with `{run_id_prefix}`.",
                f"你没有 id 以 `{run_id_prefix}` 开头的进行中研究。",
            )
        return self._pick(
            "You have no running research here to cancel.", "你在这里没有可取消的进行中研究。"
        )

    def quote_untied(self, *, stop: bool) -> str:
        """A ``stop`` or ``cancel`` quoting a message tied to no research here (or to several
        alike): nothing is stopped, and how to point at one."""
        if stop:
            return self._pick(
                "I can't tell which research here the quoted message belongs to, so nothing "
                "was stopped. Quote the message that asked for it, or its progress card, or "
                "type `/research stop <run id>` (`/research status` lists them).",
                "无法确定引用的消息属于这里的哪个研究，所以没有停止任何研究。"
                "请引用发起该研究的消息或它的进度卡片，或输入 `/research stop <运行 id>`"
                "（`/research status` 会列出）。",
            )
        return self._pick(
            "I can't tell which research here the quoted message belongs to, so nothing was "
            "cancelled. Quote the message that asked for it, or its progress card, or type "
            "`/research cancel <run id>` (`/research status` lists them).",
            "无法确定引用的消息属于这里的哪个研究，所以没有取消任何研究。"
            "请引用发起该研究的消息或它的进度卡片，或输入 `/research cancel <运行 id>`"
            "（`/research status` 会列出）。",
        )

    def nothing_running_in_thread(self) -> str:
        return self._pick("Nothing is running in this thread.", "这个话题里没有进行中的研究。")

    def only_starter_can_cancel(self) -> str:
        return self._pick(
            "Only the person who started this research (or an admin) can cancel it.",
            "只有发起这个研究的人（或管理员）可以取消它。",
        )

    def button_unknown(self) -> str:
        """A press on a button of no run here (a stale or forged value)."""
        return self._pick(
            "This button does not belong to a research here; nothing changed.",
            "这个按钮不属于这里的研究；没有任何改动。",
        )

    def nothing_to_rate(self) -> str:
        return self._pick(
            "That research has no report to rate.",
            "那个研究没有可以评价的报告。",
        )

    def vote_recorded(self, vote: Vote, before: Vote | None) -> str:
        """A vote on a report: the first, a change, or the same again."""
        mark = "👍" if vote is Vote.UP else "👎"
        if before is None:
            return self._pick(f"Thanks: your {mark} is recorded.", f"谢谢：已记录你的 {mark}。")
        if before is vote:
            return self._pick(f"Your {mark} was already recorded.", f"你的 {mark} 已经记录过了。")
        return self._pick(f"Changed your rating to {mark}.", f"已把你的评价改为 {mark}。")

    def already_finished(self) -> str:
        return self._pick("That research has already finished.", "那个研究已经结束了。")

    def no_internal_source(self) -> str:
        """``sources=internal`` where the channel may use no internal source (nothing starts)."""
        return self._icon("warning") + self._pick(
            "No internal source is available in this channel, so `sources=internal` cannot "
            "run here; use `sources=web` or `sources=all`.",
            "这个频道没有可用的内部来源，无法使用 `sources=internal`；"
            "请改用 `sources=web` 或 `sources=all`。",
        )

    def unsupported_message(self) -> str:
        """A message the bot cannot read (an image, a file, a sticker)."""
        return self._pick(
            "I can only read text. Send me a topic, e.g. `/research solid-state batteries`.",
            "我只能读文字消息。请发给我一个主题，例如 `/research 固态电池`。",
        )

    def files_left_out(
        self, rejected: Sequence[tuple[str, str]], *, max_bytes: int, per_request: int
    ) -> str:
        """The files of a request that the research does not read, each named with why
        (``type``, ``size`` or ``count`` from the screen; ``deleted``, ``external`` or
        ``unavailable`` from the platform's description; ``steering``: attached to a reply
        that steers a running research); the research goes on without them."""
        mb = f"{max_bytes / (1024 * 1024):g} MB"
        why_en = {
            "type": f"not a file I read ({READABLE})",
            "size": f"larger than {mb}",
            "count": f"only {per_request} files are read per request",
            "deleted": "deleted",
            "external": "a link to a file kept outside the chat, not the file itself",
            "unavailable": "the chat does not let me open it",
            "steering": "a research reads only the files sent with its request: send it with "
            "your next request once this one has finished",
        }
        why_zh = {
            "type": f"不是我能读取的文件类型（{READABLE}）",
            "size": f"超过 {mb}",
            "count": f"每个请求最多读取 {per_request} 个文件",
            "deleted": "已被删除",
            "external": "只是存放在聊天之外的文件的链接，不是文件本身",
            "unavailable": "聊天平台不允许我打开它",
            "steering": "研究只读取随请求发送的文件：请在这个研究结束后随下一个请求发送它",
        }
        names = [(self.markup.escape(shown_name(name)), why) for name, why in rejected]
        return self._icon("paperclip") + self._pick(
            "Not read: "
            + "; ".join(f"{name} ({why_en.get(why, why)})" for name, why in names)
            + ". The research goes on without them.",
            "未读取："
            + "；".join(f"{name}（{why_zh.get(why, why)}）" for name, why in names)
            + "。研究会在没有它们的情况下继续。",
        )

    def files_need_request(self) -> str:
        """Files sent on their own where they cannot wait for a request."""
        return self._icon("paperclip") + self._pick(
            "To research with a file, send it with your request: reply to (quote) the file "
            "with `/research <topic>`.",
            "如需结合文件研究，请在请求中带上它：引用（回复）该文件并发送 `/research <主题>`。",
        )

    def files_kept(self, names: Sequence[str], minutes: int) -> str:
        """Files sent on their own: they are read with the sender's next research here."""
        shown = ", ".join(self.markup.escape(shown_name(name)) for name in names)
        return self._icon("paperclip") + self._pick(
            f"Got {shown}. Send `/research <topic>` here within {minutes} min and I will "
            "read it with your research.",
            f"已收到 {shown}。请在 {minutes} 分钟内在这里发送 `/research <主题>`，"
            "我会在研究中读取它。",
        )

    def files_kept_after_research(self, names: Sequence[str], minutes: int) -> str:
        """Files sent on their own in the thread of a running research: it reads only the
        files of its own request; they wait for the sender's next request there."""
        shown = ", ".join(self.markup.escape(shown_name(name)) for name in names)
        return self._icon("paperclip") + self._pick(
            f"Got {shown}. The research running here does not read it (a research reads only "
            f"the files sent with its request): send `/research <topic>` here within {minutes} "
            "min, once it has finished, and I will read it with that one.",
            f"已收到 {shown}。这里正在进行的研究不会读取它（研究只读取随请求发送的文件）："
            f"请在它结束后、{minutes} 分钟内在这里发送 `/research <主题>`，"
            "我会在那个研究中读取它。",
        )

    # -- scheduled digests ------------------------------------------------------------------
    def digests_unavailable(self) -> str:
        return self._icon("warning") + self._pick(
            "Scheduled digests are not available on this server.",
            "这个服务器上不能使用定时摘要。",
        )

    def _when(self, view: DigestView) -> str:
        if view.next_run is None:
            return self._pick("no further runs", "不再运行")
        return view.next_run.strftime("%Y-%m-%d %H:%M ") + view.digest.timezone

    def scheduled(self, view: DigestView) -> str:
        digest, bold = view.digest, self.markup.bold
        topic = self.markup.escape(_short(digest.topic))
        sources = _sources_option(digest)
        extra = f", `{sources}`" if sources else ""
        extra_zh = f"，`{sources}`" if sources else ""
        return self._icon("mag") + self._pick(
            f"Scheduled {bold}{topic}{bold} (id `{digest.id}`, depth {digest.depth}{extra}): "
            f"{view.words} ({digest.timezone}). Next run: {self._when(view)}. "
            f"Remove it with `/research unschedule {digest.id}`.",
            f"已创建定时摘要 {bold}{topic}{bold}（id `{digest.id}`，深度 {digest.depth}"
            f"{extra_zh}）：{view.words}（{digest.timezone}）。下次运行：{self._when(view)}。"
            f"用 `/research unschedule {digest.id}` 删除。",
        )

    def digests(self, views: Sequence[DigestView]) -> str:
        if not views:
            return self._pick(
                'No schedules in this channel. Add one with `/research schedule <topic> cron="0 9 '
                '* * MON" tz=Asia/Shanghai`.',
                '这个频道还没有定时摘要。用 `/research schedule <主题> cron="0 9 * * MON" '
                "tz=Asia/Shanghai` 创建一个。",
            )
        bold = self.markup.bold
        lines = [f"{bold}{self._pick('Schedules', '定时摘要')}{bold}"]
        for view in views:
            digest = view.digest
            topic = self.markup.escape(_short(digest.topic))
            state = "" if digest.enabled else self._pick(" (disabled)", "（已停用）")
            sources = _sources_option(digest)
            lines.append(
                f"• `{digest.id}` “{topic}”: {view.words} ({digest.timezone}), "
                + self._pick("next", "下次")
                + f" {self._when(view)}"
                + (f", `{sources}`" if sources else "")
                + state
            )
        return "\n".join(lines)

    def unscheduled(self, digest: DigestRecord) -> str:
        topic = self.markup.escape(_short(digest.topic))
        return self._icon("stop") + self._pick(
            f"Removed the schedule `{digest.id}` (“{topic}”).",
            f"已删除定时摘要 `{digest.id}`（“{topic}”）。",
        )

    def status(self, active: Sequence[RunRecord], recent: Sequence[RunRecord]) -> str:
        """The user's running research, then their latest finished ones."""
        active_ids = {r.id for r in active}
        finished = [r for r in recent if r.id not in active_ids][:STATUS_RECENT]
        if not active and not finished:
            return self._pick(
                "You have no research yet. Start one with `/research <topic>`.",
                "你还没有研究。用 `/research <主题>` 发起一个。",
            )
        bold = self.markup.bold
        running = self._pick("Running", "进行中")
        lines = (
            [f"{bold}{running}{bold}"]
            if active
            else [self._pick("Nothing running right now.", "当前没有进行中的研究。")]
        )
        lines += [self._run_line(r) for r in active]
        if finished:
            lines += [f"{bold}{self._pick('Recent', '最近')}{bold}"]
            lines += [self._run_line(r) for r in finished]
        return "\n".join(lines)

    def _run_line(self, run: RunRecord) -> str:
        topic = self.markup.escape(_short(run.topic))
        try:
            where = self.markup.thread_hint(run.thread, self.language)
        except ValueError:
            where = run.thread_key
        searches = self._pick("searches", "次搜索")
        return (
            f"• `{run.id[:8]}` “{topic}”: {run.status}, "
            f"{run.rounds_done}/{run.depth} {searches}, {where}"
        )

"""A long report as a Slack canvas: its Markdown made safe for a canvas, and the calls that
create, share and delete it.

A canvas is created standalone (``canvases.create`` with no ``channel_id``: a channel_id would
tab it in the channel with write access for every member), then shared read-only with the
conversation it answers (``canvases.access.set``: the channel, or, in a DM, whose ids Slack
does not take there, the requester), and its link read from its file (``files.info``'s
``permalink``: a canvas is a file). Nothing wider is ever granted. Should sharing or reading
the link fail, the canvas is deleted again (best effort), so none is left that nobody, or the
wrong people, can read.

A refusal Slack says is final raises :class:`CanvasRefused`: for the whole workspace
(:data:`WORKSPACE_CANVAS_REFUSALS`: the ``canvases:write`` scope missing, canvases off for the
team, a free plan) or for this report only (its content refused, the conversation not
shareable). Anything else (a 429, a 5xx, the network) propagates for the caller to retry.

The canvas holds what the thread's report would (``bots.slack.render``'s rules): mentions made
inert, links only to the report's own sources (a canvas also turns ``![](@U…)`` and
``![](#C…)`` into mentions, so no image syntax survives), citations ``[n]`` linked to their
source, headings within h1-h3, no list inside a quote block (a canvas refuses one), and its
Sources rebuilt here, each source followed by the quotes that supported the claims citing it,
as quote blocks of inert text. Facts from Slack's
method pages (docs.slack.dev ``canvases.create``, ``canvases.access.set``, ``canvases.delete``)
and its canvas surface page (formatting, the 1 MiB limit).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bots.chat.documents import without_sources
from bots.chat.markdown import CODE, link_citations, outside_code
from bots.slack.errors import classify_error, error_code
from bots.slack.refusals import WORKSPACE_REFUSALS
from core.engine.sources import is_link
from core.models import Source
from core.untrusted import URL, neutralise, remove_urls
from core.words.wording import Language, pick, sources_heading

log = logging.getLogger(__name__)

#: Canvas Markdown accepted by ``canvases.create`` (Slack: 1 MiB, 1,048,576 characters);
#: kept with a margin for the note that says a report was cut.
CANVAS_CHARS = 1_000_000
#: The longest canvas title kept.
TITLE_CHARS = 200
#: Answers that refuse canvases in the whole workspace, besides every call's final ones about
#: the token: canvases off for the team, a free plan (which may only create canvases tabbed
#: in a channel, with write access for its members), a policy.
WORKSPACE_CANVAS_REFUSALS = WORKSPACE_REFUSALS | frozenset(
    {
        "canvas_disabled_user_team",
        "free_teams_cannot_create_non_tabbed_canvases",
        "team_tier_cannot_create_channel_canvases",
        "restricted_action",
        "access_denied",
        "ekm_access_denied",
        "enterprise_is_restricted",
    }
)
#: Answers about this canvas only: Slack could not make it from this content (its ``detail``
#: names the line), retrying the same content cannot help.
CONTENT_REFUSALS = frozenset({"canvas_creation_failed"})
#: ``canvases.delete``'s answer for a canvas already gone (deleted, or never made).
CANVAS_GONE = "canvas_not_found"


class CanvasRefused(Exception):
    """Slack refused the canvas for good: ``code`` (its error code, or what was missing),
    for the whole workspace when ``workspace``, else for this report only."""

    def __init__(self, code: str, *, workspace: bool) -> None:
        super().__init__(code)
        self.code = code
        self.workspace = workspace


@dataclass(frozen=True)
class Canvas:
    """A canvas made and shared: its id (a file id, ``F…``) and its link."""

    id: str
    url: str


# --- the canvas's Markdown -------------------------------------------------------------------

_IMAGE = re.compile(r"!\[([^\]\n]*)\]\([^)\n]*\)")
_LINK = re.compile(r"(?<!!)\[((?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]\(([^)\s]*)(?:[ \t]+\"[^\"\n]*\")?\)")
_REFERENCE = re.compile(r"^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*\S.*$", re.MULTILINE)
_DEEP_HEADING = re.compile(r"^#{4,}(?=[ \t])", re.MULTILINE)
#: A list item inside a quote block, which a canvas refuses ("Unsupported block type (List)
#: within block quote"): its marker is written as text.
_QUOTED_LIST = re.compile(r"^((?:>[ \t]*)+)(?:([-+*])|(\d{1,9})([.)]))(?=[ \t]|$)", re.MULTILINE)
#: Characters a canvas's Markdown reads in text, as look-alikes that read the same: a quote or
#: a title stays text however the canvas parses it (whether it honours backslash escapes or
#: entities is not documented).
_LOOK_ALIKES = str.maketrans(
    {
        "*": "∗",
        "_": "‗",
        "~": "∼",
        "`": "ˋ",
        "[": "［",
        "]": "］",
        "<": "‹",
        ">": "›",
        "|": "│",
        "#": "＃",
        "\\": "∖",
    }
)


def inert_text(text: str) -> str:
    """Untrusted text (a quote, a source's title) for a canvas, as text only: mentions inert,
    no web address, one line, and no character a canvas reads as markup."""
    flat = " ".join(remove_urls(neutralise(text)).split())
    return flat.translate(_LOOK_ALIKES)


def _allowed_urls(sources: Sequence[Source]) -> frozenset[str]:
    return frozenset(s.url for s in sources if is_link(s.url))


def _safe_prose(prose: str, allowed: frozenset[str]) -> str:
    """Report prose (outside code) for a canvas: headings within h3, no image (a canvas
    mention is image syntax), no link but to a source, no reference definition, no web
    address but a source's."""
    prose = _DEEP_HEADING.sub("###", prose)
    prose = _QUOTED_LIST.sub(_marker_as_text, prose)
    prose = _IMAGE.sub(lambda m: m.group(1), prose)
    prose = _LINK.sub(lambda m: m.group(0) if m.group(2) in allowed else m.group(1), prose)
    prose = _REFERENCE.sub("", prose)
    return remove_urls(prose, allowed=lambda url: url in allowed)


def _marker_as_text(match: re.Match[str]) -> str:
    """A list marker in a quote block as text that reads the same (``•``, ``1․``)."""
    if match.group(2):
        return f"{match.group(1)}•"
    return f"{match.group(1)}{match.group(3)}{'․' if match.group(4) == '.' else '⁾'}"


def _quote_line(quote: str) -> str:
    """One quote as a quote block: inert, in quotation marks (so it never starts a list,
    which a canvas does not take inside a quote)."""
    return f"> “{inert_text(quote)}”"


def sources_section(
    sources: Sequence[Source], quotes: Mapping[int, Sequence[str]], language: Language
) -> str:
    """The canvas's Sources: each source as ``[n] [title](url)`` (its date when known), then
    the quotes that supported the claims citing it, each a quote block."""
    lines = [f"## {sources_heading(language)}"]
    for source in sources:
        title = inert_text(source.title) or pick(language, "Untitled", "无标题")
        shown = f"[{title}]({_link_target(source.url)})" if is_link(source.url) else title
        published = f" ({inert_text(source.published)})" if source.published else ""
        lines.append(f"[{source.n}] {shown}{published}")
        lines.extend(_quote_line(q) for q in quotes.get(source.n, ()))
    return "\n\n".join(lines) + "\n"


def _link_target(url: str) -> str:
    """A source's address as a link target that no character of it can end early."""
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def canvas_markdown(
    markdown: str,
    sources: Sequence[Source],
    quotes: Mapping[int, Sequence[str]],
    language: Language,
    limit: int = CANVAS_CHARS,
) -> str:
    """The whole report as a canvas's Markdown (see the module), at most ``limit``
    characters: a report over it is cut at a paragraph, with a note that says so."""
    allowed = _allowed_urls(sources)
    body = neutralise(without_sources(markdown)).strip()
    body = outside_code(body, lambda prose: _safe_prose(prose, allowed), CODE)
    body = link_citations(body, sources)
    listing = sources_section(sources, quotes, language)
    return _within(body, listing, language, limit)


def _within(body: str, listing: str, language: Language, limit: int) -> str:
    whole = f"{body}\n\n{listing}"
    if len(whole) <= limit:
        return whole
    note = pick(
        language,
        "*The report was cut here: it is longer than a canvas holds.*",
        "*报告在此截断：它超出了画布的容量。*",
    )
    room = max(limit - len(listing) - len(note) - 8, 0)
    cut = body[:room]
    paragraph = cut.rfind("\n\n")
    cut = cut[:paragraph] if paragraph > room // 2 else cut
    if cut.count("```") % 2:
        cut += "\n```"
    return f"{cut.rstrip()}\n\n{note}\n\n{listing}"[:limit]


def canvas_title(title: str) -> str:
    """A canvas's title: inert, one line, bounded."""
    flat = " ".join(remove_urls(neutralise(title)).split())
    return flat if len(flat) <= TITLE_CHARS else flat[: TITLE_CHARS - 1].rstrip() + "…"


# --- the calls ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Audience:
    """Who may read a canvas: the channel's members (``channel``), or, in a DM, whose channel
    id Slack does not take for access, the people named (``users``)."""

    channel: str | None = None
    users: tuple[str, ...] = ()

    @classmethod
    def of(cls, channel: str, requester: str | None) -> Audience:
        """The conversation's members: a DM (``D…``) by its requester, else the channel."""
        if channel.startswith("D"):
            return cls(users=(requester,) if requester else ())
        return cls(channel=channel)

    def grant(self) -> dict[str, Any]:
        """``canvases.access.set``'s arguments naming them."""
        if self.channel is not None:
            return {"channel_ids": [self.channel]}
        return {"user_ids": list(self.users)}

    @property
    def empty(self) -> bool:
        return self.channel is None and not self.users


def refusal(exc: BaseException) -> CanvasRefused | None:
    """Slack's answer as a :class:`CanvasRefused` when it is final, else None (retry it)."""
    code = error_code(exc) if isinstance(exc, SlackApiError) else None
    if code in WORKSPACE_CANVAS_REFUSALS:
        return CanvasRefused(code or "", workspace=True)
    if code in CONTENT_REFUSALS:
        return CanvasRefused(code or "", workspace=False)
    if isinstance(exc, SlackApiError) and not classify_error(exc).retryable:
        return CanvasRefused(code or "refused", workspace=False)
    return None


async def create_canvas(
    client: AsyncWebClient, title: str, markdown: str, audience: Audience, access: str = "read"
) -> Canvas:
    """Create the canvas, share it with ``audience`` at ``access`` (``read`` unless the
    operator said ``write``), read its link. Raises :class:`CanvasRefused` when Slack refused
    for good, else Slack's error; either way no canvas is left behind (best effort)."""
    if audience.empty:
        raise CanvasRefused("no one to share it with", workspace=False)
    try:
        created = await client.canvases_create(
            title=canvas_title(title), document_content={"type": "markdown", "markdown": markdown}
        )
    except SlackApiError as exc:
        raise refusal(exc) or exc from None
    canvas_id = str(created["canvas_id"])
    try:
        shared = await client.canvases_access_set(
            canvas_id=canvas_id, access_level=access, **audience.grant()
        )
        failed = [*(shared.get("failed_to_update_channel_ids") or [])]
        failed += [*(shared.get("failed_to_update_user_ids") or [])]
        if failed:
            raise CanvasRefused("failed_to_update", workspace=False)
        info = await client.files_info(file=canvas_id)
        url = str((info.get("file") or {}).get("permalink") or "")
        if not URL.fullmatch(url):
            raise CanvasRefused("no_permalink", workspace=False)
    except BaseException as exc:
        await delete_canvas(client, canvas_id, quiet=True)
        if isinstance(exc, SlackApiError):
            raise refusal(exc) or exc from None
        raise
    return Canvas(canvas_id, url)


async def delete_canvas(client: AsyncWebClient, canvas_id: str, *, quiet: bool = False) -> None:
    """Delete a canvas; one already gone counts as deleted. ``quiet``: a failure is logged,
    not raised (the clean-up after a canvas that could not be shared)."""
    try:
        await client.canvases_delete(canvas_id=canvas_id)
    except Exception as exc:
        if error_code(exc) == CANVAS_GONE:
            return
        if not quiet:
            raise
        log.warning("slack: canvas %s not deleted (%s)", canvas_id, classify_error(exc).reason)

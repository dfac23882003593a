"""Platform ids checked at the door, before anything is stored or looked up.

Every id a platform sends (a workspace, tenant or team; a channel, chat or conversation; a
user; a thread, message or root id; an event or delivery id; the run a button names; a file's
id) is untrusted text. PostgreSQL refuses a NUL in text ("A string literal cannot contain
NUL (0x00) characters") and a lone surrogate cannot even be encoded to UTF-8 (JSON's
``"\\ud800"`` decodes to one in Python), so an id with either would fail the first statement
that carries it, with a traceback and a 5xx the platform retries. An id here is refused
instead when it is longer than :data:`MAX_DOOR_CHARS`, holds a NUL or a lone surrogate, or any
other character that is not printable (controls, separators, invisible formatting): no real
platform sends such an id, and one that passed would be a second spelling of a real one.

:class:`~bots.chat.message.ChatMessage` and :class:`~bots.chat.controls.Press` check their
ids when they are made (:func:`check_message`, :func:`check_press`), so every platform's
translation is checked by the same rule; a platform checks the ids it stores or looks up
before it builds them (Teams' conversation reference, DingTalk's quoted message) with
:func:`check_ids`. A failed check raises :class:`InvalidId`, which the platform answers as its
retry rule wants (a 400, or a 200 and the delivery dropped) with :func:`log_refused`'s one
line. A missing id, or one over ``core.chat.commands.MAX_ID_CHARS``, still gets the request's
reply where one can be sent (``ChatCommands.handle``).

The words of a message (a topic, a reply) are never refused here: they are cleaned where they
are read (``core.text.clean_text``). What is stored as the platform sent it and is not an id
(a file's name, a sender's display name) only has to be storable text (:func:`storable`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from core.models import Attachment

if TYPE_CHECKING:
    from bots.chat.controls import Press
    from bots.chat.message import ChatMessage

log = logging.getLogger(__name__)

#: The longest id (or key made of ids) let in. Real ids are far shorter (Slack's about 11
#: characters, Teams' personal chats about 130); a longer one is a forgery, not a request.
MAX_DOOR_CHARS = 1000
#: The longest value of what a run keeps to reach its thread (a Teams service URL, a
#: DingTalk session webhook), stored with the run.
MAX_CONTEXT_CHARS = 2000


class InvalidId(ValueError):
    """A delivery whose id ``name`` cannot be let in, and why (never the value itself: it is
    hostile, and the log line must not carry it)."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(f"its {name} {why}")
        self.name = name
        self.why = why


def storable(value: str) -> str | None:
    """Why ``value`` cannot be stored as text at all (a NUL or a lone surrogate), or None."""
    if "\x00" in value:
        return "holds a NUL character"
    if any("\ud800" <= char <= "\udfff" for char in value):
        return "holds a lone surrogate"
    return None


def id_problem(value: object, limit: int | None = MAX_DOOR_CHARS) -> str | None:
    """Why ``value`` is not an id that may be let in, or None. Empty is let in (the request
    is then answered that its id is missing). ``limit`` None: any length (a key the storage
    fits to its column, ``storage.sql.fit_key``)."""
    if not isinstance(value, str):
        return "is not text"
    if limit is not None and len(value) > limit:
        return f"is longer than {limit:,} characters"
    why = storable(value)
    if why is not None:
        return why
    if not value.isprintable():
        return "holds an unprintable character"
    return None


def check_ids(limit: int | None = MAX_DOOR_CHARS, **ids: object) -> None:
    """Raise :class:`InvalidId` for the first of ``ids`` (``channel="C1"``, ...; None is
    skipped) that may not be let in."""
    for name, value in ids.items():
        if value is None:
            continue
        why = id_problem(value, limit)
        if why is not None:
            raise InvalidId(name, why)


def check_context(context: Mapping[str, object] | None) -> None:
    """What a run keeps to reach its thread (ids, a URL, a sender's display name): stored with
    the run as JSON, so each value must be storable text of a bounded length. (The ids in it
    are the message's own, checked as ids; a name may hold an emoji's invisible joiner.)"""
    for value in (context or {}).values():
        if not isinstance(value, str):
            raise InvalidId("context", "is not text")
        if len(value) > MAX_CONTEXT_CHARS:
            raise InvalidId("context", f"is longer than {MAX_CONTEXT_CHARS:,} characters")
        why = storable(value)
        if why is not None:
            raise InvalidId("context", why)


def check_message(message: ChatMessage) -> None:
    """Every id of ``message`` (and of its files), as it is made."""
    check_ids(
        platform=message.platform,
        workspace=message.workspace,
        channel=message.channel,
        thread=message.thread,
        user=message.user,
    )
    # Keys made of ids (an event id among them): stored fitted to their columns, any length.
    check_ids(
        None,
        dedupe_key=message.dedupe_key,
        delivery_key=message.delivery_key,
        earlier_files=message.earlier_files,
    )
    check_context(message.context)
    _check_files(message.attachments)


def _check_files(attachments: Iterable[Attachment]) -> None:
    """A file's ids like any id; its name and the rest, as text to be stored (JSON)."""
    for attachment in attachments:
        check_ids(file_id=attachment.id, file_message=attachment.message_id)
        texts = [attachment.name, attachment.attached_by, attachment.mime, attachment.url]
        texts.append(attachment.attacher_id)
        for text in [*texts, *attachment.extra.keys(), *attachment.extra.values()]:
            why = storable(text) if text is not None else None
            if why is not None:
                raise InvalidId("file", why)


def check_press(press: Press) -> None:
    """Every id of a press on a button, as it is made."""
    check_ids(
        platform=press.platform,
        workspace=press.workspace,
        channel=press.channel,
        user=press.user,
        run=press.run_id,
    )


def log_refused(platform: str, refused: InvalidId, answer: str) -> None:
    """The one log line of a refused delivery: which id, why, and how it was answered
    (``answer``: "400", "dropped"); no traceback, never the value."""
    log.warning("%s: a delivery refused: %s (%s)", platform, refused, answer)

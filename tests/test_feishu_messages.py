"""Feishu messages in the shapes Feishu sends them, read into the neutral message (pure).

``post`` (rich text) messages carry their mentions as ``{"tag": "at", "user_id": "@_user_1",
"user_name": ...}`` elements wherever the author put them, beside the ``mentions`` list of
the event, exactly like a ``text`` message carries ``@_user_1`` in its text. Samples after
the ``im.message.receive_v1`` documentation (message content of a received ``post``).
"""

from __future__ import annotations

from typing import Any

import pytest

from bots.feishu.events import translate
from core.grammar import HelpCommand, ResearchCommand, StatusCommand, parse_command
from tests.fakes.feishu import BOT_OPEN_ID, message_event

BOT = {"key": "@_user_1", "id": {"open_id": BOT_OPEN_ID, "union_id": "on_bot"}, "name": "Fathom"}
ALICE = {
    "key": "@_user_2",
    "id": {"open_id": "ou_alice", "union_id": "on_alice", "user_id": "ualice"},
    "name": "Alice",
}


def at(key: str, name: str) -> dict[str, Any]:
    return {"tag": "at", "user_id": key, "user_name": name, "style": []}


def words(text: str) -> dict[str, Any]:
    return {"tag": "text", "text": text, "style": []}


def post(
    paragraphs: list[list[dict[str, Any]]],
    *,
    title: str = "",
    mentions: list[dict[str, Any]] | None = None,
    chat_type: str = "group",
    bot_known: bool = True,
) -> tuple[str, bool]:
    """The text and ``addressed`` of a received post."""
    event = message_event(
        None,
        chat_type=chat_type,
        message_type="post",
        content={"title": title, "content": paragraphs},
    )
    if mentions:
        event["event"]["message"]["mentions"] = mentions
    request = translate(event, BOT_OPEN_ID if bot_known else None)
    assert request is not None and request.readable
    return request.message.text, request.message.addressed


@pytest.mark.parametrize("bot_known", [True, False])
def test_the_bot_mention_is_removed_wherever_it_stands(bot_known: bool) -> None:
    first = post([[at("@_user_1", "Fathom"), words(" heat pumps")]], mentions=[BOT])
    middle = post([[words("heat "), at("@_user_1", "Fathom"), words(" pumps")]], mentions=[BOT])
    last = post([[words("heat pumps "), at("@_user_1", "Fathom")]], mentions=[BOT])
    twice = post(
        [[at("@_user_1", "Fathom"), words(" heat")], [words("pumps "), at("@_user_1", "Fathom")]],
        mentions=[BOT],
        bot_known=bot_known,
    )
    for text, addressed in (first, middle, last, twice):
        assert (text, addressed) == ("heat pumps", True)


def test_other_people_stay_named_and_do_not_address_the_bot() -> None:
    text, addressed = post([[at("@_user_2", "Alice"), words(" heat pumps")]], mentions=[ALICE])
    assert not addressed and "Fathom" not in text
    text, addressed = post(
        [[at("@_user_1", "Fathom"), words(" ask "), at("@_user_2", "Alice"), words(" about it")]],
        mentions=[BOT, ALICE],
    )
    assert (text, addressed) == ("ask @Alice about it", True)


@pytest.mark.parametrize("bot_known", [True, False])
def test_at_all_does_not_address_the_bot_and_is_dropped(bot_known: bool) -> None:
    everyone = {"key": "@_all", "id": {}, "name": "所有人"}
    text, addressed = post(
        [[at("@_all", "所有人"), words(" heat pumps")]], mentions=[everyone], bot_known=bot_known
    )
    assert (text, addressed) == ("heat pumps", False)
    text, addressed = post(
        [[at("@_all", "所有人"), at("@_user_1", "Fathom"), words(" heat pumps")]],
        mentions=[everyone, BOT],
    )
    assert (text, addressed) == ("heat pumps", True)


def test_commands_in_a_post_work_like_in_a_text_message() -> None:
    def command(*elements: dict[str, Any], title: str = "") -> object:
        text, addressed = post([list(elements)], title=title, mentions=[BOT])
        assert addressed
        return parse_command(text, default_depth=3, max_depth=10, default_strategy="iterative")

    assert isinstance(command(at("@_user_1", "Fathom"), words(" help")), HelpCommand)
    assert isinstance(command(words("status "), at("@_user_1", "Fathom")), StatusCommand)
    research = command(at("@_user_1", "Fathom"), words(" /research heat pumps depth=2"))
    assert research == ResearchCommand("heat pumps", 2, "iterative")
    titled = command(at("@_user_1", "Fathom"), words(" /research depth=2"), title="热泵")
    assert titled == ResearchCommand("热泵", 2, "iterative")


def test_a_title_is_text_and_links_and_code_are_words() -> None:
    text, _ = post(
        [
            [at("@_user_1", "Fathom"), words(" compare")],
            [{"tag": "a", "text": "this list", "href": "https://example.com"}],
            [{"tag": "img", "image_key": "img_1"}, {"tag": "emotion", "emoji_type": "SMILE"}],
        ],
        title="Heat pumps",
        mentions=[BOT],
    )
    assert text == "Heat pumps compare this list"


def test_a_localised_post_is_read_too() -> None:
    event = message_event(
        None,
        chat_type="p2p",
        message_type="post",
        content={"zh_cn": {"title": "", "content": [[at("@_user_1", "Fathom"), words(" 热泵")]]}},
    )
    event["event"]["message"]["mentions"] = [BOT]
    request = translate(event, BOT_OPEN_ID)
    assert request is not None and request.message.text == "热泵"


def test_a_text_message_with_many_mentions_keeps_keys_apart() -> None:
    """``@_user_1`` is a prefix of ``@_user_12``: each key is replaced by its own person."""
    people = [BOT] + [
        {"key": f"@_user_{i}", "id": {"open_id": f"ou_{i}", "user_id": f"u{i}"}, "name": f"P{i}"}
        for i in range(2, 13)
    ]
    event = message_event("@_user_1 ask @_user_12 and @_user_2", chat_type="group")
    event["event"]["message"]["mentions"] = people
    request = translate(event, BOT_OPEN_ID)
    assert request is not None and request.message.text == "ask @P12 and @P2"

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
from core.chat.grammar import HelpCommand, ResearchCommand, StatusCommand, parse_command
from tests.fakes.feishu import BOT_OPEN_ID, TENANT, file_event, message_event

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


# -- files ---------------------------------------------------------------------------------
# A file message's content is ``{"file_key", "file_name"}`` and a received post carries a
# video as ``{"tag": "media", "file_key", "image_key"}`` (Feishu's "接收消息内容结构").


def test_a_private_file_message_is_files_only_kept_under_the_chat_and_sender() -> None:
    event = file_event("file_v3_00ab_1", "报告.pdf", message_id="om_f1", sender="ou_alice")
    request = translate(event, BOT_OPEN_ID, file_window=600)
    assert request is not None and request.files_only and request.readable
    message = request.message
    assert message.addressed  # a private chat is addressed to the bot
    (file,) = message.attachments
    assert (file.id, file.name, file.message_id, file.attached_by, file.url) == (
        "file_v3_00ab_1",
        "报告.pdf",
        "om_f1",
        "ou_alice",
        None,
    )
    assert message.earlier_files == f"feishu:{TENANT}:oc_chat_1:p2p:ou_alice"
    assert message.earlier_window == 600
    assert message.lang == "zh"  # answered in the language of the file's name
    # The sender's next request in the chat looks in the same place.
    later = translate(
        message_event("/research 热泵", sender="ou_alice"), BOT_OPEN_ID, file_window=600
    )
    assert later is not None and later.message.earlier_files == message.earlier_files


def test_a_group_file_waits_in_its_thread_for_a_request_there_or_replying_to_it() -> None:
    in_thread = file_event(
        "file_k", "a.pdf", chat_type="group", root_id="om_root", message_id="om_f"
    )
    request = translate(in_thread, BOT_OPEN_ID, file_window=600)
    assert request is not None and request.files_only and not request.message.addressed
    scope = request.message.earlier_files
    assert scope == f"feishu:{TENANT}:oc_chat_1:thread:om_root"
    asked = message_event(
        "/research it", chat_type="group", mention_bot=True, root_id="om_root", sender="ou_bob"
    )
    assert (
        translate(asked, BOT_OPEN_ID, file_window=600) or request
    ).message.earlier_files == scope
    elsewhere = message_event(
        "/research it", chat_type="group", mention_bot=True, root_id="om_other"
    )
    other = translate(elsewhere, BOT_OPEN_ID, file_window=600)
    assert other is not None and other.message.earlier_files != scope
    # A file at the top of the chat starts its own thread: a reply to it (root_id = the
    # file's message) is in that thread and takes it.
    top = translate(
        file_event("file_t", "b.md", chat_type="group", message_id="om_top"),
        BOT_OPEN_ID,
        file_window=600,
    )
    reply = message_event("/research b", chat_type="group", mention_bot=True, root_id="om_top")
    replied = translate(reply, BOT_OPEN_ID, file_window=600)
    assert top is not None and replied is not None
    assert (
        top.message.earlier_files
        == replied.message.earlier_files
        == f"feishu:{TENANT}:oc_chat_1:thread:om_top"
    )


def test_a_post_mentioning_the_bot_carries_its_files_and_images_are_ignored() -> None:
    event = message_event(
        None,
        chat_type="group",
        message_type="post",
        message_id="om_p",
        content={
            "title": "",
            "content": [
                [at("@_user_1", "Fathom"), words(" /research heat pumps")],
                [{"tag": "img", "image_key": "img_v3_1"}],
                [{"tag": "media", "file_key": "file_v3_video", "image_key": "img_v3_cover"}],
                # Not among the documented tags of a received post; read alike if sent.
                [{"tag": "file", "file_key": "file_v3_doc", "file_name": "spec.docx"}],
            ],
        },
    )
    event["event"]["message"]["mentions"] = [BOT]
    request = translate(event, BOT_OPEN_ID, file_window=600)
    assert request is not None and not request.files_only
    assert request.message.text == "/research heat pumps"
    assert [(a.id, a.name, a.message_id) for a in request.message.attachments] == [
        ("file_v3_video", "video", "om_p"),
        ("file_v3_doc", "spec.docx", "om_p"),
    ]


def test_kinds_that_are_no_file_stay_unreadable_and_a_zero_window_keeps_nothing() -> None:
    for kind, content in (
        ("image", {"image_key": "img_1"}),
        ("audio", {"file_key": "file_a", "duration": 2000}),
        ("sticker", {"file_key": "file_s"}),
        ("folder", {"file_key": "file_d", "file_name": "docs"}),
    ):
        request = translate(
            message_event(None, message_type=kind, content=content), BOT_OPEN_ID, file_window=600
        )
        assert request is not None and not request.readable and not request.message.attachments
    video = translate(
        file_event("file_v", "clip.mp4", message_type="media"), BOT_OPEN_ID, file_window=600
    )
    assert (
        video is not None and video.files_only and video.message.attachments[0].name == "clip.mp4"
    )
    off = translate(file_event("file_k", "a.pdf"), BOT_OPEN_ID, file_window=0)
    assert off is not None and off.message.earlier_files is None and off.message.earlier_window == 0


@pytest.mark.parametrize("content", [[], ["text"], 7, {"text": "hi"}, True])
def test_a_content_that_is_not_a_json_string_is_unreadable_never_an_error(content: Any) -> None:
    """Found by the route fuzzer (``python -m bench.fuzz``, 2026-12-06): a signed event whose
    ``message.content`` was a list raised TypeError in the translation (500, and Feishu's
    redeliveries). Feishu sends the content as a JSON string; anything else is no text."""
    event = message_event("/research heat pumps", message_id="om_odd")
    event["event"]["message"]["content"] = content
    request = translate(event, BOT_OPEN_ID)
    assert request is None or not request.message.text

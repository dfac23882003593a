"""Teams activities in the shapes Microsoft documents them, through our translation.

Each sample is a JSON file under ``tests/samples/teams/``, copied from where Microsoft shows it
(field names, nesting and ids as written there); each test's docstring names the repository,
the path and the section it comes from, and says what, if anything, was added to or changed
in the sample. The functions under test are pure (``bots.teams.events``), but for one
test of the HTTP route (``bots.teams.app``) on the installation events.

Sources, as stored (the commit read):

- ``MicrosoftDocs/msteams-docs`` (the Teams platform documentation):
  ``bots/how-to/conversations/channel-and-group-conversations.md`` (012d9789),
  ``bots/how-to/conversations/conversation-messages.md`` (00510c43),
  ``bots/how-to/bots-filesv4.md`` (012d9789),
  ``bots/how-to/conversations/subscribe-to-conversation-events.md`` (011f4459),
  ``bots/how-to/conversations/channel-messages-with-rsc.md`` (a42ae921),
  ``messaging-extensions/how-to/action-commands/create-task-module.md`` (03ed054d),
  ``task-modules-and-cards/cards/cards-actions.md`` (0162ceda),
  ``task-modules-and-cards/cards/Universal-actions-for-adaptive-cards/User-Specific-Views.md``
  and ``.../authentication-flow-in-universal-action-for-adaptive-cards.md`` (012d9789,
  04139c1f), all under ``msteams-platform/``;
- ``MicrosoftDocs/AdaptiveCards``: ``AdaptiveCards/authoring-cards/universal-action-model.md``
  (0ed81e04), "Request format" of the ``adaptiveCard/action`` invoke;
- ``microsoftgraph/microsoft-graph-docs-contrib``: ``concepts/teams-messaging-overview.md``
  (0b3874db), "chatMessage schema > attachments > file attachment";
- ``microsoft/teams.net`` (Microsoft's Teams SDK for .NET):
  ``core/test/Microsoft.Teams.BotApps.UnitTests/TeamsActivityTests.cs`` (3c6eb8d2), the
  ``json`` constant: an activity as Teams delivered it (a reply in a channel's thread that
  mentions the bot), the one complete recent channel message found in Microsoft's material.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from bots.chat.controls import Control
from bots.teams.events import (
    FILE_DOWNLOAD_INFO,
    Reference,
    channel_key,
    encode_conversation,
    files_scope,
    reference_of,
    tenant_of,
    translate,
    translate_press,
)
from core.models import Attachment

SAMPLES = Path(__file__).parent / "samples" / "teams"
RUN = "0d5c8e0e-7a1f-4c55-9b1e-3f0a2b6c9d41"


def sample(name: str) -> dict[str, Any]:
    """``tests/samples/teams/<name>.json``, a fresh copy."""
    loaded: dict[str, Any] = json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    return loaded


def our_action(control: Control, language: str = "en") -> dict[str, Any]:
    """The ``value`` of the ``adaptiveCard/action`` invoke a press on one of our buttons sends:
    Universal Actions' "Request format" (``value.action``: "a copy of the action as defined in
    the Adaptive Card", ``value.trigger``: ``manual`` for a click), with the action as
    ``bots.teams.render`` defines ours (verb: the control's action id, data: run and language).
    """
    return {
        "action": {
            "type": "Action.Execute",
            "title": control.value,
            "verb": control.action_id,
            "data": {"run": RUN, "lang": language},
        },
        "trigger": "manual",
    }


def as_press(envelope: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """A documented invoke envelope turned into an ``adaptiveCard/action`` invoke: its ``name``
    and ``value`` replaced, and the ``serviceUrl`` Teams puts on every activity (the envelope
    samples of "Create and send dialogs" leave it out; the value is the one of the docs'
    message samples)."""
    activity = copy.deepcopy(envelope)
    activity["name"] = "adaptiveCard/action"
    activity["value"] = value
    activity.setdefault("serviceUrl", "https://smba.trafficmanager.net/amer/")
    return activity


# -- channels: a mention of the bot ---------------------------------------------------------------

CHANNEL_BOT = "28:0b6fe6d1-fece-44f7-9a48-56465e2d5ab8"  # the sample's recipient (and mention)


def test_a_channel_reply_mentioning_the_bot_is_a_request_in_its_chain() -> None:
    """``microsoft/teams.net``, ``core/test/Microsoft.Teams.BotApps.UnitTests/
    TeamsActivityTests.cs``, the ``json`` constant, unchanged: "<at>ridotest</at> reply to
    thread", a reply (id 1759944781430) in the chain of 1759881511856 of a ``@thread.tacv2``
    channel, the mention entity naming the bot (its ``recipient``), a ``text/html`` copy of
    the message as its only attachment. The bot's id is the sample's ``recipient.id``."""
    activity = sample("channel_reply_mention")
    request = translate(activity, CHANNEL_BOT)
    assert request is not None
    message = request.message
    channel = "19:6848757105754c8981c67612732d9aa7@thread.tacv2"
    tenant = "50612dbb-0237-4969-b378-8d42590f9c00"
    assert message.addressed
    assert message.text == "reply to thread"
    assert (message.thread, message.in_thread) == ("1759881511856", True)
    assert message.user == "b15a9416-0ad3-4172-9210-7beb711d3f70"  # from.aadObjectId
    assert message.workspace == tenant
    assert message.channel == encode_conversation(channel) == "19%3A" + channel[3:]
    assert message.dedupe_key == f"teams:msg:{tenant}:{encode_conversation(channel)}:1759944781430"
    assert message.lang == "en"
    # The HTML copy of the words is not a file.
    assert (message.attachments, message.unreadable) == ((), ())
    assert message.earlier_files is None  # files wait for a request in personal chats only
    assert request.reference == Reference(
        "https://smba.trafficmanager.net/amer/50612dbb-0237-4969-b378-8d42590f9c00/",
        channel,
        tenant,
        "channel",
        activity["channelData"]["team"]["id"],
    )
    assert message.context == request.reference.context()
    # The answer goes into the request's chain: the conversation id Teams sent.
    assert request.answer_to == activity["conversation"]["id"]
    assert request.activity_id == "1759944781430"
    # Delivered again (Teams retries), it is the same request; the bot known only as the
    # activity's recipient, the same too.
    again = translate(sample("channel_reply_mention"), "")
    assert again is not None and again.message == message


def test_the_same_channel_reply_delivered_to_another_bot_does_not_address_it() -> None:
    """``microsoft/teams.net``, ``core/test/Microsoft.Teams.BotApps.UnitTests/
    TeamsActivityTests.cs``, the ``json`` constant, as a second bot installed in the same
    channel with the ``ChannelMessage.Read.Group`` permission receives it
    (``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    channel-messages-with-rsc.md``, "Receive all conversation messages with RSC": "receive all
    user messages in standard channels ... without being @mentioned", "Filtering at mention
    messages"). Changed: ``recipient`` is that bot, "Test Bot" of the docs' "Installation
    update event" sample. Not a request for it; the other bot's mention reads as its name; a
    reply in a chain, so the app may take it as guidance for a research running there."""
    other_bot = {"id": "28:608cacfd-1cea-40c9-b678-4b93e69bb72b", "name": "Test Bot"}
    activity = sample("channel_reply_mention")
    activity["recipient"] = other_bot
    for bot_id in (other_bot["id"], ""):
        request = translate(activity, bot_id)
        assert request is not None
        message = request.message
        assert not message.addressed
        assert message.text == "ridotest reply to thread"
        assert (message.thread, message.in_thread) == ("1759881511856", True)
        assert request.reference.kind == "channel"


def test_a_file_in_a_channel_is_named_as_not_read() -> None:
    """The attachment: ``microsoftgraph/microsoft-graph-docs-contrib``,
    ``concepts/teams-messaging-overview.md``, "chatMessage schema > attachments > file
    attachment" (a file in a channel is a ``reference`` to its SharePoint URL), unchanged. The
    message around it: the ``microsoft/teams.net`` channel reply (``core/test/
    Microsoft.Teams.BotApps.UnitTests/TeamsActivityTests.cs``, ``json``), the attachment added
    after its HTML copy. ``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/
    bots-filesv4.md``, "Use the Teams bot APIs": the bot APIs' files work "only in the
    ``personal`` context"; a SharePoint link is not a file the bot can read."""
    activity = sample("channel_reply_mention")
    activity["attachments"] += sample("graph_file_attachment")["attachments"]
    request = translate(activity, CHANNEL_BOT)
    assert request is not None
    assert request.message.attachments == ()
    assert request.message.unreadable == (("color.png", "external"),)
    assert request.message.text == "reply to thread" and not request.files_only


# -- channels: the documentation's own mention sample ---------------------------------------------

PRANAV = "29:08q2j2o3jc09au90eucae"  # the sample's mention entity's mentioned.id
DOCS_ROOT = "1481567603816"  # the messageid of the sample's conversation id


def docs_mention() -> dict[str, Any]:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    channel-and-group-conversations.md``, "Work with mentions > Retrieve mentions", JSON tab
    (the same sample under "Add mentions to your messages", and in every stored version up to
    the newest). The sample has no ``id``: added, the ``messageid`` of its conversation id (the
    message is the chain's first)."""
    activity = sample("channel_mention_docs")
    activity["id"] = DOCS_ROOT
    return activity


def test_the_documented_mention_sample_is_a_request_of_its_sender() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    channel-and-group-conversations.md``, "Work with mentions > Retrieve mentions" (JSON), the
    ``id`` added (see :func:`docs_mention`), seen by the mentioned account as the bot. The
    sender has no ``aadObjectId`` there: its ``from.id`` names it."""
    request = translate(docs_mention(), PRANAV)
    assert request is not None
    message = request.message
    assert message.addressed
    assert message.user == "29:9e52142b-5e5e-4d7b-bb3e-e82dcf620000"
    assert (message.thread, message.in_thread) == (DOCS_ROOT, False)
    assert message.channel == encode_conversation(
        "19:aebd0ad4d6ab42c8b9ed19c251c2fc37@thread.skype"
    )
    assert request.reference.service_url == "https://skype.botframework.com"
    # The picture pasted in the message is named as not read (its kind is not one read).
    assert message.unreadable == (("Bender_Rodriguez.png", "type"),)
    again = translate(docs_mention(), PRANAV)
    assert again is not None and again.message.dedupe_key == message.dedupe_key


def test_the_bot_mention_of_the_documented_sample_is_removed() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    channel-and-group-conversations.md``, "Work with mentions > Retrieve mentions" (JSON), the
    ``id`` added; the page says "You must also strip out the @mentions"."""
    request = translate(docs_mention(), PRANAV)
    assert request is not None
    assert request.message.text == "Hey check out this message"


def test_the_documented_mention_sample_is_a_channel_message_for_a_bot_not_mentioned() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    channel-and-group-conversations.md``, "Work with mentions > Retrieve mentions" (JSON), the
    ``id`` added, seen by the sample's own ``recipient`` (``8:orgid:...``), whom it does not
    mention (as a bot with the RSC permission receives it: ``channel-messages-with-rsc.md``)."""
    request = translate(docs_mention(), "8:orgid:6aebbad0-e5a5-424a-834a-20fb051f3c1a")
    assert request is not None
    assert request.reference.kind == "channel"
    assert not request.message.addressed
    assert request.answer_to == docs_mention()["conversation"]["id"]


def test_a_message_back_in_a_channel_is_a_reply_in_its_chain() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/task-modules-and-cards/cards/
    cards-actions.md``, "messageBack > Inbound message example", its trailing comma removed
    (not valid JSON as printed): a channel message (``channelData.channel``, a conversation id
    with ``;messageid=``) without ``conversationType``. The bot: the sample's recipient."""
    activity = sample("channel_message_back")
    request = translate(activity, "28:76096e45-119f-4736-859c-6dfff54395f7")
    assert request is not None
    assert request.reference.kind == "channel"
    assert (request.message.thread, request.message.in_thread) == ("1498171086622", True)
    assert request.answer_to == activity["conversation"]["id"]


# -- personal chats ------------------------------------------------------------------------------

PERSONAL_BOT = "28:c9e8c047-2a74-40a2-b28a-b162d5f5327c"  # the sample's recipient
MEGAN = "7faf8ab2-3d56-4244-b585-20c8a42ed2b8"
DOCS_TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"


def test_a_personal_message_needs_no_mention_and_is_a_thread_of_its_own() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    conversation-messages.md``, "Receive a message", JSON tab, unchanged: a personal chat
    (``a:1...``), the tenant in ``channelData`` only, the message's HTML copy attached."""
    activity = sample("personal_message")
    chat = activity["conversation"]["id"]
    request = translate(activity, PERSONAL_BOT, file_window=600)
    assert request is not None
    message = request.message
    assert message.addressed
    assert message.text == "Hello Teams TestBot.Sending bold-italic rich text"
    assert (message.thread, message.in_thread) == ("1485983408511", False)
    assert message.user == MEGAN
    assert message.workspace == DOCS_TENANT == tenant_of(activity)
    # 131 characters: over the chat layer's 100 for an id, so the thread key names the chat
    # by a digest (the run keeps the id itself to post there).
    assert len(chat) == 131 and message.channel == channel_key(chat)
    assert message.channel.startswith("~") and len(message.channel) <= 100
    assert (message.attachments, message.unreadable) == ((), ())
    assert request.reference == Reference(
        "https://smba.trafficmanager.net/amer/", chat, DOCS_TENANT, "personal"
    )
    assert request.answer_to == chat
    # Files the sender sent on their own wait in the sender's scope of this chat.
    assert message.earlier_files == files_scope(DOCS_TENANT, channel_key(chat), MEGAN)
    assert message.earlier_window == 600


def test_a_file_sent_in_a_personal_chat_is_read_from_its_download_url() -> None:
    """The attachment: ``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/
    bots-filesv4.md``, "Receive files in personal chat > Message activity with file attachment
    example", unchanged (the sample is the ``attachments`` alone). The activity around it: the
    personal message of ``conversation-messages.md``, "Receive a message", whose text and HTML
    copy are left out (the file sent without words)."""
    activity = sample("personal_message")
    del activity["text"]
    activity["attachments"] = sample("file_download_info")["attachments"]
    request = translate(activity, PERSONAL_BOT, file_window=600)
    assert request is not None
    (attachment,) = request.message.attachments
    assert attachment == Attachment(
        id="1150D938-8870-4044-9F2C-5BBDEBA70C9D",
        name="file_example.txt",
        url=(
            "https://contoso.sharepoint.com/personal/johnadams_contoso_com/Documents/"
            "Applications/file_example.txt"
        ),
        attached_by="Megan Bowen",
        extra={"download_url": "https://download.link"},
    )
    assert request.message.unreadable == ()
    assert request.files_only and request.reference.kind == "personal"
    assert activity["attachments"][0]["contentType"] == FILE_DOWNLOAD_INFO


@pytest.mark.parametrize("sent_by", ["bot_reply", "bot_notification"])
def test_a_message_from_a_bot_account_is_not_a_request(sent_by: str) -> None:
    """The bot accounts (``28:...``) of ``MicrosoftDocs/msteams-docs``, ``msteams-platform/
    bots/how-to/conversations/conversation-messages.md``: "Send a message" (JSON tab, the
    bot's reply in the same personal chat) and "Notifications to your message" (JSON tab), as
    the ``from`` of the personal message of "Receive a message" (those samples lack the id and
    service URL of a delivered activity). The same message from its person is a request."""
    activity = sample("personal_message")
    assert translate(activity, PERSONAL_BOT) is not None
    activity["from"] = sample(sent_by)["from"]
    assert activity["from"]["id"].startswith("28:")
    assert translate(activity, PERSONAL_BOT) is None


# -- the bot installed or added: where it may post -------------------------------------------------

INSTALLED_CHANNEL = "19:0b7f32667e064dd9b25d7969801541f4@thread.tacv2"
INSTALLED_TENANT = "b28fdbfd-2b78-4f93-b0f8-8881793f0f8f"


@pytest.mark.parametrize(
    "name",
    [
        # subscribe-to-conversation-events.md, "Installation update event", JSON tab (its
        # doubled opening brace removed: not valid JSON as printed).
        "installation_update_team",
        # subscribe-to-conversation-events.md, "Team members added", JSON tab, "the message
        # your bot receives when the bot is added to a team".
        "conversation_update_bot_added_team",
    ],
)
def test_the_app_installed_in_a_team_is_remembered_in_the_channel_chosen(name: str) -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    subscribe-to-conversation-events.md``: "When bot is added, the conversation id is set to
    the channel id that was selected by the user during the installation process"
    (``channelData.settings.selectedChannel``); the team's own id is elsewhere
    (``channelData.team.id``). Not a message, not a press."""
    activity = sample(name)
    assert reference_of(activity) == Reference(
        "https://smba.trafficmanager.net/amer/",
        INSTALLED_CHANNEL,
        INSTALLED_TENANT,
        "channel",
        activity["channelData"]["team"]["id"],  # the app removed from it forgets its channels
    )
    assert activity["channelData"]["settings"]["selectedChannel"]["id"] == INSTALLED_CHANNEL
    assert activity["channelData"]["team"]["id"] != INSTALLED_CHANNEL
    assert tenant_of(activity) == INSTALLED_TENANT
    assert translate(activity, activity["recipient"]["id"]) is None
    assert translate_press(activity) is None


def test_the_bot_added_to_a_personal_chat_is_remembered_there() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    subscribe-to-conversation-events.md``, "Team members added", JSON tab, "the message your
    bot receives when the bot is added to a one-to-one chat", unchanged (its ids are the
    docs' placeholders)."""
    activity = sample("conversation_update_bot_added_personal")
    assert reference_of(activity) == Reference(
        "https://smba.trafficmanager.net/amer-client-ss.msg/", "***", "<TENANT ID>", "personal"
    )
    assert translate(activity, activity["recipient"]["id"]) is None


def test_a_team_event_names_the_team() -> None:
    """``MicrosoftDocs/msteams-docs``, ``msteams-platform/bots/how-to/conversations/
    subscribe-to-conversation-events.md``, "Team renamed", JSON tab, unchanged: "Conversation
    id is set to team id for all other conversation update scenarios"; the tenant in
    ``channelData`` only."""
    activity = sample("conversation_update_team_renamed")
    team = activity["channelData"]["team"]["id"]
    assert reference_of(activity) == Reference(
        "https://smba.trafficmanager.net/amer-client-ss.msg/", team, DOCS_TENANT, "channel", team
    )
    assert translate(activity, activity["recipient"]["id"]) is None


# -- presses on our buttons ----------------------------------------------------------------------

PRESSER = "b130c271-d2eb-45f9-83ab-9eb3fe3788bc"
PRESS_TENANT = "0d9b645f-597b-41f0-a2a3-ef103fbd91bb"
#: The invoke envelopes of ``create-task-module.md`` and the conversation each names.
ENVELOPES = {
    # "Payload activity properties when a dialog is invoked from a channel (reply to thread)"
    "invoke_channel_reply": "19:6decf54d86d945e4b3924b63a9161a78@thread.skype",
    # "Payload activity properties when a dialog is invoked from a group chat"
    "invoke_group_chat": "19:d77be72390a1416e9644261e9064fa00@thread.skype",
}


@pytest.mark.parametrize("envelope", sorted(ENVELOPES))
@pytest.mark.parametrize("control", list(Control))
def test_a_press_on_our_button_is_a_press_of_its_run(envelope: str, control: Control) -> None:
    """The envelope: ``MicrosoftDocs/msteams-docs``, ``msteams-platform/messaging-extensions/
    how-to/action-commands/create-task-module.md``, "Payload activity properties when a dialog
    is invoked from a channel (reply to thread)" and "... from a group chat" (the invokes
    Teams sends from a channel's reply chain and from a group chat, where our cards are). The
    ``name`` and ``value``: ``MicrosoftDocs/AdaptiveCards``, ``AdaptiveCards/authoring-cards/
    universal-action-model.md``, "``adaptiveCard/action`` Invoke activity > Request format"
    (also ``msteams-docs``' ``User-Specific-Views.md``, "Invoke request sent from Teams client
    to the bot"), with our verb and data; ``serviceUrl`` added (see :func:`as_press`)."""
    activity = as_press(sample(envelope), our_action(control))
    press = translate_press(activity)
    assert press is not None
    assert press.control is control
    assert press.run_id == RUN
    assert press.user == PRESSER  # from.aadObjectId
    assert press.workspace == PRESS_TENANT
    assert press.channel == encode_conversation(ENVELOPES[envelope])
    assert press.language == "en"
    assert press.requested_by == f"teams:{PRESS_TENANT}:{PRESSER}"
    # The conversation is where the card is; nothing of it is a message.
    assert translate(activity, "28:any") is None


def test_a_press_keeps_the_language_of_its_card() -> None:
    """As :func:`test_a_press_on_our_button_is_a_press_of_its_run` (the channel reply
    envelope), on a card written in Chinese (``data.lang`` ``zh``)."""
    activity = as_press(sample("invoke_channel_reply"), our_action(Control.STOP, "zh"))
    press = translate_press(activity)
    assert press is not None and press.language == "zh"


@pytest.mark.parametrize(
    "value",
    [
        # msteams-docs, Universal-actions-for-adaptive-cards/User-Specific-Views.md, "Invoke
        # request sent from Teams client to the bot": an automatic refresh of another card.
        {
            "action": {
                "type": "Action.Execute",
                "id": "",
                "verb": "editOrResolveView",
                "data": {"refresh info": "<refresh info>"},
            },
            "trigger": "automatic",
        },
        # msteams-docs, Universal-actions-for-adaptive-cards/
        # authentication-flow-in-universal-action-for-adaptive-cards.md, "Authentication flow
        # in Action.Execute protocol", step 6: a form's button of another app.
        {
            "action": {
                "id": "abc123",
                "type": "Action.Execute",
                "verb": "saveCommand",
                "data": {"firstName": "Jeff", "lastName": "Derstadt"},
            },
            "state": "123456",
        },
    ],
    ids=["user-specific-view-refresh", "sign-in-state"],
)
def test_an_action_of_another_card_is_not_a_press(value: dict[str, Any]) -> None:
    """The ``value`` objects of the Universal Actions pages named in the parameters, verbatim,
    in the channel reply envelope of ``create-task-module.md``: not one of our verbs, so not
    ours. The same envelope with our verb is a press."""
    envelope = sample("invoke_channel_reply")
    assert translate_press(as_press(envelope, value)) is None
    assert translate_press(as_press(envelope, our_action(Control.CANCEL))) is not None


@pytest.mark.parametrize(
    "name",
    [
        # subscribe-to-conversation-events.md, "Reactions added to bot message", JSON tab.
        "message_reaction",
        # create-task-module.md, "... invoked from a channel (reply to thread)", unchanged.
        "invoke_channel_reply",
        # subscribe-to-conversation-events.md, "Team renamed", JSON tab.
        "conversation_update_team_renamed",
    ],
)
def test_other_activities_are_neither_requests_nor_presses(name: str) -> None:
    """``MicrosoftDocs/msteams-docs`` samples of other activity types (see the parameters):
    a reaction, a message extension's ``composeExtension/fetchTask`` invoke, a conversation
    update. The same activity typed ``message`` would be read as one."""
    activity = sample(name)
    activity.setdefault("serviceUrl", "https://smba.trafficmanager.net/amer/")
    assert translate(activity, activity.get("recipient", {}).get("id", "")) is None
    assert translate_press(activity) is None
    assert translate({**activity, "type": "message"}, "28:any") is not None

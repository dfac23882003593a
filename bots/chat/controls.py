"""Buttons on a run's messages, and a press on one, for every platform.

While a run works, its progress message carries "Stop and write now" and "Cancel"
(:func:`run_buttons`); the report's last message carries 👍 and 👎 (:func:`feedback_buttons`).
A platform renders them in its own way (Slack Block Kit buttons, Feishu card buttons, DingTalk
card buttons) with :attr:`Button.action_id` as the button's name and the run's id as its
value, and turns a press back into a :class:`Press` for ``ChatCommands.press``, which answers
with the private reply the platform shows only to the presser.

Nothing here is trusted from the press but which button and which run: whether the presser
may press it is decided from the stored run (its requester, its thread) and the access lists.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from bots.chat.ids import check_press
from core.words.wording import Language, pick

#: The prefix of every button's action id (``fathom_stop``...): a press on anything else is
#: not ours.
ACTION_PREFIX = "fathom_"


class Control(enum.StrEnum):
    """What a button does."""

    STOP = "stop"  # stop searching and write the report from what was found
    CANCEL = "cancel"  # end the run without a report
    UP = "up"  # 👍 on the report
    DOWN = "down"  # 👎 on the report

    @property
    def is_vote(self) -> bool:
        return self in (Control.UP, Control.DOWN)

    @property
    def action_id(self) -> str:
        return f"{ACTION_PREFIX}{self.value}"


def control_of(action_id: object) -> Control | None:
    """The control a platform's action id names (None: not one of ours)."""
    if not isinstance(action_id, str) or not action_id.startswith(ACTION_PREFIX):
        return None
    try:
        return Control(action_id.removeprefix(ACTION_PREFIX))
    except ValueError:
        return None


@dataclass(frozen=True)
class Button:
    """One button to render: what it does, for which run, what it says."""

    control: Control
    run_id: str
    label: str
    style: Literal["primary", "danger"] | None = None
    #: The language of the message it is on (a platform may send it back with a press).
    language: Language = "en"

    @property
    def action_id(self) -> str:
        return self.control.action_id


def run_buttons(run_id: str, language: Language) -> tuple[Button, ...]:
    """The buttons of a working run's progress message."""
    return (
        Button(
            Control.STOP,
            run_id,
            pick(language, "Stop and write now", "停止并撰写"),
            "primary",
            language,
        ),
        Button(Control.CANCEL, run_id, pick(language, "Cancel", "取消"), "danger", language),
    )


def feedback_buttons(run_id: str, language: Language) -> tuple[Button, ...]:
    """The buttons of a report's last message."""
    return (
        Button(Control.UP, run_id, pick(language, "👍 Useful", "👍 有用"), language=language),
        Button(Control.DOWN, run_id, pick(language, "👎 Not useful", "👎 没用"), language=language),
    )


@dataclass(frozen=True)
class Press:
    """A press on one of our buttons, as every platform's adapter hands it to the shared
    layer (its identity checked by the adapter: Slack's signature, Feishu's token, DingTalk's
    sign or stream). Its ids are checked as it is made (``bots.chat.ids``:
    :class:`~bots.chat.ids.InvalidId`)."""

    platform: str
    workspace: str
    #: Where the pressed message is (a run's buttons only work in that run's channel); None
    #: where the platform binds the press to the run's own message and says nothing more
    #: (a DingTalk card's ``outTrackId``): the run's channel is then the press's.
    channel: str | None
    user: str
    run_id: str
    control: Control
    #: The language of the pressed message, as the press tells it (untrusted; it only words
    #: an answer given without reading the run, such as a failure or a button of no run
    #: here). None: the press does not tell (a DingTalk card callback names only the button
    #: and the card); such an answer then follows the presser's last research.
    language: Language | None = None

    def __post_init__(self) -> None:
        check_press(self)

    @property
    def requested_by(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.user}"

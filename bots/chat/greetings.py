"""A greeting said to the bot on its own ("hi", "Hello!", "你好") is not a research topic.

Microsoft's Teams Store validation guidelines ("Bots > Bot commands", msteams-docs
``concepts/deploy-and-publish/appsource/prepare/teams-store-validation-guidelines.md``): "All
commands that your bot supports must work correctly, including generic commands such as
Hi, Hello, and Help". People greet a bot first on every platform; a research on "hi" costs
a run, searches and a model's report about nothing. The chat layer answers a greeting with
the help (``bots.chat.inbound.ChatCommands.handle``); ``help`` itself is the grammar's.
"""

from __future__ import annotations

import re

#: Greetings, as said alone (case, punctuation, emoji and spacing aside).
GREETINGS = frozenset(
    {
        "hi",
        "hii",
        "hello",
        "hallo",
        "hey",
        "heya",
        "hiya",
        "howdy",
        "yo",
        "hola",
        "greetings",
        "hi there",
        "hello there",
        "hey there",
        "hi all",
        "hello all",
        "hi everyone",
        "hello everyone",
        "good morning",
        "good afternoon",
        "good evening",
        "morning",
        "你好",
        "您好",
        "你好啊",
        "你好呀",
        "大家好",
        "嗨",
        "哈喽",
        "哈啰",
        "哈罗",
        "早",
        "早上好",
        "上午好",
        "中午好",
        "下午好",
        "晚上好",
        "在吗",
        "在么",
        "在不在",
    }
)
#: What is not a word: punctuation, symbols and emoji ("Hi!", "hey 👋", "你好！").
_NOT_WORDS = re.compile(r"[^\w\s]+")


def is_greeting(text: str) -> bool:
    """Whether ``text`` is only a greeting (``Hi!``, ``hello there 👋``, ``您好！``)."""
    words = " ".join(_NOT_WORDS.sub(" ", text).split()).casefold()
    return words in GREETINGS

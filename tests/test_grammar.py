"""The shared command grammar: what starts a research and what is refused, with why."""

from __future__ import annotations

import pytest

from core.chat.commands import CommandError
from core.chat.grammar import (
    CancelCommand,
    HelpCommand,
    ResearchCommand,
    StatusCommand,
    StopCommand,
    UsageCommand,
    help_text,
    parse_command,
)
from core.values import SourceChoice


def parse(text: str) -> object:
    return parse_command(text, default_depth=3, max_depth=10)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("AI chips", ResearchCommand("AI chips", 3, "iterative")),
        ("AI chips depth=5", ResearchCommand("AI chips", 5, "iterative")),
        ("depth=2 AI   chips", ResearchCommand("AI chips", 2, "iterative")),
        ("/research AI chips depth=1", ResearchCommand("AI chips", 1, "iterative")),
        ("E=mc2 history depth=2", ResearchCommand("E=mc2 history", 2, "iterative")),
        (
            "what's new in RISC-V strategy=iterative",
            ResearchCommand("what's new in RISC-V", 3, "iterative"),
        ),
        ("人工智能 医疗 depth=2", ResearchCommand("人工智能 医疗", 2, "iterative")),
        ("AI chips strategy=GRAPH depth=2", ResearchCommand("AI chips", 2, "graph")),
        ("help", HelpCommand()),
        ("  HELP ", HelpCommand()),
        ("status", StatusCommand()),
        ("cancel", CancelCommand()),
        ("cancel 3f2a", CancelCommand("3f2a")),
        (
            "status of fusion energy",
            ResearchCommand("status of fusion energy", 3, "iterative"),
        ),
    ],
)
def test_valid_commands(text: str, expected: object) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "topic is empty"),
        ("   ", "topic is empty"),
        ("depth=3", "topic is empty"),
        ("AI depth=0", "from 1 to 10"),
        ("AI depth=11", "from 1 to 10"),
        ("AI depth=abc", "whole number from 1 to 10"),
        ("AI depth=", "whole number from 1 to 10"),
        ("AI depth=2 depth=3", "given twice"),
        ("AI colour=blue", "Unknown option `colour=`; allowed options: `depth=`, `strategy=`"),
        ("AI strategy=magic", "Unknown strategy 'magic'"),
        ('schedule AI cron="0 9 * * 1" tz=Nowhere/Land', "Unknown timezone 'Nowhere/Land'"),
        ("unschedule", "Say which schedule to remove"),
        ("x" * 2001, "at most 2,000"),
    ],
)
def test_bad_input_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse(text)
    assert message in str(caught.value)


def test_help_names_the_limits() -> None:
    text = help_text(default_depth=3, max_depth=7)
    assert "1 to 7" in text and "default 3" in text and "/research status" in text


def test_schedule_digests_and_unschedule_parse() -> None:
    from core.chat.grammar import DigestsCommand, ScheduleCommand, UnscheduleCommand

    command = parse_command(
        '/research schedule "open-source LLM inference engines" cron="0 9 * * MON" depth=2 '
        "tz=Asia/Shanghai",
        default_depth=3,
        max_depth=10,
    )
    assert command == ScheduleCommand(
        "open-source LLM inference engines", "0 9 * * MON", "Asia/Shanghai", 2, "iterative"
    )
    assert parse_command("digests", default_depth=3, max_depth=10) == DigestsCommand()
    assert parse_command("unschedule ab12", default_depth=3, max_depth=10) == UnscheduleCommand(
        "ab12"
    )


def test_the_default_strategy_comes_from_the_settings() -> None:
    graph = parse_command("AI chips", default_depth=3, max_depth=10, default_strategy="graph")
    assert graph == ResearchCommand("AI chips", 3, "graph")
    chosen = parse_command(
        "AI chips strategy=iterative",
        default_depth=3,
        max_depth=10,
        default_strategy="graph",
    )
    assert chosen == ResearchCommand("AI chips", 3, "iterative")


@pytest.mark.parametrize(
    ("text", "sources"),
    [
        ("AI chips", SourceChoice.ALL),
        ("AI chips sources=web", SourceChoice.WEB),
        ("sources=INTERNAL AI chips depth=2", SourceChoice.INTERNAL),
        ("/research 人工智能 sources=all", SourceChoice.ALL),
    ],
)
def test_sources_choose_the_web_the_internal_sources_or_both(
    text: str, sources: SourceChoice
) -> None:
    command = parse(text)
    assert isinstance(command, ResearchCommand) and command.sources is sources
    assert "sources" not in command.topic


@pytest.mark.parametrize("text", ["AI chips sources=intranet", "AI chips sources="])
def test_bad_sources_are_refused_in_both_languages(text: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse(text)
    english, chinese = str(caught.value), caught.value.text("zh")
    assert "web" in english and "internal" in english and "all" in english
    assert "sources" in chinese and "internal" in chinese and chinese != english


def test_a_schedule_keeps_its_sources() -> None:
    from core.chat.grammar import ScheduleCommand

    command = parse('schedule AI chips cron="0 9 * * MON" sources=internal')
    assert isinstance(command, ScheduleCommand) and command.sources is SourceChoice.INTERNAL
    assert command.topic == "AI chips"
    default = parse('schedule AI chips cron="0 9 * * MON"')
    assert isinstance(default, ScheduleCommand) and default.sources is SourceChoice.ALL
    with pytest.raises(CommandError) as caught:
        parse('schedule AI chips cron="0 9 * * MON" sources=everything')
    assert "Unknown sources 'everything'" in str(caught.value)
    assert "A valid schedule:" in str(caught.value)  # like every refused schedule


def test_help_names_the_sources_option_in_both_languages() -> None:
    for language in ("en", "zh"):
        text = help_text(default_depth=3, max_depth=7, language=language)
        assert "sources=web|internal|all" in text


def test_validate_sources() -> None:
    from core.chat.commands import validate_sources

    assert validate_sources(None) is SourceChoice.ALL
    assert validate_sources(" Web ") is SourceChoice.WEB
    assert validate_sources(SourceChoice.INTERNAL) is SourceChoice.INTERNAL
    assert validate_sources("", SourceChoice.WEB) is SourceChoice.WEB


@pytest.mark.parametrize(
    "text",
    ["stop", "Stop!", "write now", "/research stop", "stop and write now.", "停止", "现在写。"],
)
def test_stop_and_write_now_phrases(text: str) -> None:
    assert parse_command(text, default_depth=3, max_depth=10) == StopCommand()


def test_stop_takes_a_run_id_but_a_topic_that_starts_with_stop_is_a_topic() -> None:
    assert parse_command("stop 1a2b3c4d", default_depth=3, max_depth=10) == StopCommand("1a2b3c4d")
    topic = parse_command("stop smoking", default_depth=3, max_depth=10)
    assert isinstance(topic, ResearchCommand) and topic.topic == "stop smoking"
    words = parse_command("stop words in NLP", default_depth=3, max_depth=10)
    assert isinstance(words, ResearchCommand)


def test_usage_is_a_command_and_a_longer_text_a_topic() -> None:
    assert parse_command("usage", default_depth=3, max_depth=10) == UsageCommand()
    assert parse_command("用量", default_depth=3, max_depth=10) == UsageCommand()
    topic = parse_command("usage of water in farming", default_depth=3, max_depth=10)
    assert isinstance(topic, ResearchCommand)

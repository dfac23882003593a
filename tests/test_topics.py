"""When a proposed search topic repeats one already searched (and when it does not)."""

from __future__ import annotations

import pytest

from core.engine.topics import find_duplicate, is_same_topic, normalise_topic

LONG = "the economic impact of renewable energy subsidies in the European Union"
ASPECTS = ["overview", "recent developments", "key players", "risks", "regulation", "outlook"]


def test_normalise_topic() -> None:
    assert normalise_topic("  Solar—Power:  COSTS!! ") == "solar power costs"
    assert normalise_topic("ＡＩ　Chips") == "ai chips"  # full-width forms (NFKC)
    assert normalise_topic("GPT-4o") == "gpt 4 o"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Solar panel costs", "solar panel costs"),  # case
        ("solar panel costs", "Solar-panel costs?!"),  # punctuation
        ("solar panel costs", "  solar   panel costs "),  # spacing
        ("solar panel costs", "costs of solar panels"),  # word order, stopword, plural
        ("EU AI regulation", "the latest AI regulations in the EU"),  # filler words, plural
        ("GPT-4 benchmarks", "gpt4 benchmark"),  # letter/digit split, plural
        ("lithium battery recycling", "lithium batery recycling"),  # typo
        ("量子计算的最新进展", "量子计算的最新进展。"),  # CJK punctuation
        ("量子计算最新进展", "量子计算的最新进展"),  # CJK near-duplicate
        ("ＡＩ芯片", "AI芯片"),  # full-width
    ],
)
def test_same_topic(a: str, b: str) -> None:
    assert is_same_topic(a, b)
    assert is_same_topic(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("solar panel costs", "wind turbine costs"),
        ("AI chips 2024", "AI chips 2025"),
        ("iPhone 15 review", "iPhone 16 review"),
        (
            "history of the roman empire in the third century",
            "history of the roman empire in the fourth century",
        ),
        ("solar power storage", "solar power storage — outlook"),
        ("量子计算的最新进展", "量子计算的商业应用"),
        ("量子计算", "人工智能"),
        ("cats", "cars"),
    ],
)
def test_different_topics(a: str, b: str) -> None:
    assert not is_same_topic(a, b)
    assert not is_same_topic(b, a)


def test_aspects_of_a_long_topic_are_different_searches() -> None:
    """A long shared prefix must not make every aspect look like a repeat."""
    topics = [f"{LONG} — {aspect}" for aspect in ASPECTS]
    for i, topic in enumerate(topics):
        assert find_duplicate(topic, topics[:i]) is None, topic
    assert find_duplicate(f"{LONG.upper()}: OUTLOOK", topics) == topics[-1]


def test_find_duplicate_returns_the_searched_topic() -> None:
    searched = ["battery recycling", "Solar Panel Costs", "wind power"]
    assert find_duplicate("costs of solar panels", searched) == "Solar Panel Costs"
    assert find_duplicate("tidal energy", searched) is None
    assert find_duplicate("anything", []) is None


def test_blank_topics() -> None:
    assert is_same_topic("", "  ")
    assert not is_same_topic("", "solar")
    assert not is_same_topic("!!!", "solar")

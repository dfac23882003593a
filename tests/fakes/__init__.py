"""Local fakes of Fathom's external services, served for real on 127.0.0.1."""

from __future__ import annotations

from tests.fakes.llm import (
    Fail,
    FakeLLM,
    FakeLLMServer,
    Hang,
    Held,
    RecordedRequest,
    Reply,
    build_llm_app,
)
from tests.fakes.search import FakeSearch, FakeSearchServer, build_search_app
from tests.fakes.server import BackgroundServer, require_loopback

__all__ = [
    "BackgroundServer",
    "Fail",
    "FakeLLM",
    "FakeLLMServer",
    "FakeSearch",
    "FakeSearchServer",
    "Hang",
    "Held",
    "RecordedRequest",
    "Reply",
    "build_llm_app",
    "build_search_app",
    "require_loopback",
]
from tests.fakes.slack import FakeSlack, FakeSlackServer, SlackCall

__all__ += ["FakeSlack", "FakeSlackServer", "SlackCall"]

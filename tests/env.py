"""The environment of test and benchmark processes, free of a developer's own settings."""

from __future__ import annotations

import os

#: Prefixes of Fathom's settings (and its providers'); never inherited by tests or benchmarks.
ENV_PREFIXES = (
    "FATHOM_",
    "OPENAI_",
    "SEARXNG_",
    "TAVILY_",
    "BRAVE_",
    "SLACK_",
    "FEISHU_",
    "DINGTALK_",
    "TEAMS_",
)


def is_fathom_setting(name: str) -> bool:
    return name.startswith(ENV_PREFIXES) or name == "DATABASE_URL"


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment minus Fathom settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not is_fathom_setting(k)}
    env.update(extra)
    return env

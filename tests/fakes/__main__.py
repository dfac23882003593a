"""`python -m tests.fakes`: serve the fake LLM and SearXNG until SIGINT/SIGTERM.

Prints one JSON line with the endpoints on stdout (for scripts) and the env vars to export on
stderr (for people), so Fathom can be run with no API key.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from types import FrameType

from tests.fakes.llm import FakeLLMServer
from tests.fakes.search import FakeSearchServer
from tests.fakes.server import require_loopback

API_KEY = "fake-key"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--llm-port", type=int, default=0)
    parser.add_argument("--search-port", type=int, default=0)
    parser.add_argument("--llm-latency", type=float, default=0.0)
    parser.add_argument("--search-latency", type=float, default=0.0)
    parser.add_argument(
        "--judge",
        choices=("lenient", "literal"),
        default="lenient",
        help="how the fake verifier judges claims (FakeLLM.judge)",
    )
    args = parser.parse_args(argv)
    try:
        host = require_loopback(args.host)
    except ValueError as exc:
        parser.error(str(exc))

    stopping: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stopping.append(signum)  # only a flag: handlers must not take locks

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    with (
        FakeLLMServer(host=host, port=args.llm_port) as llm,
        FakeSearchServer(host=host, port=args.search_port) as search,
    ):
        llm.fake.latency, search.fake.latency = args.llm_latency, args.search_latency
        llm.fake.judge = args.judge
        info = {
            "openai_base_url": llm.base_url,
            "searxng_url": search.url,
            "openai_api_key": API_KEY,
        }
        print(json.dumps(info), flush=True)
        print(
            "Fakes running. In another shell:\n"
            f"  export OPENAI_BASE_URL={llm.base_url} OPENAI_API_KEY={API_KEY}\n"
            f"  export FATHOM_SEARCH=searxng SEARXNG_URL={search.url}\n"
            "Press Ctrl+C to stop.",
            file=sys.stderr,
            flush=True,
        )
        while not stopping:
            time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())

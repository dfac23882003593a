"""Which threads may use an MCP server: its ``channels`` are thread-key prefixes.

A thread key is ``platform:workspace:channel:thread`` (``slack:T1:C1:1712.5``,
``cli:local:operator``). A prefix matches component by component, so ``slack:T1`` covers every
channel of workspace T1 but not workspace T10; a server without channels is the console's
(``cli``) only.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The platform of the console (``fathom research``): the only one a server without
#: ``channels`` serves.
CONSOLE = "cli"


def channel_allows(channels: Sequence[str], thread_key: str) -> bool:
    """Whether a server configured with ``channels`` may be used in ``thread_key`` (a full
    key, or a partial one of 2 or 3 parts such as ``slack:T1:C1`` for ``fathom sources test
    --channel``)."""
    parts = thread_key.strip().split(":")
    if not parts or not parts[0]:
        return False
    if not channels:
        return parts[0] == CONSOLE
    for channel in channels:
        prefix = channel.strip().split(":")
        if prefix and all(prefix) and prefix == parts[: len(prefix)]:
            return True
    return False

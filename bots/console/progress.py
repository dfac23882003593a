"""Progress of a run in a terminal: a live status line on a TTY, plain lines otherwise.

Everything goes to stderr so that stdout carries only the report (or JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.progress import ProgressEvent, ProgressKind

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status


class ConsoleProgress:
    def __init__(self, console: Console, *, quiet: bool = False) -> None:
        self._console = console
        self._quiet = quiet
        self._status: Status | None = None
        self.events: list[ProgressEvent] = []

    async def publish(self, event: ProgressEvent) -> None:
        self.events.append(event)
        if self._quiet:
            return
        if not self._console.is_terminal:
            self._console.print(event.text, markup=False, highlight=False, soft_wrap=True)
            return
        if event.kind in (ProgressKind.SEARCHED, ProgressKind.FINISHED, ProgressKind.STARTED):
            self._console.print(event.text, markup=False, highlight=False)
        if event.kind is ProgressKind.FINISHED:
            self.close()
        elif self._status is None:
            self._status = self._console.status(event.text)
            self._status.start()
        else:
            self._status.update(event.text)

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

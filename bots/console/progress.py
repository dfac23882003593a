"""Progress of a run in a terminal: a live status line on a TTY, plain lines otherwise.

Everything goes to stderr so that stdout carries only the report (or JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.engine.progress import ProgressEvent, ProgressKind

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
        line = self._line(event)
        if line is not None:
            self._console.print(line, markup=False, highlight=False, soft_wrap=True)
        if not self._console.is_terminal or event.kind is ProgressKind.FINISHED:
            self.close()
        elif self._status is None:
            self._status = self._console.status(event.text)
            self._status.start()
        else:
            self._status.update(event.text)

    @staticmethod
    def _line(event: ProgressEvent) -> str | None:
        """The lasting lines; transient statuses only show in the spinner on a terminal."""
        if event.kind is ProgressKind.SEARCHED:
            return f"{event.text} ({event.topic})" if event.topic else event.text
        if event.kind in (ProgressKind.STARTED, ProgressKind.FINISHED):
            return event.text
        return None

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

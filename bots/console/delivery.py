"""The console's delivery: how ``fathom research`` and ``fathom resume`` attend a run through
the research job (``core.operations.job.ResearchJob.attend``): its progress as live lines in
the terminal, its files from the local disk. The command shows the outcome itself, as asked
(the report, ``--json``, ``-o``), so nothing is posted."""

from __future__ import annotations

from bots.console.files import LocalFiles
from bots.console.progress import ConsoleProgress
from core.operations.job import AttendedDelivery


class ConsoleDelivery(AttendedDelivery):
    """The terminal's ``Delivery``: ``progress`` (stderr) and :class:`LocalFiles`."""

    def __init__(self, progress: ConsoleProgress) -> None:
        super().__init__(progress, LocalFiles())
        self._lines = progress

    async def aclose(self) -> None:
        """Stop the live status line."""
        self._lines.close()

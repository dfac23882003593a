"""The typed values a run's record carries, converted once where a row is read
(:func:`storage.sql.run_record`): its status, its delivery state, the sources it searches and
its thread's key; and a vote on its report. The engine, the chat layer and the platforms use
these types as they are, never a string re-parsed at each use, and the stores take them as
they are on their writes (each converts them where it writes its row).

The leaf of the import graph: it imports only the standard library and pydantic, so storage
(which imports it) and every layer above can use it, and importing it loads no SQLAlchemy.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from pydantic import BaseModel, ConfigDict


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


UNFINISHED_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
FINISHED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class DeliveryState(enum.StrEnum):
    """``research_runs.delivery``: the finished run's outcome still has to reach its thread,
    it has, or posting it was given up (None: a run not finished, or one whose caller shows
    the outcome itself)."""

    PENDING = "pending"
    POSTED = "posted"
    FAILED = "failed"


class SourceChoice(enum.StrEnum):
    """Which sources a run searches (``sources=`` of ``/research``, ``--sources``)."""

    WEB = "web"
    INTERNAL = "internal"
    #: The web and every internal source the run's channel may use.
    ALL = "all"


class Vote(enum.StrEnum):
    """A person's rating of a report (👍 / 👎 on its last message; ``run_feedback.value``)."""

    UP = "up"
    DOWN = "down"


class ThreadKey(BaseModel):
    """``<platform>:<workspace>:<channel>:<thread>``; the thread part may contain ':'."""

    model_config = ConfigDict(frozen=True)

    platform: str
    workspace: str
    channel: str
    thread: str

    @classmethod
    def parse(cls, key: str) -> ThreadKey:
        parts = key.split(":", 3)
        if len(parts) != 4 or not all(p.strip() for p in parts):
            raise ValueError(
                f"thread key {key!r} is not of the form <platform>:<workspace>:<channel>:<thread>"
            )
        return cls(platform=parts[0], workspace=parts[1], channel=parts[2], thread=parts[3])

    def __str__(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.thread}"


class ReportDocument(BaseModel):
    """What a run's long report became on its platform (``research_runs.report_document``):
    a document (``kind`` ``canvas`` on Slack, ``docx`` on Feishu; its ``id`` and ``url``), or,
    with ``kind`` :data:`PARTS`, the platform refused documents and the report went as the
    thread's usual parts (``reason``: why). Recorded before the thread's summary (or the
    parts) is posted, so a resumed delivery never creates a second document."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    #: ``canvas``, ``docx``, or :data:`PARTS`.
    kind: str
    id: str = ""
    url: str = ""
    reason: str = ""

    PARTS: ClassVar[str] = "parts"

    @property
    def refused(self) -> bool:
        """Whether the platform refused the document (the report went as parts)."""
        return self.kind == self.PARTS

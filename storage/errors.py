"""What the stores raise when the database refuses a write for a reason the caller must handle.

Each says which rule was hit (one active run per thread, the per-user limit, fencing, the
variables' version) and carries what the caller needs to answer it.
"""

from __future__ import annotations

from typing import Any

from storage.records import RunRecord


class RunNotFound(LookupError):
    """The run id names no run."""


class ClaimLost(RuntimeError):
    """The run is no longer held by this claim: another runner took it over."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} is no longer held by this runner (taken over)")
        self.run_id = run_id


class ThreadBusy(RuntimeError):
    """The thread already has a queued or running run (one active run per thread)."""

    def __init__(self, active: RunRecord | None) -> None:
        which = f" (run {active.id})" if active is not None else ""
        super().__init__(f"a research is already running in this thread{which}")
        self.active = active


class UserBusy(RuntimeError):
    """The requester already has ``limit`` queued or running runs (the per-user limit)."""

    def __init__(self, active: int, limit: int) -> None:
        super().__init__(f"{active} runs of this user are queued or running (limit {limit})")
        self.active = active
        self.limit = limit


class QuotaReached(RuntimeError):
    """The requester has used today's quota (``kind``: ``runs`` or ``tokens``); ``reserved``:
    of the tokens counted, how many are held by their queued and running runs (freed as far as
    those do not spend them)."""

    def __init__(self, kind: str, used: int, limit: int, reserved: int = 0) -> None:
        held = f", {reserved} of them reserved by unfinished runs" if reserved else ""
        super().__init__(f"{used} {kind} today{held} (limit {limit})")
        self.kind = kind
        self.used = used
        self.limit = limit
        self.reserved = reserved


class VariablesConflict(RuntimeError):
    """The thread's variables changed since the version the checkpoint was based on."""

    def __init__(self, variables: dict[str, Any], version: int) -> None:
        super().__init__(f"thread variables are at version {version}")
        self.variables = variables
        self.version = version

"""The documents Fathom made for reports (a Slack canvas, a Feishu cloud document), deleted
on their platform once their runs are deleted: ``fathom forget``, ``fathom prune`` and
housekeeping's retention (``storage.RunDocument``, returned by the store that deleted them).

Each is asked of its platform's posters (``ThreadPosters.delete_document``; one already
gone counts as deleted). What is not deleted (its platform not configured in this process, a
platform that cannot delete documents, the platform's refusal, an outage) comes back with
why and its address: the runs' rows are gone already, so the caller prints or logs these,
the only record left of what stays on the platform for an admin to delete by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bots.chat.delivery import ThreadPosters
from storage import RunDocument

#: The longest account of a platform's answer in a line.
_REASON_CHARS = 200


@dataclass(frozen=True)
class Undeleted:
    """A document left on its platform, and why."""

    document: RunDocument
    reason: str

    def line(self) -> str:
        """One line for an admin: which document, where, why, and its address."""
        thread, document = self.document
        where = document.url or "(no address: find it by its id)"
        return (
            f"{document.kind} {document.id} of {thread} was not deleted ({self.reason}); "
            f"delete it by hand: {where}"
        )


async def delete_documents(
    documents: Sequence[RunDocument], posters: Mapping[str, ThreadPosters]
) -> list[Undeleted]:
    """Delete each document through ``posters`` (the opened platforms' outbound sides, by
    platform name); the ones not deleted, with why. Never raises for one document's failure:
    the others are still tried."""
    left: list[Undeleted] = []
    for item in documents:
        platform = item.thread.platform
        owner = posters.get(platform)
        if owner is None:
            left.append(Undeleted(item, f"{platform} is not configured in this process"))
            continue
        try:
            await owner.delete_document(item.thread, item.document)
        except NotImplementedError:
            left.append(Undeleted(item, f"{platform} cannot delete documents in this release"))
        except Exception as exc:  # its platform's refusal or an outage: said, the rest go on
            said = " ".join(f"{type(exc).__name__}: {exc}".split())[:_REASON_CHARS]
            left.append(Undeleted(item, f"{platform} answered {said}"))
    return left

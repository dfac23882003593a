"""Long reports as Feishu cloud documents (docx), through the official ``lark-oapi`` SDK.

:meth:`FeishuDocs.publish` makes one document in the app's space and returns its id and link:

1. create it (``docx.v1.document.acreate``: ``POST /open-apis/docx/v1/documents``
   ``{folder_token, title}``; the folder is ``FATHOM_FEISHU_DOC_FOLDER``, the app's root
   space when unset);
2. convert the report's body from Markdown (``docx.v1.document.aconvert``: ``POST
   /open-apis/docx/v1/documents/blocks/convert``) and check the blocks again
   (``bots.feishu.doc_blocks``); the sources list and its quotes are blocks made here;
3. insert them in order, at most 1,000 blocks a call (``POST
   /open-apis/docx/v1/documents/:document_id/blocks/:document_id/descendant``, sent as a raw
   request: the SDK's ``Block`` model would drop the fields of block types it does not know);
4. share it: the chat gets ``view`` (``drive.v1.permission_member.acreate``, ``member_type``
   ``openchat``; in a one-to-one chat, which is no group, the requester's ``openid``), and
   link sharing is set to exactly what ``FATHOM_FEISHU_DOC_SHARING`` says
   (``drive.v2.permission_public.apatch``: ``closed``, or ``tenant_readable`` for
   ``tenant``), whatever the tenant's default for new documents;
5. its link (``drive.v1.meta.abatch_query`` with ``with_url``: the tenant's own domain).

Whatever fails after the document exists (a cancelled delivery too) deletes it (best
effort) before the error goes on: no half-filled document, none that nobody in the chat can
open, none readable more widely than the setting says. Feishu's answers that say documents
can never be made here (a missing scope, a tenant's policy, a folder the app may not write
to, a plan without the feature) become :class:`DocsRefused`, remembered per tenant for the
life of the process (:class:`RefusedTenants`: later runs do not ask again); an answer about
this one document (content Feishu would not take, a chat it would not share with) refuses it
for this run only. Rate limits (``99991400``), 5xx and network failures go on as they are:
the job retries them. :meth:`FeishuDocs.delete` moves a document to the recycle bin
(``drive.v1.file.adelete``, ``type=docx``); one already gone counts as deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar, cast

from lark_oapi.api.docx.v1 import (
    ConvertDocumentRequest,
    ConvertDocumentRequestBody,
    CreateDocumentRequest,
    CreateDocumentRequestBody,
)
from lark_oapi.api.drive.v1 import (
    BaseMember,
    BatchQueryMetaRequest,
    CreatePermissionMemberRequest,
    DeleteFileRequest,
    MetaRequest,
    RequestDoc,
)
from lark_oapi.api.drive.v2 import PatchPermissionPublicRequest, PermissionPublic
from lark_oapi.core.enum import AccessTokenType, HttpMethod
from lark_oapi.core.model import BaseRequest

from bots.feishu.api import FeishuApi, FeishuError, response_body
from bots.feishu.doc_blocks import (
    BlockTree,
    batches,
    body_markdown,
    safe_blocks,
    source_blocks,
    split_sources,
)
from core.engine.sources import is_link
from core.models import Source
from core.words.wording import Language

T = TypeVar("T")

log = logging.getLogger(__name__)

Sharing = Literal["chat", "tenant"]

#: Answers that say this app can make no documents in this tenant (remembered): a missing
#: scope ("通用错误码" 99991672, 99991679, 99991676), the app unusable there (99991673), a plan
#: without the feature (90003087, 90003088), the folder missing or not the app's (1770039,
#: 1770040), no permission on what it made (1770032), and a tenant's sharing policy
#: ("增加协作者权限": 1063002 permission denied, 1063003 refused by the tenant's controls,
#: 1063004 no share permission).
TENANT_REFUSALS = frozenset(
    {
        99991672,
        99991679,
        99991676,
        99991673,
        90003087,
        90003088,
        1770039,
        1770040,
        1770032,
        1063002,
        1063003,
        1063004,
    }
)
#: Answers about this one document (this run only): content the document would not take
#: ("创建文档" error table: invalid param, too many blocks, too deep, schema or relation
#: mismatch, a block that cannot be created, too much text), and a chat it would not share
#: with (1063001 invalid parameter).
DOCUMENT_REFUSALS = frozenset(
    {
        1770001,
        1770004,
        1770005,
        1770006,
        1770007,
        1770010,
        1770011,
        1770013,
        1770014,
        1770028,
        1770029,
        1770033,
        4000027,
        1063001,
    }
)
#: "删除文件或文件夹": the file does not exist, or is deleted already.
GONE = frozenset({1061003, 1061007, 1065200})
#: The permission a chat (or the requester) gets, and link sharing per setting.
VIEW = "view"
LINK_SHARING: dict[Sharing, str] = {"chat": "closed", "tenant": "tenant_readable"}


class DocsRefused(Exception):
    """Feishu refuses the document (``reason``): for the whole tenant (``tenant_wide``, then
    remembered) or for this one report. ``first``: False when it was known before asking."""

    def __init__(self, reason: str, *, tenant_wide: bool, first: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.tenant_wide = tenant_wide
        self.first = first


def refusal(error: FeishuError) -> DocsRefused | None:
    """Feishu's answer as a refusal of documents, or None (retried, or a plain failure)."""
    if error.code in TENANT_REFUSALS:
        return DocsRefused(str(error), tenant_wide=True)
    if error.code in DOCUMENT_REFUSALS:
        return DocsRefused(str(error), tenant_wide=False)
    return None


class RefusedTenants:
    """The tenants whose Feishu refused documents in this process (not in the database: a
    restarted process asks once more). The first refusal is logged by the run's delivery
    (``bots.chat.delivery``); later ones are known here and not logged again."""

    def __init__(self) -> None:
        self._reasons: dict[str, str] = {}

    def reason(self, tenant: str) -> str | None:
        return self._reasons.get(tenant)

    def refuse(self, tenant: str, reason: str) -> None:
        self._reasons.setdefault(tenant, reason)


@dataclass(frozen=True)
class Audience:
    """Who may read a report's document: the chat's members (``chat_id``), or in a
    one-to-one chat (``private``) the requester (``requester``, an open id)."""

    chat_id: str
    requester: str = ""
    private: bool = False

    def member(self) -> tuple[str, str]:
        """(``member_type``, ``member_id``) of "增加协作者权限"."""
        if self.private and self.requester:
            return "openid", self.requester
        return "openchat", self.chat_id


@dataclass(frozen=True)
class PublishedDoc:
    document_id: str
    url: str


class FeishuDocs:
    """The app's cloud documents (one per process, shared by every run's poster)."""

    def __init__(self, api: FeishuApi, *, folder: str = "", sharing: Sharing = "chat") -> None:
        self._api = api
        self._folder = folder
        self._sharing: Sharing = sharing
        self.refused = RefusedTenants()

    async def publish(
        self,
        tenant: str,
        title: str,
        markdown: str,
        sources: Sequence[Source],
        quotes: Mapping[int, Sequence[str]],
        language: Language,
        audience: Audience,
    ) -> PublishedDoc:
        """The report (``markdown``, its ``sources`` and their ``quotes``) as a document
        readable by ``audience`` (and the tenant by link when the setting says so)."""
        known = self.refused.reason(tenant)
        if known is not None:
            raise DocsRefused(known, tenant_wide=True, first=False)
        # The calls that do not wait for each other go together (bench/delivery.py: one
        # after the other, a document took 1.75x the report's cards): the document and the
        # conversion of its body, then its content, its sharing and its link.
        body = split_sources(markdown)
        made, converted = await asyncio.gather(
            self._create(title),
            self._convert(body_markdown(body, sources), sources) if body else _nothing(),
            return_exceptions=True,
        )
        if isinstance(made, BaseException):
            if isinstance(made, FeishuError):
                raise self._refused(tenant, made) from made
            raise made
        document_id = made
        try:
            if isinstance(converted, BaseException):
                raise converted
            sourced = source_blocks(sources, quotes, language)
            content = converted + sourced if converted is not None else sourced
            answers = await _all(
                self._insert(document_id, content),
                self._share(document_id, audience),
                self._url(document_id),
            )
            url = str(answers[2])
        except asyncio.CancelledError:  # (a shutdown): the next attempt makes its own
            await asyncio.shield(self._discard(document_id))
            raise
        except Exception as exc:
            await self._discard(document_id)
            if isinstance(exc, FeishuError):
                raise self._refused(tenant, exc) from exc
            raise
        return PublishedDoc(document_id, url)

    def _refused(self, tenant: str, error: FeishuError) -> Exception:
        refused = refusal(error)
        if refused is None:
            return error
        if refused.tenant_wide:
            self.refused.refuse(tenant, refused.reason)
        return refused

    async def _create(self, title: str) -> str:
        body = CreateDocumentRequestBody.builder().title(title[:800]).folder_token(self._folder)
        request = CreateDocumentRequest.builder().request_body(body.build()).build()
        response = await self._api.call(self._api.client.docx.v1.document.acreate, request)
        document = (response_body(response).get("data") or {}).get("document") or {}
        document_id = str(document.get("document_id") or "")
        if not document_id:
            raise FeishuError(200, -1, "no data.document.document_id in Feishu's answer")
        return document_id

    async def _convert(self, markdown: str, sources: Sequence[Source]) -> BlockTree:
        body = ConvertDocumentRequestBody.builder().content_type("markdown").content(markdown)
        request = ConvertDocumentRequest.builder().request_body(body.build()).build()
        response = await self._api.call(self._api.client.docx.v1.document.aconvert, request)
        data = response_body(response).get("data") or {}
        first, blocks = data.get("first_level_block_ids"), data.get("blocks")
        if not isinstance(first, list) or not isinstance(blocks, list):
            raise FeishuError(200, -1, "no data.first_level_block_ids in Feishu's answer")
        allowed = [s.url for s in sources if is_link(s.url)]
        return safe_blocks(first, blocks, allowed)

    async def _insert(self, document_id: str, tree: BlockTree) -> None:
        for children, descendants in batches(tree):
            request = (
                BaseRequest.builder()
                .http_method(HttpMethod.POST)
                .uri("/open-apis/docx/v1/documents/:document_id/blocks/:block_id/descendant")
                .paths({"document_id": document_id, "block_id": document_id})
                .queries([("document_revision_id", "-1")])
                .token_types({AccessTokenType.TENANT})
                .body({"children_id": children, "index": -1, "descendants": descendants})
                .build()
            )
            await self._api.call(self._api.client.arequest, request)

    async def _share(self, document_id: str, audience: Audience) -> None:
        member_type, member_id = audience.member()
        member = BaseMember.builder().member_type(member_type).member_id(member_id).perm(VIEW)
        request = (
            CreatePermissionMemberRequest.builder()
            .token(document_id)
            .type("docx")
            .request_body(member.build())
            .build()
        )
        public = PermissionPublic.builder().link_share_entity(LINK_SHARING[self._sharing])
        patch = (
            PatchPermissionPublicRequest.builder()
            .token(document_id)
            .type("docx")
            .request_body(public.build())
            .build()
        )
        await _all(
            self._api.call(self._api.client.drive.v1.permission_member.acreate, request),
            self._api.call(self._api.client.drive.v2.permission_public.apatch, patch),
        )

    async def _url(self, document_id: str) -> str:
        doc = RequestDoc.builder().doc_token(document_id).doc_type("docx").build()
        body = MetaRequest.builder().request_docs([doc]).with_url(True).build()
        request = BatchQueryMetaRequest.builder().request_body(body).build()
        response = await self._api.call(self._api.client.drive.v1.meta.abatch_query, request)
        metas = (response_body(response).get("data") or {}).get("metas") or []
        url = next((str(m.get("url")) for m in metas if isinstance(m, dict) and m.get("url")), "")
        if not is_link(url):
            raise FeishuError(200, -1, "no link to the document in Feishu's answer")
        return url

    async def _discard(self, document_id: str) -> None:
        try:
            await self.delete(document_id)
        except Exception as exc:  # the error that brought us here is the one to report
            log.warning("feishu: a half-made document %s is left (%s)", document_id, exc)

    async def delete(self, document_id: str) -> None:
        """Move the document to the recycle bin; one already gone counts as deleted."""
        request = DeleteFileRequest.builder().file_token(document_id).type("docx").build()
        try:
            await self._api.call(self._api.client.drive.v1.file.adelete, request)
        except FeishuError as exc:
            if exc.code not in GONE:
                raise


async def _nothing() -> None:
    """No body to convert (a report that is its sources list only)."""


async def _all(*calls: Awaitable[T]) -> list[T]:
    """Every call's answer, the calls made together; each call ends (answered or failed)
    before the first failure, in the calls' order, is raised: nothing is left running when
    the caller discards the document."""
    done = await asyncio.gather(*calls, return_exceptions=True)
    for result in done:
        if isinstance(result, BaseException):
            raise result
    return cast(list[T], done)

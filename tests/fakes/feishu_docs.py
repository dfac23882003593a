"""The Feishu cloud document (docx) and drive endpoints of the fake Feishu Open API.

As Feishu documents them (the pages named on each handler, read from open.feishu.cn's
server API reference) and lark-oapi 1.7.5 calls them:

- ``POST /open-apis/docx/v1/documents`` ("创建文档"): ``{folder_token, title}`` →
  ``data.document {document_id, revision_id, title}``; scope ``docx:document`` or
  ``docx:document:create``; a folder the app cannot write to is ``1770040``.
- ``POST /open-apis/docx/v1/documents/blocks/convert`` ("Markdown/HTML 内容转换为文档块"):
  ``{content_type: "markdown", content}`` → ``data.first_level_block_ids`` (the order) and
  ``data.blocks`` (every block with temporary ids, ``parent_id`` empty, NOT in document
  order); tables carry ``table.property.merge_info`` (read-only: the insert refuses it);
  scope ``docx:document.block:convert``.
- ``POST /open-apis/docx/v1/documents/:document_id/blocks/:block_id/descendant`` ("创建嵌套
  块"): ``{children_id, index, descendants}``, at most 1000 blocks a call, every id named
  present, no ``merge_info``; scope ``docx:document``.
- ``POST /open-apis/drive/v1/permissions/:token/members?type=docx`` ("增加协作者权限"):
  ``{member_type, member_id, perm}``; scope ``docs:permission.member:create`` or
  ``drive:drive``; ``1063003`` when a tenant policy forbids it (``fail_next``).
- ``PATCH /open-apis/drive/v2/permissions/:token/public?type=docx`` ("更新云文档权限设置"):
  ``{link_share_entity, ...}`` (incremental); scope ``docx:document`` or ``drive:drive``.
- ``POST /open-apis/drive/v1/metas/batch_query`` ("获取文件元数据"): ``{request_docs:
  [{doc_token, doc_type}], with_url}`` → ``data.metas[].url``; scope
  ``drive:drive.metadata:readonly`` or ``drive:drive``.
- ``DELETE /open-apis/drive/v1/files/:file_token?type=docx`` ("删除文件或文件夹"): into the
  recycle bin; a token that is gone is ``1061007`` (404); scope ``space:document:delete``
  or ``drive:drive``.

A missing scope is Feishu's generic ``99991672`` ("Access denied. One of the following
scopes is required", HTTP 400, "通用错误码").
"""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

#: Feishu's generic code of a missing scope ("通用错误码").
MISSING_SCOPE = 99991672
#: Blocks one descendant call may insert ("Markdown/HTML 内容转换为文档块": 最多 1000 个块).
MAX_DESCENDANTS = 1000
#: The scopes docs/feishu.md asks for the long reports as documents (all granted by default).
DOCS_SCOPES = (
    "docx:document",
    "docx:document.block:convert",
    "docs:permission.member:create",
    "drive:drive.metadata:readonly",
    "space:document:delete",
)
#: Each endpoint's scopes: any one of them lets the app call it (the pages' 权限要求).
SCOPES = {
    "docx_create": ("docx:document", "docx:document:create"),
    "docx_convert": ("docx:document.block:convert",),
    "docx_insert": ("docx:document",),
    "perm_member": ("docs:permission.member:create", "drive:drive", "drive:file", "docs:doc"),
    "perm_public": ("docx:document", "drive:drive", "docs:permission.setting:write_only"),
    "metas": ("drive:drive.metadata:readonly", "drive:drive"),
    "file_delete": ("space:document:delete", "drive:drive"),
}
DOC_KINDS = frozenset(SCOPES)
#: Where a document's URL points (the tenant's own domain on Feishu).
DOC_URL = "https://fathom-test.feishu.cn/docx/"

Answer = tuple[int, dict[str, Any], dict[str, str]]


def _ok(data: dict[str, Any] | None = None) -> Answer:
    return 200, {"code": 0, "msg": "success", "data": data or {}}, {}


def _error(status: int, code: int, msg: str) -> Answer:
    return status, {"code": code, "msg": msg}, {}


@dataclass
class FakeDocument:
    """A docx document the app created: its title, folder, blocks (each inserted top-level
    block's id in order, and every block by id), collaborators and link sharing."""

    document_id: str
    title: str
    folder_token: str
    top: list[str] = field(default_factory=list)
    blocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    members: list[dict[str, str]] = field(default_factory=list)
    public: dict[str, Any] = field(default_factory=lambda: {"link_share_entity": "closed"})
    deleted: bool = False
    inserts: int = 0  # descendant calls that took effect

    def ordered_blocks(self) -> list[dict[str, Any]]:
        """Every block, depth first in document order."""
        found: list[dict[str, Any]] = []

        def walk(block_id: str) -> None:
            block = self.blocks[block_id]
            found.append(block)
            for child in block.get("children") or []:
                walk(child)

        for block_id in self.top:
            walk(block_id)
        return found

    def text(self) -> str:
        """The document's text: each block's text runs on a line, in order."""
        return "\n".join(block_text(block) for block in self.ordered_blocks())

    def links(self) -> list[str]:
        """Every link of the document's text runs (URL-decoded as Feishu shows them)."""
        from urllib.parse import unquote

        return [
            unquote(element["text_run"]["text_element_style"]["link"]["url"])
            for block in self.ordered_blocks()
            for element in _elements(block)
            if element.get("text_run", {}).get("text_element_style", {}).get("link")
        ]


_TEXT_KEYS = (
    "text",
    "bullet",
    "ordered",
    "quote",
    "code",
    "todo",
    *(f"heading{n}" for n in range(1, 10)),
)


def _elements(block: dict[str, Any]) -> list[dict[str, Any]]:
    for key in _TEXT_KEYS:
        if isinstance(block.get(key), dict):
            return list(block[key].get("elements") or [])
    return []


def block_text(block: dict[str, Any]) -> str:
    return "".join(
        str(e.get("text_run", {}).get("content", "")) + ("@" if "mention_user" in e else "")
        for e in _elements(block)
    )


# -- a small Markdown converter (the shapes of Feishu's convert answer) ----------------------

_HEADING = re.compile(r"^(#{1,9})[ \t]+(.*)$")
_BULLET = re.compile(r"^[ \t]*[-*+][ \t]+(.*)$")
_ORDERED = re.compile(r"^[ \t]*\d+[.)][ \t]+(.*)$")
_QUOTE = re.compile(r"^[ \t]*>[ \t]?(.*)$")
_IMAGE = re.compile(r"^!\[([^\]]*)\]\(([^)\s]+)\)$")
_LINK = re.compile(r"(?<!\\)\[((?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]\(([^)\s]+)\)")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>|~\"'])")
_STYLE = {"bold": False, "italic": False, "strikethrough": False, "underline": False}


def _runs(text: str) -> list[dict[str, Any]]:
    """Inline Markdown as text runs: links keep their URL (URL-encoded, as Feishu answers
    them), backslash escapes are undone; nothing else is interpreted."""
    runs: list[dict[str, Any]] = []
    last = 0

    def plain(part: str) -> None:
        if part:
            runs.append(
                {
                    "text_run": {
                        "content": _ESCAPE.sub(r"\1", part),
                        "text_element_style": dict(_STYLE),
                    }
                }
            )

    for match in _LINK.finditer(text):
        plain(text[last : match.start()])
        style = dict(_STYLE, link={"url": quote(match.group(2), safe="")})
        content = _ESCAPE.sub(r"\1", match.group(1))
        runs.append({"text_run": {"content": content, "text_element_style": style}})
        last = match.end()
    plain(text[last:])
    return runs


def _block(kind: int, key: str, text: str) -> dict[str, Any]:
    return {
        "block_type": kind,
        key: {"style": {"align": 1, "folded": False}, "elements": _runs(text)},
    }


def convert_markdown(markdown: str) -> tuple[list[str], list[dict[str, Any]]]:
    """``markdown`` as Feishu's convert answers it: the first-level ids in order, and the
    blocks (temporary ids, ``parent_id`` empty) in no particular order."""
    first: list[str] = []
    blocks: list[dict[str, Any]] = []

    def add(block: dict[str, Any], top: bool = True) -> str:
        block_id = str(uuid.uuid4())
        block.update(block_id=block_id, revision_id=0, parent_id="")
        blocks.append(block)
        if top:
            first.append(block_id)
        return block_id

    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        if line.lstrip().startswith("```"):
            body = []
            i += 1
            while i < len(lines) and not lines[i].lstrip().startswith("```"):
                body.append(lines[i])
                i += 1
            i += 1
            code = {
                "block_type": 14,
                "code": {
                    "style": {"language": 1, "wrap": False},
                    "elements": [{"text_run": {"content": "\n".join(body)}}],
                },
            }
            add(code)
            continue
        if (
            line.lstrip().startswith("|")
            and i + 1 < len(lines)
            and re.match(r"^[ \t]*\|[-:| \t]+\|?[ \t]*$", lines[i + 1])
        ):
            rows = [line]
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(lines[i])
                i += 1
            cells_text = [[c.strip() for c in row.strip().strip("|").split("|")] for row in rows]
            columns = len(cells_text[0])
            cells: list[str] = []
            for row in cells_text:
                for text in (row + [""] * columns)[:columns]:
                    child = add(_block(2, "text", text), top=False)
                    cells.append(
                        add({"block_type": 32, "table_cell": {}, "children": [child]}, top=False)
                    )
            table = {
                "block_type": 31,
                "children": list(cells),
                "table": {
                    "cells": list(cells),
                    "property": {
                        "row_size": len(cells_text),
                        "column_size": columns,
                        "column_width": [244] * columns,
                        "merge_info": [{"row_span": 1, "col_span": 1}] * len(cells),
                    },
                },
            }
            add(table)
            continue
        i += 1
        if match := _IMAGE.match(line.strip()):
            add({"block_type": 27, "image": {"token": "", "width": 100, "height": 100}})
        elif match := _HEADING.match(line):
            level = len(match.group(1))
            add(_block(2 + level, f"heading{level}", match.group(2)))
        elif match := _BULLET.match(line):
            add(_block(12, "bullet", match.group(1)))
        elif match := _ORDERED.match(line):
            add(_block(13, "ordered", match.group(1)))
        elif match := _QUOTE.match(line):
            add(_block(15, "quote", match.group(1)))
        else:
            add(_block(2, "text", line.strip()))
    random.shuffle(blocks)  # Feishu's answer lists them in no document order
    return first, blocks


class FakeDocs:
    """The app's cloud documents (state of the fake; the caller holds its lock)."""

    def __init__(self) -> None:
        self.documents: dict[str, FakeDocument] = {}
        #: Folders the app may create documents in ("" is its root space).
        self.folders: set[str] = {""}
        self._counter = 0

    def live(self) -> list[FakeDocument]:
        """The documents that exist (created and not deleted)."""
        return [d for d in self.documents.values() if not d.deleted]

    def serve(
        self,
        kind: str,
        path: str,
        query: dict[str, str],
        body: dict[str, Any],
        scopes: dict[str, bool],
    ) -> Answer:
        allowed = SCOPES[kind]
        if not any(scopes.get(scope) for scope in allowed):
            return _error(
                400,
                MISSING_SCOPE,
                "Access denied. One of the following scopes is required: "
                f"[{', '.join(allowed)}]. 应用尚未开通所需的应用身份权限",
            )
        parts = path.rstrip("/").split("/")
        if kind == "docx_create":
            return self._create(body)
        if kind == "docx_convert":
            return self._convert(body)
        if kind == "docx_insert":  # /open-apis/docx/v1/documents/:id/blocks/:block/descendant
            return self._insert(parts[5], parts[7], body)
        if kind == "perm_member":  # /open-apis/drive/v1/permissions/:token/members
            return self._member(parts[5], query, body)
        if kind == "perm_public":  # /open-apis/drive/v2/permissions/:token/public
            return self._public(parts[5], query, body)
        if kind == "metas":
            return self._metas(body)
        return self._delete(parts[5], query)

    def _document(self, token: str) -> FakeDocument | None:
        document = self.documents.get(token)
        return None if document is None or document.deleted else document

    def _create(self, body: dict[str, Any]) -> Answer:
        folder = str(body.get("folder_token") or "")
        if folder not in self.folders:
            return _error(403, 1770040, "no folder permission")
        title = str(body.get("title") or "")
        if len(title) > 800:
            return _error(400, 1770001, "invalid param")
        self._counter += 1
        document_id = f"doxcnFathom{self._counter:06d}"
        self.documents[document_id] = FakeDocument(document_id, title, folder)
        return _ok({"document": {"document_id": document_id, "revision_id": 1, "title": title}})

    def _convert(self, body: dict[str, Any]) -> Answer:
        content = body.get("content")
        if body.get("content_type") != "markdown" or not isinstance(content, str) or not content:
            return _error(400, 1770001, "invalid param")
        if len(content) > 10_485_760:
            return _error(400, 1770033, "content size exceed limit")
        first, blocks = convert_markdown(content)
        return _ok({"first_level_block_ids": first, "blocks": blocks, "block_id_to_image_urls": []})

    def _insert(self, document_id: str, parent: str, body: dict[str, Any]) -> Answer:
        document = self._document(document_id)
        if document is None:
            return _error(404, 1770002, "not found")
        if parent != document_id:
            return _error(400, 1770001, "invalid param")
        children = body.get("children_id")
        descendants = body.get("descendants")
        if not isinstance(children, list) or not children or not isinstance(descendants, list):
            return _error(400, 1770001, "invalid param")
        if len(descendants) > MAX_DESCENDANTS or len(children) > MAX_DESCENDANTS:
            return _error(400, 1770001, "invalid param: too many blocks in one request")
        by_id: dict[str, dict[str, Any]] = {}
        for block in descendants:
            if not isinstance(block, dict) or not block.get("block_id"):
                return _error(400, 1770001, "invalid param")
            if "merge_info" in (block.get("table") or {}).get("property", {}):
                return _error(400, 1770001, "invalid param: merge_info is read-only")
            if block.get("block_type") == 27:
                return _error(400, 1770013, "relation mismatch")
            by_id[str(block["block_id"])] = block
        named = list(children) + [c for b in descendants for c in b.get("children") or []]
        if any(c not in by_id for c in named) or len(set(named)) != len(named):
            return _error(400, 1770014, "parent children relation mismatch")
        if len(named) != len(by_id):  # a block nobody names
            return _error(400, 1770014, "parent children relation mismatch")
        relations = []
        renamed: dict[str, str] = {}
        for temporary in by_id:
            self._counter += 1
            renamed[temporary] = f"doxcnBlock{self._counter:07d}"
            relations.append({"temporary_block_id": temporary, "block_id": renamed[temporary]})
        for temporary, block in by_id.items():
            stored = json.loads(json.dumps(block))
            stored["block_id"] = renamed[temporary]
            stored["children"] = [renamed[c] for c in block.get("children") or []]
            if "table" in stored:
                stored["table"]["cells"] = [renamed[c] for c in stored["table"].get("cells") or []]
            document.blocks[stored["block_id"]] = stored
        index = body.get("index", -1)
        new = [renamed[c] for c in children]
        if index in (-1, None) or index >= len(document.top):
            document.top.extend(new)
        else:
            document.top[index:index] = new
        document.inserts += 1
        top = [document.blocks[b] for b in new]
        return _ok(
            {
                "children": top,
                "document_revision_id": document.inserts + 1,
                "block_id_relations": relations,
            }
        )

    def _member(self, token: str, query: dict[str, str], body: dict[str, Any]) -> Answer:
        document = self._document(token)
        if query.get("type") != "docx" or document is None:
            return _error(400, 1063001, "Invalid parameter")
        member_type = str(body.get("member_type") or "")
        member_id = str(body.get("member_id") or "")
        perm = str(body.get("perm") or "")
        prefixes = {"openchat": "oc_", "openid": "ou_"}
        if member_type not in prefixes or not member_id.startswith(prefixes[member_type]):
            return _error(400, 1063001, "Invalid parameter")
        if perm not in ("view", "edit", "full_access"):
            return _error(400, 1063001, "Invalid parameter")
        member = {"member_type": member_type, "member_id": member_id, "perm": perm}
        document.members.append(member)
        return _ok({"member": member})

    def _public(self, token: str, query: dict[str, str], body: dict[str, Any]) -> Answer:
        document = self._document(token)
        if query.get("type") != "docx" or document is None:
            return _error(400, 1063001, "Invalid parameter")
        entity = body.get("link_share_entity")
        allowed = {
            "tenant_readable",
            "tenant_editable",
            "partner_tenant_readable",
            "partner_tenant_editable",
            "anyone_readable",
            "anyone_editable",
            "closed",
        }
        if entity is not None and entity not in allowed:
            return _error(400, 1063001, "Invalid parameter")
        document.public.update({k: v for k, v in body.items() if v is not None})
        return _ok({"permission_public": dict(document.public)})

    def _metas(self, body: dict[str, Any]) -> Answer:
        metas, failed = [], []
        for doc in body.get("request_docs") or []:
            token, doc_type = str(doc.get("doc_token") or ""), str(doc.get("doc_type") or "")
            document = self._document(token)
            if document is None or doc_type != "docx":
                failed.append({"token": token, "code": 970005})
                continue
            meta = {
                "doc_token": token,
                "doc_type": "docx",
                "title": document.title,
                "owner_id": "ou_app",
            }
            if body.get("with_url"):
                meta["url"] = DOC_URL + token
            metas.append(meta)
        return _ok({"metas": metas, "failed_list": failed})

    def _delete(self, token: str, query: dict[str, str]) -> Answer:
        document = self.documents.get(token)
        if query.get("type") != "docx":
            return _error(400, 1061002, "params error.")
        if document is None:
            return _error(404, 1061003, "not found.")
        if document.deleted:
            return _error(404, 1061007, "file has been delete.")
        document.deleted = True
        return _ok({})


def doc_kind(method: str, path: str) -> str | None:
    """Which docs endpoint a request is (None: not one of them)."""
    path = path.rstrip("/")
    if method == "POST" and path == "/open-apis/docx/v1/documents":
        return "docx_create"
    if method == "POST" and path == "/open-apis/docx/v1/documents/blocks/convert":
        return "docx_convert"
    if (
        method == "POST"
        and path.startswith("/open-apis/docx/v1/documents/")
        and path.endswith("/descendant")
    ):
        return "docx_insert"
    if (
        method == "POST"
        and path.startswith("/open-apis/drive/v1/permissions/")
        and path.endswith("/members")
    ):
        return "perm_member"
    if (
        method == "PATCH"
        and path.startswith("/open-apis/drive/v2/permissions/")
        and path.endswith("/public")
    ):
        return "perm_public"
    if method == "POST" and path == "/open-apis/drive/v1/metas/batch_query":
        return "metas"
    if method == "DELETE" and path.startswith("/open-apis/drive/v1/files/"):
        return "file_delete"
    return None

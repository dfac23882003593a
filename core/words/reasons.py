"""Why something gave nothing: a page not read, a document or an attached file refused, a
search that failed. A :class:`Reason` holds its words in both languages a run speaks, made
where the knowledge is (a platform's package knows why it refuses a file, the page fetcher why
it skipped a page; :mod:`core.words.wording` knows neither), with any outside data (an HTTP status,
an exception's class, a server's own words) already in both, verbatim.

``str()`` is the English words, as logs, ``--json`` and stored findings have always shown them;
:meth:`Reason.words` gives them in a run's language for its notes.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.words.wording import Language, pick


@dataclass(frozen=True)
class Reason:
    """``en`` and ``zh``: the same short reason, safe to show (never a document's contents)."""

    en: str
    zh: str

    @classmethod
    def verbatim(cls, text: str) -> Reason:
        """Words from outside (a server's message), shown as they are in every language."""
        return cls(text, text)

    def words(self, language: Language) -> str:
        return pick(language, self.en, self.zh)

    def __str__(self) -> str:
        return self.en

    def prefixed(self, name: str) -> Reason:
        """The reason of a named source: ``tavily: HTTP 500`` (``tavily：HTTP 500``)."""
        return Reason(f"{name}: {self.en}", f"{name}：{self.zh}")

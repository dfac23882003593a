"""Reading result pages: safe fetching (``fetch``) and reading (``reader``); a page's main text
and passages are :mod:`core.documents.extract`'s."""

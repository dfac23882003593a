"""Every cited claim of a report checked against the sources it cites (issue 37).

:func:`claims_of` finds the claims (``split.py``); :func:`plainly_supported` is the lexical pass
that settles the plain ones without a model call (``lexical.py``).
"""

from core.claims.lexical import Evidence, plainly_supported
from core.claims.split import CITATION, Claim, claims_of

__all__ = ["CITATION", "Claim", "Evidence", "claims_of", "plainly_supported"]

"""Reading result pages: safe fetching (``fetch``), main text and passages (``extract``)."""

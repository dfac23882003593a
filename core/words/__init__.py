"""What Fathom says in words, in English and Chinese: the shared wording of replies and
progress (:mod:`core.words.wording`), the notes a report carries (:mod:`core.words.note_words`)
and the short reasons a source, a page or a file was not used (:mod:`core.words.reasons`)."""

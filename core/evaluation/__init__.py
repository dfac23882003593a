"""``fathom eval``: a question set researched and its reports measured (issues 37 and 52).

``questions.py`` reads the set, ``runner.py`` researches each question as a console research,
``facts.py`` asks the verifier model which expected facts a report states, ``score.py``
measures one outcome (a line of ``results.jsonl``) with what made it (``provenance.py``),
``measures.py`` defines the totals, ``bootstrap.py`` their intervals, ``table.py`` writes the
Markdown and ``compare.py`` sets two evaluations of one question set side by side.
``--judge-check``: ``pairs.py`` reads labelled claim/evidence pairs (``judge_pairs.jsonl``
ships with the package), ``judge.py`` asks the verifier about each and measures its agreement,
``judge_table.py`` writes it.
"""

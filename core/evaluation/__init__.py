"""``fathom eval``: a question set researched and its reports measured (issue 37).

``questions.py`` reads the set, ``runner.py`` researches each question as a console research,
``facts.py`` asks the verifier model which expected facts a report states, ``score.py``
measures one outcome (a line of ``results.jsonl``) and ``table.py`` writes the Markdown.
"""

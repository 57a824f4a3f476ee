"""The instructor's and author's side of the package: the ``course`` command and what it runs.

``cli`` (the command), ``grading`` (sandboxed grading), ``release`` and ``dist`` (student notebooks and
the student distribution), ``runner`` (``course run``), ``checker`` (``course check``), ``doctor``,
``workspace`` (nbgrader course folders), ``authoring`` (building lesson notebooks), ``lessons``
(which lessons exist). Notebooks never import from here. A learner's copy (``course dist``) keeps only
what the learner's commands need: ``cli``, ``checker``, ``doctor``, ``lab``, ``lessons``, and ``hub``
(a JupyterHub's settings, which a hub reads from the handout: deploy/); the rest is listed in
``dist.INSTRUCTOR_ONLY``.
"""

import sys as _sys

# Start-up cost: `import nbformat` imports jsonschema, whose optional "iri" format checker imports
# rfc3987_syntax when installed (Jupyter's own dependencies bring it), and that compiles 38 Lark
# grammars: 3 to 4 s of CPU in every process of the instructor's tools (`course grade`, each judge)
# for a format no notebook schema uses. Hidden here, jsonschema leaves that one checker out, as it
# does when the package is absent. Only processes that import course.tools are affected; JupyterLab
# (`course lab` starts a new process) keeps it.
_sys.modules.setdefault("rfc3987_syntax", None)

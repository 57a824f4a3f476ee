"""The instructor's and author's side of the package: the ``course`` command and what it runs.

``cli`` (the command), ``grading`` (sandboxed grading), ``release`` and ``dist`` (student notebooks and
the student distribution), ``runner`` (``course run``), ``checker`` (``course check``), ``doctor``,
``workspace`` (nbgrader course folders), ``authoring`` (building lesson notebooks), ``lessons``
(which lessons exist). Notebooks never import from here. A learner's copy (``course dist``) keeps only
what the learner's commands need: ``cli``, ``checker``, ``doctor``, ``lab``, ``lessons``; the rest is
listed in ``dist.INSTRUCTOR_ONLY``.
"""

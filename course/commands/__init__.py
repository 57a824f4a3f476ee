"""What a learner runs: the ``course`` command (``cli``), ``course check`` (``checker``), ``course lab``
(``lab``), ``course doctor`` (``doctor``), which lessons exist (``lessons``) and a JupyterHub's settings
(``hub``, which a hub reads from the handout: deploy/). These ship in the handout (``course dist``); the
instructor's commands live in :mod:`course.tools` and :mod:`course.grading`, which never ship, and the
command says so when one is missing."""

import sys as _sys

# See course/grading/__init__.py: nbformat's schema checker would compile 38 grammars nobody uses.
_sys.modules.setdefault("rfc3987_syntax", None)

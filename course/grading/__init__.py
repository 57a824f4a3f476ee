"""``course grade``: grade a folder of submissions, isolated, in parallel, with verdicts out of reach.

The instructor's side only: ``course dist`` leaves this whole folder out of the handout, and of it only
:mod:`course.grading.sandboxed` is bound into the sandbox. Its folders are its trust zones:

* here, in the grader's own process: ``batch`` (a batch, from the folder of submissions to the results),
  ``intake`` (a submission read as a file and parsed under bounds, sanitised against the release),
  ``feedback`` (the graded notebook and the feedback page), ``results`` (grades.csv, results.json, the
  gradebook), ``assignments`` (nbgrader's generated assignments), ``pool`` and ``dask`` (the judges),
  ``shards`` (``--shard`` and ``course grade merge``), ``sandbox`` (the bubblewrap command), ``protocol``
  (the typed messages between the grader, the judges and the sandbox);
* ``judge/``: the trusted judge processes, which run the instructor's test cells with the learner's
  names as stand-ins and decide every verdict;
* ``sandboxed/``: the only grading code that runs in the sandbox, beside the learner's code (the worker,
  the sandbox's PID 1, the wire); it imports nothing else of ``course.grading``.

The face, imported lazily so that a judge process starts its warm sandbox before any heavy import:
:func:`grade`, :func:`merge`, :func:`shard_of`, :func:`parse_shard`, :func:`summary_table`,
:class:`MergeError`, :class:`SubmissionResult`, :class:`CellResult`, :data:`STATUSES`, :data:`OK_STATUSES`.
"""

import importlib
import sys as _sys

# Start-up cost: `import nbformat` imports jsonschema, whose optional "iri" format checker imports
# rfc3987_syntax when installed, and that compiles 38 Lark grammars (3 to 4 s of CPU in every grader and
# judge process) for a format no notebook schema uses (see course/tools/__init__.py).
_sys.modules.setdefault("rfc3987_syntax", None)

_FACE = {
    "grade": "course.grading.batch", "merge": "course.grading.shards", "MergeError": "course.grading.shards",
    "shard_of": "course.grading.shards", "parse_shard": "course.grading.shards",
    "summary_table": "course.grading.results", "SubmissionResult": "course.grading.results",
    "CellResult": "course.grading.results", "STATUSES": "course.grading.protocol",
    "OK_STATUSES": "course.grading.protocol", "Status": "course.grading.protocol",
}
__all__ = sorted(_FACE)


def __getattr__(name: str):
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'course.grading' has no attribute {name!r}")

    return getattr(importlib.import_module(module), name)

"""nbgrader's own autograde, refused in a grading workspace: it would run a submission unsandboxed, as you.

The formgrader shows an "autograde" button (the lightning icon of Manage Submissions) on every submission, and
``nbgrader autograde`` does the same from a terminal: both execute the learner's notebook in a plain kernel with
the grader's own rights (its gradebook, its files, the solutions under ``make instructor``). A notebook can
behave honestly under ``course grade`` and do anything there. The workspace's ``nbgrader_config.py`` (written by
:mod:`course.tools.workspace`) puts :class:`RefuseUnsandboxed` first among Autograde's preprocessors: the
submission is never executed, and the formgrader shows the sentence below.

A trusted run that needs nbgrader's autograde (``bench/grading.py`` times it on the course's own notebooks)
sets ``COURSE_UNSANDBOXED_AUTOGRADE=1`` in its own environment.
"""

from __future__ import annotations

import os

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

ALLOW = "COURSE_UNSANDBOXED_AUTOGRADE"
MESSAGE = ("nbgrader's autograde is turned off in this course: it would run the student's notebook unsandboxed, as "
           "you. Grade with `course grade SUBMISSIONS --out GRADES` (each submission in a sandbox); its grades and "
           "feedback appear here in the formgrader.")


class RefuseUnsandboxed(Preprocessor):
    """Stops nbgrader's Autograde before anything of the submission runs (unless :data:`ALLOW` is ``1``)."""

    enabled = Bool(True)        # nbconvert's preprocessors are off unless enabled; this one always runs

    def preprocess(self, nb, resources):
        if os.environ.get(ALLOW) == "1":
            return nb, resources
        raise RuntimeError(MESSAGE)


def autograde_preprocessors() -> list:
    """Autograde's sanitising preprocessors, :class:`RefuseUnsandboxed` first (for a workspace's config)."""
    from nbgrader.converters.autograde import Autograde

    return [RefuseUnsandboxed, *Autograde.class_traits()["sanitize_preprocessors"].default()]

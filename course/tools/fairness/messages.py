"""The checks a failing test cell's message must pass (course rule: a message names the broken property in
the learner's terms, never a bare AssertionError or traceback, never only a PyTorch error, and never a
line of hidden-test code).

Each check is a function ``message -> problem or None``; :func:`problems` runs them all. They read the
message as the learner reads it in ``results.json`` and on the feedback page: ``"Type: text"``.
"""

from __future__ import annotations

import re
from typing import Iterable

from course.grading.judge.errors import WITHHELD
from course.grading.judge.explain import PURPOSE

# A learner-side exception raised while hidden inputs were in play: the judge withholds its text (it could repeat
# the hidden inputs). Alone (WITHHELD), that names only the exception's type; course/grading/judge/explain.py
# rewords it with where it happened and what the cell checks.
_WITHHELD_REWORDED = ("its own text is not shown", "its text is not shown here")

# PyTorch's own wording: an error that says only this tells the learner what PyTorch disliked, not which
# rule of the exercise they broke.
_TORCH_WORDING = re.compile(
    r"size of tensor a|must match the size|mat1 and mat2|shapes cannot be multiplied|dimension out of range|"
    r"expected scalar type|not implemented for|is not broadcastable|invalid for input of size|"
    r"Expected (all )?tensors? |out of bounds|index \d+ is out of bounds|doesn't match the broadcast shape|"
    r"can't be cast|inconsistent tensor size|shape '\[|Trying to resize storage|result type Float can't|"
    r"unsupported operand|object is not callable|has no attribute|takes \d+ positional argument|"
    r"missing \d+ required positional|got an unexpected keyword|NoneType", re.I)

_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Interrupt|Exit)|an exception of a class your code defined):"
                        r"\s*(.*)$", re.S)
_LEARNER = re.compile(r"\b(your|yours|you)\b", re.I)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]+")


def split(message: str) -> tuple[str, str]:
    """(exception type, explanation) of a message written as ``"Type: text"``; ("", message) otherwise."""
    m = _EXCEPTION.match(message.strip())
    if not m and re.fullmatch(r"[A-Za-z_][\w.]*(Error|Exception)", message.strip()):
        return message.strip(), ""
    return (m.group(1), m.group(2).strip()) if m else ("", message.strip())


def empty(message: str, **_) -> str | None:
    if not message or not message.strip():
        return "no message at all"
    return None


def bare_exception(message: str, **_) -> str | None:
    """``AssertionError`` (or any type) with nothing after it."""
    kind, text = split(message)
    if kind and len(_WORD.findall(text)) < 3:
        return f"a bare {kind}: no explanation"
    return None


def bare_traceback(message: str, **_) -> str | None:
    if "Traceback (most recent call last)" in message or re.search(r'File "[^"]+", line \d+', message):
        return "a traceback, not an explanation"
    return None


def purpose_given(message: str) -> bool:
    """The grader said what the failing cell checks (``This cell checks: <its docstring>``, six words at least)."""
    _, found, said = message.partition(PURPOSE)
    return bool(found) and len(_WORD.findall(said)) >= 6


def explained_exception(message: str) -> bool:
    """An exception the judge put in context: where it was raised, and what the cell checks."""
    where = re.search(r"\((Raised (by your code|by the test's use|while the test checked)|An assert in your code failed)|"
                      r"raised by your code (in this "
                      r"cell's hidden checks|at the line)|your code (uses the name|reads its variable) '\w+'", message)
    return bool(where) and purpose_given(message)


def withheld_exception(message: str, **_) -> str | None:
    """The learner's code raised while hidden inputs were in play: its text is withheld, so the message must say
    where it happened and what the cell checks, or the learner sees the type and nothing they can act on."""
    if WITHHELD in message:
        return "the learner's code raised inside a hidden check: the message names only the exception's type"
    if any(w in message for w in _WITHHELD_REWORDED) and not explained_exception(message):
        return "an exception's text withheld without where it happened and what the cell checks"
    return None


def only_library_error(message: str, **_) -> str | None:
    """An exception other than AssertionError whose text is PyTorch's (or Python's) own wording."""
    kind, text = split(message)
    if (kind and kind != "AssertionError" and (_TORCH_WORDING.search(text) or not _LEARNER.search(text))
            and not explained_exception(message)):
        return f"only a library error ({kind}): it says what PyTorch or Python refused, not which rule was broken"
    return None


_RULE = re.compile(r"\b(should|must|expected|instead|never|only|each|every|not|no|equal|sum|differ\w*|depend\w*|"
                   r"leak\w*|keep|keeps|change\w*|ignor\w*|missing|unexpected)\b", re.I)


def names_no_property(message: str, names: Iterable[str] = (), **_) -> str | None:
    """In the learner's terms: a sentence (at least six words) that states the rule or the expectation
    (``should``, ``expected``, ``must``, ``instead``...) or speaks of the learner's code (``your``, a graded
    name of the lesson). The grader's word on a missing name (``name 'softmax' is not defined: run (or fix) the
    cell that defines it``) passes only for a name the exercise asks for: a variable inside the learner's
    function is no property of it."""
    _, text = split(message)
    words = _WORD.findall(text)
    about = _RULE.search(text) or _LEARNER.search(text) or any(n and n in text for n in names)
    undefined = re.match(r"name '(\w+)' is not defined", text)
    if len(words) < 6 or not about or (undefined and undefined.group(1) not in names):
        return "does not name the learner's code and what about it is wrong"
    return None


def hidden_code(message: str, hidden: Iterable[str] = (), **_) -> str | None:
    """A line of a hidden test (as ``course.grading.notebooks.hidden_lines`` lists them) in the message."""
    for line in hidden:
        if line and line in message:
            return f"shows a line of hidden-test code: {line[:80]!r}"
    if "BEGIN HIDDEN TESTS" in message:
        return "shows a hidden-tests marker"
    return None


CHECKS = (empty, bare_exception, bare_traceback, withheld_exception, only_library_error, names_no_property, hidden_code)


def problems(message: str, *, names: Iterable[str] = (), hidden: Iterable[str] = ()) -> list[str]:
    """Every check's complaint about one failing cell's message (empty: the message passes)."""
    names, hidden = list(names), list(hidden)
    found = []
    for check in CHECKS:
        problem = check(message or "", names=names, hidden=hidden)
        if problem:
            found.append(problem)
            if check is empty:
                break
    return found

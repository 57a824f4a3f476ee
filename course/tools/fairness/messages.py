"""The checks a failing test cell's message must pass (course rule: a message names the broken property in
the learner's terms, never a bare AssertionError or traceback, never only a PyTorch error, and never a
line of hidden-test code).

Each check is a function ``message -> problem or None``; :func:`problems` runs them all. They read the
message as the learner reads it in ``results.json`` and on the feedback page: ``"Type: text"``.
"""

from __future__ import annotations

import re
from typing import Iterable

# A learner-side exception raised while a hidden check ran: the judge withholds its message (it could repeat
# the hidden inputs), so the learner sees only its type. course/grading/judge/session.py writes this text.
WITHHELD = "raised by your code after a hidden check's inputs reached it"

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


def withheld_exception(message: str, **_) -> str | None:
    """The learner's code raised during a hidden check: the learner sees the type, not what rule failed."""
    if WITHHELD in message:
        return "the learner's code raised inside a hidden check: the message names only the exception's type"
    return None


def only_library_error(message: str, **_) -> str | None:
    """An exception other than AssertionError whose text is PyTorch's (or Python's) own wording."""
    kind, text = split(message)
    if kind and kind != "AssertionError" and (_TORCH_WORDING.search(text) or not _LEARNER.search(text)):
        return f"only a library error ({kind}): it says what PyTorch or Python refused, not which rule was broken"
    return None


_RULE = re.compile(r"\b(should|must|expected|instead|never|only|each|every|not|no|equal|sum|differ\w*|depend\w*|"
                   r"leak\w*|keep|keeps|change\w*|ignor\w*|missing|unexpected)\b", re.I)


def names_no_property(message: str, names: Iterable[str] = (), **_) -> str | None:
    """In the learner's terms: a sentence (at least six words) that states the rule or the expectation
    (``should``, ``expected``, ``must``, ``instead``...) or speaks of the learner's code (``your``, a graded
    name of the lesson). A message of the grader about a name (``name 'x' is not defined: run (or fix) the
    cell that defines it``) names a variable of the learner's function, not a property of it."""
    _, text = split(message)
    words = _WORD.findall(text)
    about = _RULE.search(text) or _LEARNER.search(text) or any(n and n in text for n in names)
    if len(words) < 6 or not about or re.match(r"name '\w+' is not defined", text):
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

"""What a failing test cell says when it failed on an exception rather than on a check's own sentence.

A check (``checks.check_close(..., hint=...)``) explains itself. An exception does not: PyTorch's "size of tensor
a (7) must match ..." names no rule of the exercise, and the learner's own exception raised while hidden inputs
were in play is shown by its type alone (``errors.WITHHELD``: its text could repeat those inputs). So the judge
adds two things the learner can act on, both taken from what the learner can already read:

- **where** it happened: the visible line of the test cell (quoted), or "in this cell's hidden checks";
- **what the cell checks**: the cell's docstring, which every test cell starts with (CONTRIBUTING.md), and which
  the student notebook shows.

No hidden line is ever quoted, and a withheld text stays withheld.
"""

from __future__ import annotations

import ast
import re

from course.grading.judge.errors import WITHHELD

PURPOSE = "This cell checks: "


def purpose(src: str) -> str:
    """The test cell's docstring as one sentence ("" when it has none or does not parse)."""
    try:
        doc = ast.get_docstring(ast.parse(src)) or ""
    except (SyntaxError, ValueError):
        return ""
    doc = re.sub(r"\s+", " ", doc).strip()
    return doc if not doc or doc.endswith((".", "!", "?")) else doc + "."


def _test_frames(exc: BaseException, filename: str) -> list[int]:
    """Line numbers of the test cell's frames in the exception's traceback, outermost first."""
    lines, tb = [], exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lines.append(tb.tb_lineno)
        tb = tb.tb_next
    return lines


def raised_by_the_test(exc: BaseException, filename: str) -> bool:
    """The exception started in the test cell's own code (a name it could not find, an unpacking of what the
    learner's function returned), not inside a call to the learner's code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_code.co_filename == filename


def explained(exc: BaseException, message: str, *, src: str, filename: str, hidden: set[int]) -> str:
    """``message`` (already ``"Type: text"``) with where it happened and what the cell checks, when the failure
    is an exception; a check's own sentence is returned unchanged."""
    # WITHHELD is the judge's own placeholder for a withheld text (Session._withheld), which test code may have wrapped
    # in a message of its own: found by the placeholder, and replaced by words that say where it happened
    withheld = WITHHELD in message
    text = str(exc).strip()
    about = purpose(src)
    learners = getattr(exc, "from_learner", False)
    if isinstance(exc, AssertionError) and text and not withheld and not learners:
        if getattr(exc, "course_context", False) and about:      # checks.call: the learner's call raised
            return f"{message.rstrip()}{'' if message.rstrip().endswith('.') else '.'} {PURPOSE}{about}"
        return message                                   # a check's own sentence, in the learner's terms
    lines = src.splitlines()
    inner = _test_frames(exc, filename)
    line = inner[-1] if inner else None
    in_hidden = any(n in hidden for n in inner)       # a visible helper called from the hidden part is hidden too
    code = lines[line - 1].strip() if line and not in_hidden and 0 < line <= len(lines) else ""
    code = code if len(code) <= 160 else code[:157] + "..."
    where = ("in this cell's hidden checks" if in_hidden else f"at the line `{code}` of this cell" if code
             else "in this cell")
    tail = f" {PURPOSE}{about}" if about else ""

    if withheld:
        if in_hidden:
            said = ("raised by your code in this cell's hidden checks (its own text is not shown: it could repeat the "
                    "hidden inputs); the visible checks above it passed, so try your code on other shapes and "
                    "arguments than theirs")
        else:
            said = (f"raised by your code {where} (its text is not shown here because an earlier cell's hidden inputs "
                    "had reached your code: run this cell in your notebook to read it)")
        return message.replace(WITHHELD, said).rstrip() + ("" if message.rstrip().endswith(".") else ".") + tail

    if isinstance(exc, NameError):
        name = getattr(exc, "name", None) or (re.findall(r"(?:name|variable) '(\w+)'", text) or ["?"])[0]
        if not learners:
            return f"{message}.{tail}"                  # the cell's own lookup: "run (or fix) the cell that defines it"
        if isinstance(exc, UnboundLocalError):
            return (f"UnboundLocalError: your code reads its variable '{name}' before giving it a value (raised "
                    f"{where}): assign it first, on every path through your function.{tail}")
        return (f"NameError: your code uses the name '{name}', which is not defined where it runs (raised {where}): "
                f"define it, or pass it in as an argument.{tail}")

    if isinstance(exc, AssertionError) and learners:     # an assert in the learner's own code
        said = f"AssertionError: {text}{'' if text.endswith('.') else '.'}" if text else "AssertionError."
        return f"{said} (An assert in your code failed, {where}.){tail}"
    if isinstance(exc, AssertionError):                  # an assert of the test without a message
        return f"AssertionError: a check failed {where} without a message of its own.{tail}"
    origin = ("by your code" if learners else
              "by the test's use of what your code returned" if raised_by_the_test(exc, filename) else
              "while the test checked what your code returned")
    return f"{message.rstrip()}{'' if message.rstrip().endswith('.') else '.'} (Raised {origin}, {where}.){tail}"

"""A test cell that fails on an exception says where it happened and what the cell checks, never quoting a hidden
line, and keeps a withheld text withheld (course/grading/judge/explain.py). Checked here on a test cell run the way
the judge runs one (compiled under ``<test id>``, hidden lines between the markers), and by the message checks of
the fairness certificate, which the old wording failed."""

from __future__ import annotations

import pytest
import torch

from course.grading.judge.errors import WITHHELD, rebuild_error
from course.grading.judge.explain import PURPOSE, explained
from course.grading.judge.run import _hidden_block_lines, _message
from course.tools.fairness import messages

CELL = '''"""softmax normalises along the dimension it is given, and only that one."""
x = torch_like(6)
out = learner(x)
### BEGIN HIDDEN TESTS
secret = torch_like(7)
hidden_out = learner(secret)
### END HIDDEN TESTS
'''


def _learner_error(kind, text):
    """What Session.request raises when the learner's code raised (a rebuilt exception)."""
    def learner(x):
        error = rebuild_error({"type": kind, "message": text})
        error.from_learner = True
        raise error
    return learner


def _fail(src, learner, fail_on=None):
    """Run ``src`` as the judge runs a test cell; the message of its failure as the learner reads it."""
    filename = "<test test_softmax_dim>"
    ns = {"torch_like": lambda n: n}
    ns["learner"] = (lambda x: learner(x) if x == fail_on else x) if fail_on is not None else learner
    try:
        exec(compile(src, filename, "exec"), ns)
    except Exception as exc:  # noqa: BLE001
        return explained(exc, _message(exc, 60), src=src, filename=filename, hidden=_hidden_block_lines(src))
    raise AssertionError("the cell did not fail")


HIDDEN = {"secret = torch_like(7)", "hidden_out = learner(secret)"}


def test_a_library_error_on_a_visible_line_names_the_line_and_the_property():
    msg = _fail(CELL, _learner_error("RuntimeError", "The size of tensor a (7) must match the size of tensor b (4)"), 6)
    assert msg.startswith("RuntimeError: The size of tensor a (7)")
    assert "Raised by your code, at the line `out = learner(x)` of this cell" in msg
    assert msg.endswith(PURPOSE + "softmax normalises along the dimension it is given, and only that one.")
    assert messages.problems(msg, names=["learner"], hidden=HIDDEN) == []
    # the old wording (the error alone) fails the checks: they can tell the two apart
    assert messages.problems(_message(RuntimeError("The size of tensor a (7) must match the size of tensor b (4)"), 60),
                             names=["learner"], hidden=HIDDEN)


def test_a_withheld_error_in_the_hidden_part_quotes_no_hidden_line():
    msg = _fail(CELL, _learner_error("IndexError", WITHHELD), 7)
    assert msg.startswith("IndexError: raised by your code in this cell's hidden checks")
    assert WITHHELD not in msg and "secret" not in msg and "hidden_out" not in msg
    assert PURPOSE + "softmax normalises" in msg
    assert messages.problems(msg, names=["learner"], hidden=HIDDEN) == []
    assert messages.problems(f"IndexError: {WITHHELD}", names=["learner"], hidden=HIDDEN)


def test_a_withheld_error_on_a_visible_line_says_how_to_read_it():
    msg = _fail(CELL, _learner_error("ValueError", WITHHELD), 6)
    assert "at the line `out = learner(x)`" in msg and "run this cell in your notebook" in msg
    assert messages.problems(msg, names=["learner"], hidden=HIDDEN) == []


def test_a_checks_own_sentence_is_unchanged():
    src = CELL.replace("out = learner(x)", "out = learner(x)\nassert out == 7, 'your softmax should return 7 here.'")
    msg = _fail(src, lambda x: x)
    assert msg == "AssertionError: your softmax should return 7 here."


def test_an_assert_without_a_message_gets_where_and_what():
    msg = _fail(CELL.replace("out = learner(x)", "out = learner(x)\nassert out == 7"), lambda x: x)
    assert msg.startswith("AssertionError: a check failed at the line `assert out == 7`")
    assert messages.problems(msg, names=["learner"], hidden=HIDDEN) == []


def test_names_missing_in_the_notebook_and_in_the_learners_code_are_told_apart():
    # the test cell's own lookup: the learner has not defined a graded name
    msg = _fail(CELL.replace("out = learner(x)", "out = softmax(x)"), lambda x: x)
    assert "name 'softmax' is not defined: run (or fix) the cell that defines it" in msg
    assert messages.problems(msg, names=["softmax"], hidden=HIDDEN) == []
    # a name missing inside the learner's function: the learner's code, not the notebook's order
    msg = _fail(CELL, _learner_error("NameError", "name 'shifted' is not defined"), 6)
    assert msg.startswith("NameError: your code uses the name 'shifted', which is not defined")
    assert "run (or fix) the cell" not in msg
    assert messages.problems(msg, names=["softmax"], hidden=HIDDEN) == []


def test_an_error_of_the_tests_own_use_of_a_return_value():
    msg = _fail(CELL.replace("out = learner(x)", "out, weights = learner(x)"), lambda x: None)
    assert "cannot unpack" in msg and "Raised by the test's use of what your code returned" in msg
    assert "`out, weights = learner(x)`" in msg


@pytest.mark.parametrize("line", ["hidden_out = learner(secret)", "secret = torch_like(7)"])
def test_an_error_in_the_hidden_part_never_quotes_it(line):
    src = CELL.replace(line, line + "\nraise KeyError('w_q.weight')")
    msg = _fail(src, lambda x: x)
    assert "in this cell's hidden checks" in msg and line not in msg


def test_a_local_variable_read_before_assignment():
    msg = _fail(CELL, _learner_error("UnboundLocalError",
                                     "cannot access local variable 'scores' where it is not associated with a value"), 6)
    assert msg.startswith("UnboundLocalError: your code reads its variable 'scores' before giving it a value")
    assert messages.problems(msg, names=["learner"], hidden=HIDDEN) == []


def test_checks_call_names_the_call_and_gets_the_property():
    from course import checks

    src = CELL.replace("out = learner(x)", "out = checks.call(learner, x, what='softmax')")
    filename = "<test test_softmax_dim>"

    def learner(x):
        raise RuntimeError("The size of tensor a (7) must match the size of tensor b (4)")
    try:
        exec(compile(src, filename, "exec"), {"torch_like": lambda n: n, "learner": learner, "checks": checks})
    except AssertionError as exc:
        msg = explained(exc, _message(exc, 60), src=src, filename=filename, hidden=_hidden_block_lines(src))
    assert msg.startswith("AssertionError: softmax raised RuntimeError: The size of tensor a (7)")
    assert msg.endswith(PURPOSE + "softmax normalises along the dimension it is given, and only that one.")


def test_an_assert_in_the_learners_code_is_the_learners():
    # with its own text: not taken for a check's sentence
    msg = _fail(CELL, _learner_error("AssertionError", "x should be a matrix"), 6)
    assert msg.startswith("AssertionError: x should be a matrix. (An assert in your code failed, at the line")
    assert PURPOSE in msg
    # without one: not blamed on the test
    msg = _fail(CELL, _learner_error("AssertionError", ""), 6)
    assert "An assert in your code failed" in msg and "without a message of its own" not in msg


def test_a_withheld_name_error_keeps_its_type_and_no_wrong_advice():
    msg = _fail(CELL, _learner_error("UnboundLocalError", WITHHELD), 6)
    assert msg.startswith("UnboundLocalError: raised by your code at the line `out = learner(x)`")
    assert "run (or fix) the cell" not in msg


def test_a_visible_helper_called_from_the_hidden_part_counts_as_hidden():
    src = ('"""chunked attention skips the blocks above the diagonal, for any block size."""\n'
           'def check_skipped(n):\n'
           '    return learner(n)\n'
           'check_skipped(6)\n'
           '### BEGIN HIDDEN TESTS\n'
           'check_skipped(96)\n'
           '### END HIDDEN TESTS\n')
    msg = _fail(src, _learner_error("ValueError", WITHHELD), 96)
    assert "in this cell's hidden checks" in msg and "return learner(n)" not in msg and "96" not in msg


def test_check_close_of_two_answers_names_a_value_that_is_not_a_tensor():
    from course import checks

    with pytest.raises(AssertionError, match="the value it is compared with .* is a str, not a tensor"):
        checks.check_close(torch.zeros(2), "0.5", "out after shuffling the table")

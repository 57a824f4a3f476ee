"""The fourth trust round's classes, proven on one graded batch (``course grade``, sandboxed):

* **the feedback page is no oracle of hidden lines**: two submissions hold guesses of lesson 00's hidden-test
  lines (as code comments, in printed output and in a Markdown cell of their own), one the true lines and one
  the same lines with a letter changed. Their pages are the same text once each guess is replaced by its
  number: nothing on a page depends on whether a guess was right, and every guess comes back as written;
* **no spreadsheet formula under any separator**: student and lesson folders named like formulas (with a
  semicolon, a tab, a newline, a leading ``@``) reach ``grades.csv``; every CSV or TSV the batch wrote, split on
  a comma, a semicolon, a tab, a space, a pipe or a colon, has no cell that starts a formula, and the refused
  names are written as printable escapes;
* **the notebook's time limit is a ceiling**: a notebook whose first cells sleep just under the cell limit
  and whose every later cell runs past it (so each restart replays the sleeping cells), one that fills /tmp
  with a million empty folders (the clean-up after it), and one whose tests' fence cannot finish (a thread
  stuck in a spawn, processes restarted as they are ended) each finish within their notebook limit plus one
  cell's limit.

The exchange's class (links in a learner's own folder, a folder swapped during collect, exchange folders a
learner made first) is proven with real Unix users in tests/test_exchange.py.
"""

from __future__ import annotations

import csv
import html
import io
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from planting import build_submission, results_by_key, write_submission

ROOT = Path(__file__).resolve().parents[1]
COURSE = str(Path(sys.executable).parent / "course")
LESSON = "00_softmax_lookup"
TIMEOUT, NOTEBOOK_TIMEOUT = 4, 24
FORMULA_NAMES = ["x;=1+2", "tab\t=cmd", "@SUM(A1)", "line\n=2", 'q";-3']
pytestmark = pytest.mark.slow


def _hidden_guesses(n: int = 8) -> list[str]:
    """``n`` lines of lesson 00's hidden tests that the student notebook does not show."""
    source = nbformat.read(str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    student = nbformat.read(str(ROOT / "notebooks" / LESSON / f"{LESSON}.ipynb"), as_version=4)
    shown = {ln.strip() for c in student.cells for ln in c.source.splitlines()}
    hidden = []
    for cell in source.cells:
        for block in cell.source.split("### BEGIN HIDDEN TESTS")[1:]:
            hidden += [ln.strip() for ln in block.split("### END HIDDEN TESTS")[0].splitlines()
                       if len(ln.strip()) > 30 and ln.strip() not in shown and ln.strip() not in hidden]
    assert len(hidden) >= n, hidden
    return hidden[:n]


def _wrong(line: str) -> str:
    """The line with one letter changed (a letter for a letter: the code highlights the same way)."""
    at = next(i for i in range(len(line) // 2, len(line)) if line[i].isalpha())
    return line[:at] + ("b" if line[at] != "b" else "c") + line[at + 1:]


def _with_guesses(guesses: list[str]):
    nb = build_submission(LESSON)
    first_test = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    solution = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution"))
    solution.source += "\n" + "\n".join(f"# {g}" for g in guesses)
    printed = nbformat.v4.new_code_cell("\n".join(f"print({g!r})" for g in guesses))
    written = nbformat.v4.new_markdown_cell("\n\n".join(guesses))
    nb.cells[first_test:first_test] = [printed, written]
    return nb


# Red team 5 against the notebook's ceiling: the clean-up after a notebook that filled /tmp with empty folders
# (about 2.6 times as long to remove as to make), and a fence before the tests that the sandbox's PID 1 cannot
# finish quickly (a thread stuck in a spawn whose child blocks on a FIFO, and processes restarted as they are ended).
WIPE_CELL = """import os, time
t0, n = time.monotonic(), 0
fd = os.open('/tmp', os.O_RDONLY)
while time.monotonic() - t0 < 3.0:
    for _ in range(500):
        os.mkdir(f'w{os.getpid()}-{time.monotonic_ns()}-{n}', dir_fd=fd); n += 1
"""
STALL_CELL = r'''import os, time, threading, ctypes, signal
def _age():
    start = int(open('/proc/self/stat').read().rpartition(')')[2].split()[19]) / os.sysconf('SC_CLK_TCK')
    return float(open('/proc/uptime').read().split()[0]) - start
if not os.path.exists('/tmp/stall-fifo'):
    os.mkfifo('/tmp/stall-fifo')
libc = ctypes.CDLL(None)
def _stall():
    while True:
        fa = ctypes.create_string_buffer(512)
        libc.posix_spawn_file_actions_init(fa)
        libc.posix_spawn_file_actions_addopen(fa, 0, b'/tmp/stall-fifo', os.O_RDONLY, 0)
        pid = ctypes.c_int()
        libc.posix_spawn(ctypes.byref(pid), b'/bin/true', fa, None, (ctypes.c_char_p * 2)(b'/bin/true', None), None)
def _respawn():
    parent = os.getppid()
    for i in range(200000):
        pid = ctypes.c_int()
        libc.posix_spawn(ctypes.byref(pid), b'/bin/sleep', None, None, (ctypes.c_char_p * 3)(b'/bin/sleep', b'60', None), None)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        if i % 20 == 0:
            try:
                os.kill(parent, signal.SIGCONT)
            except OSError:
                pass
        time.sleep(0.0005)
os.register_at_fork(after_in_child=lambda: threading.Thread(target=_respawn, daemon=True).start())
threading.Thread(target=_stall, daemon=True).start()
'''


def _before_tests(cells: list[str]):
    nb = build_submission(LESSON)
    first_test = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade"))
    nb.cells[first_test:first_test] = [nbformat.v4.new_code_cell(c) for c in cells]
    return nb


def _sleeping():
    """Its first learner cells sleep just under the cell limit; every later learner cell runs past it."""
    nb = build_submission(LESSON)
    learner = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("nbgrader", {}).get("grade")]
    for i, cell in enumerate(learner):
        pause = TIMEOUT - 1 if i < 3 else 600
        cell.source = f"import time\ntime.sleep({pause})\n" + cell.source
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    work = tmp_path_factory.mktemp("trust")
    subs, out = work / "submissions", work / "graded"
    guesses = _hidden_guesses()
    write_submission(subs, "guess-right", LESSON, _with_guesses(guesses))
    write_submission(subs, "guess-wrong", LESSON, _with_guesses([_wrong(g) for g in guesses]))
    write_submission(subs, "sleeper", LESSON, _sleeping())
    write_submission(subs, "wiper", LESSON, _before_tests([WIPE_CELL] * 3))
    sleep = f"import time\ntime.sleep(max(0.0, min({TIMEOUT} - 0.6, {NOTEBOOK_TIMEOUT} - 3.0 - _age())))"
    write_submission(subs, "fencer", LESSON, _before_tests([STALL_CELL] + [sleep] * 8))
    for name in FORMULA_NAMES:
        write_submission(subs, name, LESSON, build_submission(LESSON))
    write_submission(subs, "honest", "=cmd|' /C calc'!A0", build_submission(LESSON))
    from course.grading import sandbox

    unsafe = [] if sandbox.available()[0] else ["--unsafe-no-sandbox"]
    proc = subprocess.run([COURSE, "grade", str(subs), "--out", str(out), "--timeout", str(TIMEOUT),
                           "--notebook-timeout", str(NOTEBOOK_TIMEOUT), "--jobs", "2", *unsafe],
                          capture_output=True, text=True, timeout=900)
    assert (out / "results.json").is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, guesses, proc


def _page_text(path: str) -> str:
    """What a reader of the page sees: its text, tags removed, entities decoded, whitespace collapsed."""
    page = Path(path).read_text(encoding="utf-8")
    page = re.sub(r"<(script|style)\b.*?</\1\s*>", " ", page, flags=re.S | re.I)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def test_the_feedback_page_is_the_same_whichever_guesses_of_hidden_lines_were_right(graded):
    out, guesses, proc = graded
    results = results_by_key(out / "results.json")
    right, wrong = results[("guess-right", LESSON)], results[("guess-wrong", LESSON)]
    assert right["score"] == right["max_score"] == wrong["score"] > 0, (right, wrong)
    pages = {}
    for key, said in (("guess-right", guesses), ("guess-wrong", [_wrong(g) for g in guesses])):
        text = _page_text(results[(key, LESSON)]["feedback"])
        for g in said:                                          # every guess comes back as it was written
            assert text.count(" ".join(g.split())) >= 3, (key, g)
        for i, g in enumerate(said):
            text = text.replace(" ".join(g.split()), f"<<guess {i}>>")
        pages[key] = text.replace(key, "<<student>>")
    assert pages["guess-right"] == pages["guess-wrong"]
    assert "removed" not in pages["guess-right"]


def test_every_table_for_spreadsheets_is_formula_free_under_any_separator(graded):
    out, _, proc = graded
    tables = sorted(p for p in out.rglob("*") if p.suffix in (".csv", ".tsv"))
    assert out / "grades.csv" in tables, tables
    starts = ("=", "+", "-", "@", "\uff1d", "\uff0b", "\uff0d", "\uff20")
    found = []
    for table in tables:
        text = table.read_text(encoding="utf-8")
        for line in text.splitlines():                     # a spreadsheet that ignores quotes and splits lines
            for sep in (",", ";", "\t", " ", "|", ":"):
                for cell in line.split(sep):
                    if cell.strip().lstrip("\"'").startswith(starts) and not cell.strip().startswith(("'", "\"'")):
                        found.append(f"{table.name}: {cell!r} (split on {sep!r})")
        for sep in (",", ";", "\t"):                           # one that honours quotes
            for row in csv.reader(io.StringIO(text), delimiter=sep):
                found += [f"{table.name}: {c!r} (csv, {sep!r})" for c in row if c.strip().startswith(starts)]
        assert all(c.isprintable() or c == "\n" for c in text), f"{table.name} holds unprintable characters"
    assert not found, found
    rows = list(csv.DictReader(open(out / "grades.csv", encoding="utf-8")))
    shown = {r["student"] for r in rows}
    assert "x\\x3b\\x3d1+2" in shown and "tab\\x09\\x3dcmd" in shown and "line\\x0a\\x3d2" in shown, shown
    assert any(r["lesson"].startswith("\\x3dcmd") for r in rows), rows
    assert len(rows) == 5 + len(FORMULA_NAMES) + 1, rows


def test_a_notebook_whose_every_cell_times_out_ends_within_its_limit(graded):
    out, _, proc = graded
    results = results_by_key(out / "results.json")
    r = results[("sleeper", LESSON)]
    assert r["status"] == "timeout", r
    assert "notebook" in r["detail"], r["detail"]
    # the clean-up after a notebook that filled /tmp, and a fence that cannot finish, are the notebook's time too
    # (the judge's own clock for the notebook, phases["judge"]: the batch's "seconds" also holds the grader's intake
    # and, for a slot's first submission, the judge's start, which are the grader's costs, not the notebook's)
    for student in ("sleeper", "wiper", "fencer"):
        r = results[(student, LESSON)]
        assert r["phases"]["judge"] <= NOTEBOOK_TIMEOUT + TIMEOUT, (student, r["phases"], r["status"], r["detail"][:500])

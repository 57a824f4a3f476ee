"""The README and the docs say only what is true of the code.

* Every `course ...` command they show (in a code span or a code block) is accepted by the course's own
  parser as typed, and `course <command> --help` works for each command named.
* Every `make` target they name exists in the Makefile.
* Every relative link points at a file of the repository.
* The README is a five-minute read (at most 200 lines), and no doc dates a number by a commit hash.

* `course dist`'s audit reads a web page as a reader sees it (the website's pages: tests/test_site.py).

Fast: nothing is run but argparse and the audit's reading of the notebooks.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# The docs a reader is sent to. The CHANGELOG is history (its commands were true then): it is read
# for commit hashes only.
DOCS = [README, ROOT / "CONTRIBUTING.md", ROOT / "book" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HISTORY = [ROOT / "CHANGELOG.md"]
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>&1", ":::"}
ELLIPSIS = {"...", "…"}
# Placeholders a doc writes for a value: GNU parallel's {} and a shard's I/N.
PLACEHOLDERS = {"{}": "0", "I/N": "0/2"}


def _code(text: str) -> list[str]:
    """Every piece of code a doc shows: each line of a fenced block, and each inline code span."""
    pieces = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M):
        pieces += block.splitlines()
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.S | re.M)
    pieces += re.findall(r"`([^`\n]+)`", prose)
    return pieces


def _tokens(piece: str) -> list[str]:
    try:
        return shlex.split(piece, comments=True)
    except ValueError:                        # an unbalanced quote in prose: take the words as they are
        return piece.split()


def _after(tokens: list[str], i: int) -> list[str]:
    """The words of a command after position i, up to a shell operator, placeholders filled in."""
    out = []
    for t in tokens[i + 1:]:
        if t in SHELL_OPERATORS or t.startswith(("|", ">", ";", "&")):
            break
        for mark, value in PLACEHOLDERS.items():
            t = t.replace(mark, value)
        out.append(t.rstrip(";"))
    return out


def _starts_command(tokens: list[str], i: int) -> bool:
    """Is tokens[i] where a command starts (the line's start, after an operator, VAR=value or sudo)?"""
    return i == 0 or tokens[i - 1] in SHELL_OPERATORS or "=" in tokens[i - 1] or tokens[i - 1] in ("sudo", "time", "exec")


def course_commands(text: str) -> list[list[str]]:
    """The argv of every `course ...` command in ``text`` (``course`` or ``.venv/bin/course``)."""
    found = []
    for piece in _code(text):
        tokens = _tokens(piece)
        for i, t in enumerate(tokens):
            named = t.endswith("/bin/course") or (t == "course" and _starts_command(tokens, i))
            if named and i + 1 < len(tokens) and re.fullmatch(r"[a-z]+", tokens[i + 1]):
                found.append(_after(tokens, i))
    return found


def make_targets(text: str) -> set[str]:
    """Every target named after `make` in ``text``'s code (variables and options left out)."""
    targets = set()
    for piece in _code(text):
        tokens = _tokens(piece)
        for i, t in enumerate(tokens):
            if t != "make" or not _starts_command(tokens, i):
                continue
            words, skip = _after(tokens, i), False
            for w in words:
                if skip:
                    skip = False
                elif w in ("-o", "-C", "-f", "-j"):
                    skip = True
                elif not w.startswith("-") and "=" not in w and re.fullmatch(r"[\w.-]+", w):
                    targets.add(w)
    return targets


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set()
    for line in text.splitlines():
        m = re.match(r"^([\w.$()%-][\w.$()% -]*):(?!=)", line)
        if m and not line.startswith((".PHONY", "\t")):
            targets |= set(m.group(1).split())
    return targets


def _parses(argv: list[str]) -> str | None:
    """None if `course` accepts ``argv``, else what it printed."""
    from course.commands.cli import parse_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parse_args(list(argv))
    except SystemExit as exc:
        return None if exc.code == 0 else (err.getvalue().strip().splitlines() or ["exit 2"])[-1]
    return None


def _command_words(argv: list[str]) -> list[str]:
    """The command (and sub-command) an argv names: ``grade merge``, ``workshop``..."""
    words = [argv[0]]
    if argv[:2] == ["grade", "merge"]:
        words.append("merge")
    return words


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_course_command_shown_parses(doc):
    commands = course_commands(doc.read_text(encoding="utf-8"))
    wrong = []
    for argv in commands:
        words = _command_words(argv)
        problem = _parses([*words, "--help"])
        if problem:
            wrong.append(f"course {' '.join(words)} --help: {problem}")
            continue
        if argv == words:
            continue                            # a command named in prose, no arguments shown
        problem = _parses(argv)
        required = re.search(r"the following arguments are required: (.*)", problem or "")
        if required:                            # options named in prose (`course grade --shard I/N`): fill in the rest
            missing = [n.strip() for n in required.group(1).split(",")]
            problem = _parses(argv + [w for n in missing for w in ((n, "x") if n.startswith("-") else ("x",))])
        if problem and ELLIPSIS & set(argv):
            problem = None                      # `course grade merge R0 ... --out R`: an elided list
        if problem:
            wrong.append(f"course {shlex.join(argv)}: {problem}")
    assert not wrong, f"{doc.name} shows commands the course does not accept:\n" + "\n".join(wrong)


def test_the_docs_show_the_commands_of_every_audience():
    """The test above reads what it should: the README and the guides show the main commands."""
    shown = {tuple(_command_words(argv)) for doc in DOCS for argv in course_commands(doc.read_text(encoding="utf-8"))}
    for words in [("check",), ("lab",), ("grade",), ("grade", "merge"), ("dist",), ("doctor",), ("workshop",),
                  ("run",), ("release",)]:
        assert words in shown, f"no doc shows `course {' '.join(words)}`"
    assert course_commands("run `.venv/bin/course grade subs --out g --jobs 2 | tee log` (`course` alone), "
                           "`from course import checks`") == [["grade", "subs", "--out", "g", "--jobs", "2"]]
    assert _parses(["grade", "subs", "--out", "g", "--no-such-option"])     # a wrong option is caught


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_make_target_named_exists(doc):
    named = make_targets(doc.read_text(encoding="utf-8"))
    missing = named - makefile_targets()
    assert not missing, f"{doc.name} names make targets the Makefile does not have: {sorted(missing)}"


def test_make_targets_are_read():
    assert {"run", "test", "setup", "lab", "check", "site", "workshop-collect"} <= makefile_targets()
    assert make_targets('`make lab PORT=8899 ARGS="--no-browser"` and `make -o .venv/.installed run`, '
                        '`pins used by make and CI`') == {"lab", "run"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_point_at_files(doc):
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.S | re.M)
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"{doc.name} links to files that do not exist: {broken}"


def test_readme_is_a_five_minute_read():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: at most 200 (move the rest to docs/)"
    text = "\n".join(lines)
    for must in ("make run", "make test", "docs/learners.md", "docs/instructors.md", "docs/workshops.md"):
        assert must in text, f"the README no longer mentions {must}"


# A commit hash: 7 to 40 hex digits with at least one digit and one letter (so that no word or number matches).
COMMIT = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b")


def test_no_doc_dates_a_number_by_a_commit():
    """A number is dated by when and where it was measured, with the command that gives it; a commit hash
    says neither to a reader (and the history is in the CHANGELOG, by release)."""
    assert COMMIT.search("suite 8 min 0 s at 0b515b6") and COMMIT.search("before (7d2ad36)")
    assert not COMMIT.search("2026-11-27, 0.065 CPU-s, sha256, decade, 1000000")
    found = []
    for doc in DOCS + HISTORY + sorted((ROOT / "docs").rglob("*.md")):
        if doc == ROOT / "docs" / "fairness.md":      # written by make certify: its ids are mutants' content hashes
            continue
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for m in COMMIT.finditer(line):
                found.append(f"{doc.relative_to(ROOT)}:{n}: {m.group(0)} in {line.strip()[:100]!r}")
    assert not found, "commit hashes in the docs (say when and where, and the command):\n" + "\n".join(found)


def test_the_audit_reads_pages_as_a_reader_does(tmp_path):
    """The audit finds a solution line in a web page however the page wraps it: split by highlighting
    tags, its quotes as entities, or escaped inside a page's embedded data; and passes the lines the
    student notebooks show anyway."""
    import json

    import nbformat

    from course.commands.lessons import all_lessons
    from course.tools.dist import _answers, _student_text, audit

    _, solution_lines, _ = _answers(ROOT)
    shown = _student_text(ROOT)
    line = sorted(l for l in solution_lines if l not in shown and ('"' in l or "'" in l or "(" in l))[0]
    tokens = re.split(r"(\W)", line)
    pages = {
        "highlighted/index.html": "<pre><code>" + "".join(f'<span class="tok">{t.replace(chr(34), "&quot;")}</span>'
                                                          for t in tokens) + "</code></pre>",
        "data/index.html": f"<script>window.__remixContext = {json.dumps({'code': 'x = 1' + chr(10) + line})};</script>",
        "page.json": json.dumps({"children": [{"type": "code", "value": line}]}),
    }
    for rel, text in pages.items():
        folder = tmp_path / rel.replace("/", "_")
        (folder / rel).parent.mkdir(parents=True)
        (folder / rel).write_text(text, encoding="utf-8")
        assert any("line of a solution" in p for p in audit(folder, ROOT)), (rel, text[:300])
    shown = tmp_path / "shown"
    (shown / "lesson").mkdir(parents=True)
    student = nbformat.read(str(all_lessons(ROOT)[0].student), as_version=4)
    (shown / "lesson" / "index.html").write_text("<pre>" + "\n".join(c.source for c in student.cells) + "</pre>",
                                                 encoding="utf-8")
    assert audit(shown, ROOT) == []

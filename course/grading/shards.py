"""A class cut into shards: which shard grades a submission, and ``course grade merge``, the one writer of the
merged results and gradebook."""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from course.commands.lessons import all_lessons
from course.tools.workspace import Workspace
from course.grading.assignments import generate_assignments
from course.grading.notebooks import sha256_of
from course.grading.results import CellResult, GradebookWriter, SubmissionResult, atomic_write, without_password, write_results

SHARD_FILE = ".course-shard.json"      # in a shard's --out: which shard of how many it graded


def shard_of(student: str, lesson: str, count: int) -> int:
    """The shard, ``0 .. count - 1``, that grades ``student``'s ``lesson``: SHA-256 of the two names, so
    every machine, Python version and run agrees (Python's own ``hash()`` is salted per process)."""
    digest = hashlib.sha256(f"{student}\0{lesson}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def check_shard(index: int, count: int) -> tuple[int, int]:
    if not (isinstance(index, int) and isinstance(count, int) and 0 <= index < count):
        raise ValueError(f"a shard is I/N with 0 <= I < N (got {index}/{count})")
    return index, count


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (0-based, as a Slurm array index or a Kubernetes completion index) -> ``(I, N)``."""
    try:
        index, count = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--shard takes I/N, e.g. 0/4 (shards 0 to 3 of 4); got {text!r}") from None
    return check_shard(index, count)


def record_shard(out: Path, shard: tuple[int, int] | None) -> None:
    path = out / SHARD_FILE
    if shard is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, json.dumps({"shard": shard[0], "of": shard[1]}) + "\n")


class MergeError(Exception):
    """Shards that cannot be merged as they are (overlapping, incomplete, or graded on other lesson versions)."""


def merge(inputs: list[Path], out: Path, *, db_url: str | None = None, progress=print) -> list[SubmissionResult]:
    """Merge the results of ``course grade --shard`` runs into ``out``: the only writer of its
    ``grades.csv``, ``results.json``, ``feedback/``, ``autograded/``, ``submitted/`` and gradebook.

    Refuses (:class:`MergeError`) shards that overlap (a submission graded in two), that were graded
    with different shard counts or against other versions of a lesson than each other or this
    checkout, and an incomplete set. Idempotent: merging again writes the same files, and only
    submissions whose result changed since the last merge into the same gradebook are written to it.
    ``db_url`` puts the gradebook in that database (nbgrader's ``CourseDirectory.db_url``, e.g.
    ``postgresql://user@host/db``) instead of ``out/gradebook.db``.
    """

    out = Path(out).resolve()
    inputs = [Path(p).resolve() for p in inputs]
    if not inputs:
        raise MergeError("nothing to merge: name the --out folders of the shards")
    if len(set(inputs)) != len(inputs):
        raise MergeError("a shard folder is named twice")
    if out in inputs:
        raise MergeError(f"--out {out} is one of the shards: merge into a folder of its own")
    found = _read_shards(inputs)
    known = {lesson.id: lesson for lesson in all_lessons()}
    used = sorted({lesson for _, lesson in found if lesson in known})
    current = {lesson: sha256_of(known[lesson].solution) for lesson in used}   # what a workspace's source/ holds
    _check_versions(found, current)
    had_gradebook = (out / "gradebook.db").is_file()
    ws = Workspace(out, db_url=db_url).prepare(used)
    generate_assignments(ws, used, fresh=not had_gradebook)

    record = out / ".course-merged.json"
    previous = {}
    try:
        if json.loads(record.read_text(encoding="utf-8")).get("db_url") == ws.db_url:
            previous = {(r["student"], r["lesson"]): r for r in json.loads((out / "results.json").read_text(encoding="utf-8"))}
    except (OSError, ValueError, KeyError, TypeError):
        previous = {}
    merged, written = [], 0
    gradebook = GradebookWriter(ws)
    try:
        for (student, lesson), (folder, res) in sorted(found.items()):
            for kind, name in (("feedback", f"{lesson}.html"), ("autograded", f"{lesson}.ipynb"),
                               ("submitted", f"{lesson}.ipynb")):
                src, dst = folder / kind / student / lesson / name, out / kind / student / lesson / name
                if src.is_file() and not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    tmp = dst.with_name(f".{name}.merge")
                    shutil.copyfile(src, tmp)
                    os.replace(tmp, dst)
                if kind == "feedback":
                    res.feedback = str(dst) if src.is_file() else ""
            if lesson in current and previous.get((student, lesson)) != asdict(res):
                gradebook.record(res)
                written += 1
            merged.append(res)
    finally:
        gradebook.close()
    write_results(out, merged)
    atomic_write(record, json.dumps({"db_url": ws.db_url, "shards": [str(f) for f in inputs]}, indent=1) + "\n")
    if progress:
        where = str(ws.db_path) if ws.db_url == f"sqlite:///{ws.db_path}" else without_password(ws.db_url)
        progress(f"course grade merge: {len(merged)} submissions from {len(inputs)} folder(s) into {out}; "
                 f"gradebook {where}: {written} written, {len(merged) - written} unchanged")
    return merged


def _read_shards(inputs: list[Path]) -> dict:
    """Every result of every shard, by (student, lesson): ``(folder, result)``; refuses overlaps, results in
    the wrong shard, shards cut in different numbers and missing shards."""
    shards, found = {}, {}
    for folder in inputs:
        try:
            rows = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        except OSError:
            raise MergeError(f"{folder} has no results.json: has that shard run (course grade ... --out {folder})?") from None
        except ValueError as exc:
            raise MergeError(f"{folder}/results.json is not readable JSON ({exc})") from None
        try:
            spec = json.loads((folder / SHARD_FILE).read_text(encoding="utf-8"))
            shards[folder] = (int(spec["shard"]), int(spec["of"]))
        except OSError:
            shards[folder] = None
        for row in rows:
            res = SubmissionResult(**{**row, "cells": [CellResult(**c) for c in row.get("cells", [])]})
            key = (res.student, res.lesson)
            if key in found:
                raise MergeError(f"{res.student}/{res.lesson} is in two shards, {found[key][0]} and {folder}: "
                                 "each submission must be graded by exactly one shard")
            sh = shards[folder]
            if sh is not None and shard_of(res.student, res.lesson, sh[1]) != sh[0]:
                raise MergeError(f"{folder} holds {res.student}/{res.lesson}, which belongs to shard "
                                 f"{shard_of(res.student, res.lesson, sh[1])}/{sh[1]}, not {sh[0]}/{sh[1]}: "
                                 "was that folder graded without --shard, or with another one?")
            found[key] = (folder, res)
    counts = {sh[1] for sh in shards.values() if sh}
    if len(counts) > 1:
        raise MergeError("the shards were cut in different numbers: " +
                         ", ".join(f"{f} is {sh[0]}/{sh[1]}" for f, sh in shards.items() if sh))
    if counts:
        (count,) = counts
        seen = {}
        for folder, sh in shards.items():
            if sh and sh[0] in seen:
                raise MergeError(f"{seen[sh[0]]} and {folder} are both shard {sh[0]}/{count}")
            if sh:
                seen[sh[0]] = folder
        missing = sorted(set(range(count)) - set(seen))
        if missing:
            raise MergeError(f"shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing: merge every shard "
                             "of the batch (their grades.csv would be incomplete otherwise)")
    return found


def _check_versions(found: dict, current: dict) -> None:
    """Refuses results graded on some test cells only, or against another version of a lesson."""
    for (student, lesson), (folder, res) in sorted(found.items()):
        if ":only:" in res.sha256:
            raise MergeError(f"{folder} graded {student}/{lesson} on some test cells only (a hook of the "
                             "course's own tests of its tests): grade that shard again without it")
        version = res.sha256.partition(":")[2]
        if version and lesson in current and version != current[lesson]:
            others = sorted({str(f) for f, r in found.values() if r.lesson == lesson
                             and r.sha256.partition(":")[2] == current[lesson]})
            raise MergeError(f"{folder} graded {lesson} against another version of the lesson than "
                             + (f"{', '.join(others)} and " if others else "") + "this checkout's solutions/ "
                             f"(e.g. {student}/{lesson}): grade that shard again with this version")

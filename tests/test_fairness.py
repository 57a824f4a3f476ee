"""The fairness certificate's engine (course/tools/fairness) and a sample of what it certifies.

* Unit tests: every mutation operator on a small cell (library and hand-written), the drops, the stable
  sample, the message checks, the comparison that decides equivalence, and one equivalent and one
  non-equivalent mutant of lesson 00 decided by evidence.
* ``test_sampled_mutants_and_alternatives``: one `course grade` batch with a fixed sample of mutants
  (``SAMPLE_PER_LESSON`` per lesson, of one exercise, both chosen by a stable hash) and every alternative of
  ``tests/alternatives/`` (packed: alternatives of different cells share a submission); mutants must lose
  points (or be equivalent by evidence), messages must not regress from the certificate, alternatives must
  keep full marks.
* ``test_certificate_targets``: the committed certificate (docs/fairness.json) meets the kill and
  alternative targets for every lesson it certifies.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import torch

from course.tools.fairness import certify, equivalence, messages, mutants

ROOT = Path(__file__).resolve().parents[1]
SAMPLE_PER_LESSON = 1
# Grading a lesson-16 notebook runs Triton's interpreter (minutes of CPU for a batch): `make certify`
# covers it; the suite's sample leaves it out (tests/test_grading.py grades its bank).
SAMPLE_SKIPS = {"16_flash_attention_triton"}

CELL = '''def attend(q, k, v, mask=None, d_model=8, length_penalty=0.6):
    """Doc: (..., T, d) -> (..., T, d)."""
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask, float("-inf"))
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    weights = torch.softmax(scores, dim=-1)
    weights = self.drop(weights)
    out = weights @ v
    m = torch.full((4, 1), float("-inf"))
    pos = torch.arange(4)
    x = out.permute(0, 2, 1, 3)
    var = out.var(-1, keepdim=True)
    tail = out[:, :-1]
    total = scores.sum(dim=d_model)
    score = total / (4 ** length_penalty)
    return out + 1
    ### END SOLUTION
'''

CLASS_CELL = '''class Net(nn.Module):
    def __init__(self, d):
        super().__init__()
        ### BEGIN SOLUTION
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(3)])
        ### END SOLUTION
'''


def made(operator: str, cell: str = CELL) -> list[str]:
    """The changed lines ('+' side of the diff) of every mutant one operator makes."""
    found = mutants.mutate_cell("L", "attend", cell, only={operator})
    return ["\n".join(ln[1:].strip() for ln in m.diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
            for m in found.mutants]


@pytest.mark.parametrize("operator, expected", [
    ("attention:softmax_axis", "torch.softmax(scores, dim=-2)"),
    ("attention:scale", "scores = q @ k.transpose(-2, -1)"),
    ("attention:scale", "math.sqrt(d_model)"),
    ("attention:mask_sign", "masked_fill(~(mask), float(\"-inf\"))"),
    ("attention:fill_value", "masked_fill(mask, 0.0)"),
    ("attention:fill_value", "masked_fill(mask, -1e4)"),
    ("attention:causal_diagonal", "tril(diagonal=1)"),
    ("attention:causal_diagonal", "tril(diagonal=-1)"),
    ("attention:missing_transpose", "scores = q @ k / math.sqrt"),
    ("attention:permute_order", "out.permute(0, 1, 2, 3)"),
    ("attention:permute_order", "out.permute(0, 2, 3, 1)"),
    ("attention:variance", "out.var(-1, keepdim=True, unbiased=False)"),
    ("attention:dropout", "weights = weights"),
    ("attention:dropout", "out = self.drop(weights @ v)"),
    ("attention:running_max_start", "torch.full((4, 1), 0.0)"),
    ("attention:position_shift", "torch.arange(1, (4) + 1)"),
    ("attention:length_penalty", "4 ** 0.0"),
    ("attention:length_penalty", "4 ** 1.0"),
    ("generic:number_decrement", "return out + 0"),
    ("generic:slice_bounds", "out[:, :]"),
    ("generic:axis_change", "scores.sum(dim=-1)"),
    ("generic:statement_removal", "return out + 1"),     # a line removed: the diff's '+' side is empty
    ("mutmut:operator_swap_op", "return out - 1"),
    ("mutmut:operator_number", "return out + 2"),
    ("mutmut:operator_arg_removal", "torch.softmax(dim=-1)"),
])
def test_operator_makes_the_mutant(operator, expected):
    if operator == "generic:statement_removal":
        found = mutants.mutate_cell("L", "attend", CELL, only={operator}).mutants
        assert any("-    return out + 1" in m.diff for m in found), [m.diff for m in found]
        return
    lines = made(operator)
    assert any(expected in line for line in lines), f"{operator} made:\n" + "\n---\n".join(lines)


def test_shared_layers_operator():
    lines = made("attention:shared_layers", CLASS_CELL)
    assert "self.b = self.a" in lines
    assert any("[nn.Linear(d, d)] * (3)" in line for line in lines), lines


def test_mutants_stay_in_the_solution_region_and_differ_from_the_reference():
    found = mutants.mutate_cell("L", "attend", CELL)
    reference, region = mutants.split_solution(CELL)
    assert found.dropped["outside the solution region"] > 0          # the signature's defaults, mutated, dropped
    norms = {mutants.normalise(m.source) for m in found.mutants}
    assert len(norms) == len(found.mutants) and mutants.normalise(reference) not in norms
    for m in found.mutants:
        compile(m.source, "m", "exec")
        assert "def attend(q, k, v, mask=None, d_model=8, length_penalty=0.6):" in m.source
    assert found.generated == len(found.mutants) + sum(found.dropped.values())
    families = {m.family for m in found.mutants}
    assert families == {"mutmut", "generic", "attention"}, families


def test_the_library_still_provides_its_operators():
    table = mutants.library_operators()
    assert {f"mutmut:{n}" for n in mutants.LIBRARY_OPERATORS} == set(table)


def test_sample_is_stable_and_bounded():
    found = mutants.mutate_cell("L", "attend", CELL).mutants
    a, b = mutants.sample(found, 5, salt="x"), mutants.sample(list(found), 5, salt="x")
    assert [m.key for m in a] == [m.key for m in b] and len(a) == 5
    assert [m.key for m in mutants.sample(found, 5, salt="y")] != [m.key for m in a]
    assert mutants.sample(found, None) == found


def test_every_lesson_mutates():
    """A new lesson joins by existing: every lesson's solution cells make mutants with no per-lesson code."""
    for lesson in certify.lessons():
        cells = mutants.solution_cells(ROOT, lesson)
        assert cells, lesson
        some = mutants.mutate_cell(lesson, *next(iter(cells.items())), only={"mutmut:operator_arg_removal", "generic:statement_removal"})
        assert some.mutants, f"{lesson}: no mutant of its first exercise"


# ------------------------------------------------------------------------------------------------ messages

@pytest.mark.parametrize("message, problem", [
    ("", "no message"),
    ("AssertionError", "bare AssertionError"),
    ("AssertionError: ", "bare AssertionError"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 3, in f\nValueError: bad", "traceback"),
    ("RuntimeError: The size of tensor a (7) must match the size of tensor b (4) at non-singleton dimension 1",
     "only a library error"),
    ("TypeError: raised by your code after a hidden check's inputs reached it (its message is not shown: it could "
     "repeat them)", "raised inside a hidden check"),
    ("name 'shifted' is not defined: run (or fix) the cell that defines it", "does not name"),
    ("AssertionError: weights = softmax(torch.tensor([1000.0, 0.0]) * 3, dim=0) failed", "hidden-test code"),
])
def test_message_checks_catch(message, problem):
    found = messages.problems(message, names=["softmax"], hidden={"weights = softmax(torch.tensor([1000.0, 0.0]) * 3, dim=0)"})
    assert any(problem in p for p in found), found


@pytest.mark.parametrize("message", [
    "AssertionError: weights for query [2, 0] is 1.15365 at position [0], but 0.866813 was expected (3 of 3 values differ).",
    "AssertionError: your softmax returned a row summing to 2.0; each row should sum to 1 along dim.",
    "AssertionError: column 0 should hold the start token 0; yours holds [1, 4, 7].",
    "ValueError: your masked_softmax was given a mask of shape (3,) for scores (2, 3, 4): pass (T_q, T_k) or (B, 1, T_k).",
])
def test_message_checks_pass(message):
    assert messages.problems(message, names=["softmax", "masked_softmax"], hidden={"x = torch.randn(5, 5)"}) == []


# ------------------------------------------------------------------------------------------------ equivalence

def test_difference():
    a = torch.tensor([1.0, 2.0, float("nan")])
    assert equivalence.difference(a, a.clone())[0] is None
    assert "NaN" in equivalence.difference(a, torch.tensor([1.0, 2.0, 3.0]))[0]
    assert "max |difference|" in equivalence.difference(a[:2], a[:2] + 1e-2)[0]
    assert equivalence.difference(a[:2], a[:2] + 1e-7)[0] is None
    assert "shape" in equivalence.difference(torch.zeros(2, 3), torch.zeros(3, 2))[0]
    assert "dtype" in equivalence.difference(torch.zeros(2), torch.zeros(2, dtype=torch.float64))[0]
    assert equivalence.difference((a[:2], 3), (a[:2], 3))[0] is None
    assert "3 vs 4" in equivalence.difference((a[:2], 3), (a[:2], 4))[0]
    assert "items" in equivalence.difference([1], [1, 2])[0]
    assert equivalence.difference({"w": torch.ones(2)}, {"w": torch.ones(2)})[0] is None


def test_variants_keep_shapes_and_dtypes():
    call = {"name": "f", "method": None, "args": (torch.randn(2, 3, 4), torch.ones(3, 4, dtype=torch.bool),
                                                   torch.tensor([3, 1])), "kwargs": {}}
    vs = equivalence.variants(call, seed=0)
    assert [how for how, _ in vs][:4] == ["recorded", "random", "large", "masked-row"]
    for _, v in vs:
        for x, y in zip(call["args"], v["args"]):
            assert x.shape == y.shape and x.dtype == y.dtype
    masked = dict(vs)["masked-row"]["args"][1]
    assert not masked[0].any()                                        # a fully masked row
    assert torch.allclose(dict(vs)["large"]["args"][0], call["args"][0] * 1000)


def test_equivalence_decided_by_evidence_both_ways():
    """Lesson 00: ``softmax(scores)`` with the default ``dim`` is the reference (equivalent); a softmax over
    ``dim=0`` of 2-D scores is not, and the evidence says where."""
    ref = mutants.split_solution(mutants.solution_cells(ROOT, "00_softmax_lookup")["soft_lookup"])[0]
    assert "softmax(scores, dim=-1)" in ref
    same = equivalence.decide(ROOT, "00_softmax_lookup", "soft_lookup", ref.replace("softmax(scores, dim=-1)", "softmax(scores)"))
    assert same["equivalent"] and same["inputs"] > 20 and same["max_difference"] == 0.0, same
    soft = mutants.split_solution(mutants.solution_cells(ROOT, "00_softmax_lookup")["softmax"])[0]
    other = soft.replace("def softmax(x, dim=-1):", "def softmax(x, dim=0):")
    assert other != soft
    differs = equivalence.decide(ROOT, "00_softmax_lookup", "softmax", other)
    assert not differs["equivalent"] and "softmax(" in differs["witness"], differs


# ------------------------------------------------------------------------------------------------ grading

def _packs(alts: dict[str, dict]) -> list[list[str]]:
    """Alternatives packed into submissions whose replaced cells are disjoint."""
    packs: list[tuple[set, list[str]]] = []
    for name, alt in alts.items():
        cells = set(alt["replace"])
        for used, names in packs:
            if not used & cells:
                used |= cells
                names.append(name)
                break
        else:
            packs.append((set(cells), [name]))
    return [names for _, names in packs]


@pytest.mark.slow
def test_sampled_mutants_and_alternatives(tmp_path):
    cert = certify.load(ROOT / "docs" / "fairness.json").get("lessons", {})
    subs = tmp_path / "submissions"
    expect: dict[tuple[str, str], tuple] = {}
    for lesson in certify.lessons():
        if lesson in SAMPLE_SKIPS:
            continue
        # one exercise per lesson, chosen by a stable hash (generating every mutant of every lesson costs ~25 s)
        cells = mutants.solution_cells(ROOT, lesson)
        cell = min(cells, key=lambda c: hashlib.sha1(f"make-test/{lesson}/{c}".encode()).hexdigest())
        every = mutants.mutate_cell(lesson, cell, cells[cell]).mutants
        recorded = {m["key"]: m for e in cert.get(lesson, {}).get("exercises", {}).values() for m in e["mutants"]}
        # a certified lesson: among the mutants its certificate records as killed (their messages are known);
        # a lesson not certified yet: among all its mutants
        pool = [m for m in every if recorded.get(m.key, {}).get("verdict") == "killed"] if recorded else every
        for mu in mutants.sample(pool, SAMPLE_PER_LESSON, salt="make-test"):
            certify._write(subs, mu.student, lesson, certify.build_submission(ROOT, lesson, {mu.cell: mu.source}))
            expect[(mu.student, lesson)] = ("mutant", mu, recorded.get(mu.key))
        alts = {n: a for n, a in certify.alternatives(ROOT, lesson).items() if n.startswith("alternatives:")}
        for i, names in enumerate(_packs(alts)):
            replace = {cell: src for n in names for cell, src in alts[n]["replace"].items()}
            student = f"alts_{i}"
            certify._write(subs, student, lesson, certify.build_submission(ROOT, lesson, replace, seed=0))
            expect[(student, lesson)] = ("alternatives", names, None)
    results, cpu, said = certify.grade(subs, tmp_path / "graded", jobs=1, timeout=60, notebook_timeout=300)
    got = {(r["student"], r["lesson"]): r for r in results}
    problems = []
    for key, (kind, what, recorded) in expect.items():
        r = got.get(key)
        if r is None:
            problems.append(f"{key}: not graded")
            continue
        if kind == "alternatives":
            if certify.lost_points(r):
                problems.append(f"{key[1]} alternatives {what} lost points: " + "; ".join(
                    f"{c['grade_id']}: {c['message'][:150]}" for c in certify.failing_cells(r)))
            continue
        mu = what
        if not certify.lost_points(r):
            evidence = equivalence.decide(ROOT, mu.lesson, mu.cell, mu.source)
            if not evidence["equivalent"]:
                problems.append(f"{key[1]} mutant {mu.key} of {mu.cell} ({mu.operator}) keeps full marks and differs at "
                                f"{evidence['witness']}:\n{mu.diff}")
            continue
        names = list(certify.reference_sources(ROOT, mu.lesson))
        hidden = certify.hidden_lines(ROOT, mu.lesson)
        failing = {c["grade_id"]: messages.problems(c["message"], names=names, hidden=hidden) for c in certify.failing_cells(r)}
        known = {f["cell"] for f in (recorded or {}).get("failing", []) if f["problems"]}
        for cell, found in failing.items():
            # no regression where the certificate knows this mutant (a lesson not certified yet is held to the
            # kill and hidden-code rules only: its messages are measured by `make certify`)
            if found and recorded is not None and cell not in known:
                problems.append(f"{key[1]} mutant {mu.key} ({mu.operator}): {cell}'s message fails the checks and the "
                                f"certificate does not list it: {found}")
            if any("hidden-test code" in p for p in found):
                problems.append(f"{key[1]} mutant {mu.key}: {cell} shows hidden-test code")
    print(f"graded {len(expect)} submissions, grading CPU {cpu:.0f} s", file=sys.stderr)
    assert not problems, "\n".join(problems) + f"\n--- course grade said:\n{said[-1500:]}"


def test_certificate_targets():
    """The committed certificate (docs/fairness.json) meets every target, for every exercise it certifies: no
    correct alternative lost a point; at least 98 % of the non-equivalent mutants lose points (a survivor
    reviewed in course/tools/fairness/decisions.json as an "acceptable" difference the contract allows is not
    held against the tests; a "hole" is); every killed mutant's failing cells have messages that pass the
    checks (course/tools/fairness/messages.py); no survivor is left unreviewed; and every exercise is covered by at
    least three correct alternatives in other styles."""
    cert = certify.load(ROOT / "docs" / "fairness.json").get("lessons", {})
    if not cert:
        pytest.skip("no certificate yet: run `make certify`")
    decisions = json.loads(certify.DECISIONS.read_text()) if certify.DECISIONS.is_file() else {}
    problems = []
    for lesson, rec in cert.items():
        if rec.get("error"):
            problems.append(f"{lesson}: {rec['error'][:200]}")
        for cell, ex in rec.get("exercises", {}).items():
            assert ex.get("killed", 0) + ex.get("surviving", 0) + ex.get("equivalent", 0) == len(ex["mutants"])
            unreviewed = [m["key"] for m in ex["mutants"] if m["verdict"] != "killed" and m["verdict"] != "equivalent"
                          and decisions.get(lesson, {}).get(m["key"], {}).get("decision") not in ("hole", "acceptable")]
            if unreviewed:
                problems.append(f"{lesson} {cell}: survivors not reviewed in decisions.json: {unreviewed}")
            if ex.get("kill_rate", 1.0) < certify.KILL_TARGET:
                problems.append(f"{lesson} {cell}: {ex['kill_rate']:.1%} of non-equivalent mutants killed "
                                f"(target {certify.KILL_TARGET:.0%})")
            if ex.get("messages_rate", 1.0) < 1.0:
                problems.append(f"{lesson} {cell}: {ex['killed'] - ex['messages_pass']} of {ex['killed']} killed mutants "
                                "have a message that fails the checks")
        for alt in rec.get("alternatives", []):
            if alt["lost"]:
                problems.append(f"{lesson} alternative {alt['name']} lost points: {alt['marks']}")
        for cell, (n, _blind) in certify.alternatives_per_exercise(rec).items():
            if n < certify.ALTERNATIVES_TARGET:
                problems.append(f"{lesson} {cell}: {n} correct alternative(s) cover it (target {certify.ALTERNATIVES_TARGET})")
    assert not problems, "\n".join(problems)


def test_certificate_page_matches_its_json():
    page, data = ROOT / "docs" / "fairness.md", ROOT / "docs" / "fairness.json"
    if not data.is_file():
        pytest.skip("no certificate yet: run `make certify`")
    from course.tools.fairness.report import write_page

    out = Path(str(page) + ".check")
    try:
        write_page(json.loads(data.read_text()), out)
        assert out.read_text() == page.read_text(), "docs/fairness.md is not what docs/fairness.json gives: run make certify"
    finally:
        out.unlink(missing_ok=True)


def test_submissions_and_alternatives():
    """A mutant's submission differs from the reference in its one cell; SEED reaches the parameters cell;
    every lesson's alternatives load, none is a bug, and the packs never put two entries on one cell."""
    cell = "soft_lookup"
    found = mutants.mutate_lesson(ROOT, "00_softmax_lookup")[cell].mutants[0]
    nb = certify.build_submission(ROOT, "00_softmax_lookup", {cell: found.source}, seed=2)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    assert by_id[cell].source == found.source.strip("\n")
    assert by_id["softmax"].source == certify.reference_sources(ROOT, "00_softmax_lookup")["softmax"].strip("\n")
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert "SEED = 2" in params.source and "SEED = 0" not in params.source
    for lesson in certify.lessons():
        alts = certify.alternatives(ROOT, lesson)
        assert alts, f"{lesson}: no correct alternative at all"
        cells = set(certify.reference_sources(ROOT, lesson))
        for name, alt in alts.items():
            assert set(alt["replace"]) <= cells, f"{lesson} {name} replaces cells the lesson does not have"
        packs = _packs(alts)
        for names in packs:
            used = [c for n in names for c in alts[n]["replace"]]
            assert len(used) == len(set(used))
        assert sorted(n for names in packs for n in names) == sorted(alts)

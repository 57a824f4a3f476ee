"""Every solution notebook runs under papermill in the smoke profile; student notebooks are in sync.

These are the course's own invariants: committed notebooks carry no outputs, the first code cell is
the `parameters` cell, grade ids are unique, the graded API of docs/design.md is present, no student
notebook leaks a solution or a hidden test, and `course release --check` passes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
COURSE = str(Path(sys.executable).parent / "course")
LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())

# The graded API (docs/design.md): names each lesson's solution cells must define.
GRADED_API = {
    "00_softmax_lookup": ["softmax", "soft_lookup"],
    "01_attention_pooling": ["mean_pooling", "AttentionPooling"],
    "02_rnn_attention": ["AdditiveAttention"],
    "03_attention_scores": ["dot_score", "scaled_dot_score", "cosine_score", "BilinearScore", "MLPScore", "masked_softmax"],
    "04_multi_hop_attention": ["MemoryHop"],
    "05_self_attention": ["scaled_dot_product_attention", "causal_mask", "padding_mask", "SelfAttention"],
    "06_multi_head_attention": ["split_heads", "merge_heads", "MultiHeadAttention"],
    "07_transformer_block": ["sinusoidal_encoding", "offset_matrix", "LayerNorm", "FeedForward", "EncoderBlock"],
    "08_transformer": ["DecoderBlock", "Transformer", "translation_loss", "greedy_decode", "beam_search", "average_checkpoints"],
    "09_language_model": ["lm_loss", "sample_next", "CausalSelfAttention", "Block", "GPT"],
    "10_bert": ["mask_tokens", "make_nsp_pairs", "BertEmbeddings", "Bert"],
    "11_vit": ["patchify", "PatchEmbedding", "ViTEmbeddings", "ViT"],
    "12_efficient_attention": ["chunked_attention", "repeat_kv"],
    "13_rotary_positions": ["rope_frequencies", "apply_rope", "RotarySelfAttention", "alibi_bias"],
    "14_induction_heads": ["repeated_sequences", "previous_token_score", "induction_score", "AttentionOnlyTransformer",
                           "ablate_heads", "ov_circuit", "qk_circuit", "composition_score"],
    "15_serving": ["SlidingWindowCache", "quantize_kv", "dequantize_kv", "speculative_generate", "linear_attention",
                   "linear_attention_recurrent"],
}


def _nb(folder: str, lesson: str):
    return nbformat.read(str(ROOT / folder / lesson / f"{lesson}.ipynb"), as_version=4)


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_committed_notebook_is_clean(lesson, folder):
    path = ROOT / folder / lesson / f"{lesson}.ipynb"
    assert path.is_file(), f"{path} is missing (run `course release`)"
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "parameters" in code[0].metadata.get("tags", []), "the first code cell must be tagged 'parameters'"
    for line in code[0].source.splitlines():
        if line.strip() and not line.strip().startswith("#"):
            assert re.fullmatch(r"[A-Z_][A-Z0-9_]* = .+", line.strip()), f"parameters cell holds more than literals: {line!r}"
    assert "PROFILE" in code[0].source and "DEVICE" in code[0].source and "SEED" in code[0].source
    for c in code:
        assert not c.outputs and c.execution_count is None, "committed notebooks carry no outputs"
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
    ids = [i for i in ids if i]
    assert len(ids) == len(set(ids)), f"duplicated grade_id: {sorted(i for i in ids if ids.count(i) > 1)}"
    assert any(c.metadata.get("nbgrader", {}).get("grade") for c in nb.cells), "no graded test cells"
    if folder == "notebooks":
        text = path.read_text()
        assert not re.search(r"BEGIN (SOLUTION|HIDDEN TESTS)", text), "student notebook leaks a solution or hidden tests"


@pytest.mark.parametrize("lesson", LESSONS)
def test_graded_api_present(lesson):
    nb = _nb("solutions", lesson)
    solution_ids = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")}
    for name in GRADED_API.get(lesson, []):
        assert name in solution_ids, f"{lesson}: no solution cell with grade_id {name!r} (the graded API of docs/design.md)"
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == name)
        assert re.search(rf"^(def|class) {name}\b", cell.source, re.M), f"{lesson}: cell {name!r} does not define {name}"
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    for c in tests:
        assert c.metadata["nbgrader"].get("points", 0) > 0, f"{c.metadata['nbgrader']['grade_id']} is worth no points"
        assert c.source.lstrip().startswith('"""'), f"{c.metadata['nbgrader']['grade_id']}: a test cell opens with a docstring"
    assert any("### BEGIN HIDDEN TESTS" in c.source for c in tests), f"{lesson} has no hidden tests"


@pytest.mark.slow
def test_release_check_passes():
    proc = subprocess.run([COURSE, "release", "--check"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr

# Every solution notebook runs in the smoke profile: see tests/test_newcomer.py (`make run` as typed).


def _assigned_at_top(src: str) -> set[str]:
    import symtable

    try:
        top = symtable.symtable(src, "<cell>", "exec")
    except SyntaxError:
        return set()
    return {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_later_cell_reads_a_name_a_test_cell_set(lesson):
    """A test cell's names stay its own: no later cell of the lesson reads a name whose last assignment was in a
    test cell. The solution notebook runs its hidden tests too (`course run`), the student notebook does not, and
    the grader keeps test cells apart: a hidden test that set `target` once broke the experiment after it in
    `make run` alone, while every grading test passed."""
    from course.grading.judge.lesson import free_names

    nb = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    last: dict[str, str] = {}
    problems = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        src = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        is_test = bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))
        if not is_test:
            problems += [f"cell {i} ({cell.get('id')}) reads {name!r}, last set by the test cell {last[name]}"
                         for name in free_names(src) if name in last]
        for name in _assigned_at_top(src):
            if is_test:
                last[name] = cell.get("id") or str(i)
            else:
                last.pop(name, None)
    assert not problems, "\n".join(problems)

"""Mutants of each graded exercise, derived from its reference solution cell.

A *mutant* is the reference solution cell of one exercise (its ``grade_id``) with one small change
inside the ``### BEGIN/END SOLUTION`` region: what a learner's slip or misunderstanding looks like.
The operators come in two families:

* **generic** (arithmetic, comparison, boolean, constant, unary, argument removal): mutmut's own node
  operators (``mutmut.mutation.mutators.mutation_operators``, on libcst's concrete syntax tree, which
  keeps the cell's formatting, so a mutant's diff is the changed line alone). mutmut has no number
  decrement, slice, axis or statement-removal operator; those four are written here, on the same tree
  and with the same interface (a node in, mutated nodes out).
* **attention-specific**, written here: what goes wrong in attention code (softmax over the wrong axis,
  the scale dropped or taken from d_model, the mask inverted or filled with the wrong value, the
  causal diagonal off by one, a transpose or permute missing or reordered, biased/unbiased variance,
  dropout dropped or moved, layers shared instead of independent, an online softmax's running max
  started at 0, a position range off by one, a length penalty dropped).

Mutants that do not compile, that touch lines outside the solution region, or that are identical to
the reference (or to an earlier mutant) once normalised by ``ast.unparse`` are dropped and counted.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import libcst as cst

_MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*$")

# mutmut's operators used here. Left out: string mutations ("XX" + s + "XX", case changes: in a
# solution cell a string is a dtype, an einsum spec or a message, and a mangled one raises at once,
# which tests nothing the course's tests are for), `a = b` -> `a = None` (the statement-removal
# operator below is the same slip, closer to what a learner writes), and an argument replaced by None
# (each one raises inside PyTorch; removing the argument, which mutmut also does, is the real slip:
# a forgotten dim=, keepdim= or mask).
LIBRARY_OPERATORS = ("operator_number", "operator_name", "operator_augmented_assignment", "operator_remove_unary_ops",
                     "operator_arg_removal", "operator_keywords", "operator_swap_op", "operator_if_exp", "operator_lambda")


@dataclass
class Mutant:
    lesson: str
    cell: str                 # the exercise's grade_id
    operator: str             # e.g. "mutmut:operator_swap_op" or "attention:softmax_axis"
    source: str               # the whole mutated solution cell, markers removed
    diff: str                 # unified diff against the reference cell
    key: str = ""             # stable id: a hash of lesson, cell and normalised source

    @property
    def family(self) -> str:
        return self.operator.split(":", 1)[0]

    @property
    def student(self) -> str:
        """A submission's student id (letters, digits, underscores)."""
        return f"m_{self.cell.lower()}_{self.key}"[:60]

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Generated:
    """What generation made of one exercise: the kept mutants and why others were dropped."""
    lesson: str
    cell: str
    mutants: list[Mutant] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)   # reason -> count

    @property
    def generated(self) -> int:
        return len(self.mutants) + sum(self.dropped.values())


# --------------------------------------------------------------------------------------------------
# Reading a lesson's solution cells

def split_solution(cell_source: str) -> tuple[str, set[int]]:
    """The cell's code without its solution markers, and the (1-based) lines that were inside them."""
    out, inside, region = [], False, set()
    for line in cell_source.splitlines():
        mark = _MARKER.match(line)
        if mark:
            inside = mark.group(1) == "BEGIN"
            continue
        out.append(line)
        if inside:
            region.add(len(out))
    return "\n".join(out) + "\n", region


def solution_cells(root: Path, lesson: str) -> dict[str, str]:
    """grade_id -> the raw source (markers included) of each solution cell of the instructor notebook."""
    nb = json.loads((Path(root) / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))
    out = {}
    for cell in nb["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and meta.get("solution") and "grade_id" in meta:
            src = cell["source"]
            out[meta["grade_id"]] = "".join(src) if isinstance(src, list) else src
    return out


def normalise(source: str) -> str:
    return ast.unparse(ast.parse(source))


# --------------------------------------------------------------------------------------------------
# Tree helpers

class _Collect(cst.CSTVisitor):
    """Every node, with the chain of enclosing class and function definitions."""

    def __init__(self):
        self.nodes: list[tuple[cst.CSTNode, tuple]] = []
        self._scope: list[cst.CSTNode] = []

    def on_visit(self, node):
        self.nodes.append((node, tuple(self._scope)))
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self._scope.append(node)
        return True

    def on_leave(self, node):
        if self._scope and self._scope[-1] is node:
            self._scope.pop()


def _nodes(module: cst.Module):
    visitor = _Collect()
    module.visit(visitor)
    return visitor.nodes


def _name(node) -> str:
    """The last name of a callee or attribute: ``torch.softmax`` -> softmax, ``self.drop`` -> drop."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return ""


def _dotted(node) -> str:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(node.value)}.{node.attr.value}"
    return ""


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


def _code(node) -> str:
    return cst.Module(body=[]).code_for_node(node)


def _arg(call: cst.Call, keyword: str, position: int | None):
    """(index, Arg) of an argument given by keyword or at a position, or (None, None)."""
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == keyword:
            return i, a
    if position is not None:
        positional = [(i, a) for i, a in enumerate(call.args) if a.keyword is None and not a.star]
        if len(positional) > position:
            return positional[position]
    return None, None


def _with_arg(call: cst.Call, index: int, value: cst.BaseExpression) -> cst.Call:
    args = list(call.args)
    args[index] = args[index].with_changes(value=value)
    return call.with_changes(args=args)


def _add_kw(call: cst.Call, keyword: str, value: str) -> cst.Call:
    args = list(call.args)
    if args:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    args.append(cst.Arg(value=_expr(value), keyword=cst.Name(keyword),
                        equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                              whitespace_after=cst.SimpleWhitespace(""))))
    return call.with_changes(args=args)


def _is_neg_inf(node) -> bool:
    code = _code(node).replace(" ", "")
    return code in {'float("-inf")', "float('-inf')", "-float('inf')", '-float("inf")', "-math.inf", "-torch.inf",
                    "-np.inf", "-inf"} or ".finfo(" in code and code.endswith(".min")


# An operator: (module, nodes with scopes) -> (replaced node, new node) pairs.
Site = tuple[cst.CSTNode, cst.CSTNode]
HandOperator = Callable[[cst.Module, list], Iterator[Site]]


# --------------------------------------------------------------------------------------------------
# Generic operators that mutmut does not have

def number_decrement(module, nodes):
    """Off by one downwards (mutmut only adds 1): 3 -> 2, -1 -> -2 (an axis), 0.5 -> -0.5."""
    for node, _ in nodes:
        if isinstance(node, (cst.Integer, cst.Float)):
            value = node.evaluated_value - 1
            yield node, _expr(repr(value)) if value >= 0 else _expr(f"({value!r})")


def slice_bounds(module, nodes):
    """A slice bound dropped, or moved by one: x[:, :-1] -> x[:, :], x[a:b] -> x[a:b + 1]."""
    for node, _ in nodes:
        if not isinstance(node, cst.Slice):
            continue
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is None:
                continue
            yield node, node.with_changes(**{part: None})
            if not isinstance(bound, (cst.Integer, cst.UnaryOperation)):     # literals: the number operators
                for op in ("+", "-"):
                    yield node, node.with_changes(**{part: _expr(f"({_code(bound)}) {op} 1")})


def axis_change(module, nodes):
    """An axis argument given by a name (``dim=dim``) or an expression, replaced by -1 and by 0."""
    for node, _ in nodes:
        if isinstance(node, cst.Arg) and node.keyword is not None and node.keyword.value in ("dim", "axis"):
            if isinstance(node.value, (cst.Integer, cst.UnaryOperation)):
                continue                                        # a literal: the number operators move it
            for value in ("-1", "0"):
                yield node, node.with_changes(value=_expr(value))


def statement_removal(module, nodes):
    """One simple statement removed (``pass`` where it was a block's only one): a forgotten step."""
    for node, _ in nodes:
        if not isinstance(node, cst.IndentedBlock):
            continue
        body = list(node.body)
        for i, stmt in enumerate(body):
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            code = _code(stmt).strip()
            if code.startswith(("super().__init__", "pass", '"""', "'''")) or code.startswith(("import ", "from ")):
                continue
            rest = body[:i] + body[i + 1:]
            if not rest:
                rest = [cst.SimpleStatementLine(body=[cst.Pass()], leading_lines=stmt.leading_lines)]
            yield node, node.with_changes(body=rest)


# --------------------------------------------------------------------------------------------------
# Attention-specific operators

_SOFTMAX = {"softmax", "log_softmax"}


def softmax_axis(module, nodes):
    """The softmax over another axis: dim=-1 -> dim=-2 (and any other dim -> -1)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) in _SOFTMAX:
            method = isinstance(node.func, cst.Attribute) and _dotted(node.func.value) not in ("torch", "F", "nn.functional",
                                                                                            "torch.nn.functional")
            i, a = _arg(node, "dim", 0 if method else 1)
            if a is None:
                continue
            value = "-2" if _code(a.value).replace(" ", "") == "-1" else "-1"
            yield node, _with_arg(node, i, _expr(value))


def _is_sqrt(node) -> bool:
    if isinstance(node, cst.Call) and _name(node.func) in ("sqrt",):
        return True
    return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power) and \
        _code(node.right).replace(" ", "") in ("0.5", "(0.5)", ".5")


def _d_model_names(module) -> list[str]:
    """Expressions that name the model width in this cell: ``self.d_model`` if assigned, ``d_model`` if a parameter."""
    code = module.code
    found = []
    if re.search(r"self\.d_model\s*=", code):
        found.append("self.d_model")
    if re.search(r"def \w+\([^)]*\bd_model\b", code):
        found.append("d_model")
    return found


def scale(module, nodes):
    """The 1/sqrt(d_k) scale dropped, or sqrt(d_model) taken instead of sqrt(d_k)."""
    widths = _d_model_names(module)
    for node, scopes in nodes:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide) and _is_sqrt(node.right):
            yield node, node.left                                              # dropped
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            for side, other in (("left", "right"), ("right", "left")):
                part = getattr(node, side)
                text = _code(part).replace(" ", "")
                if "scale" in text.lower() or text.endswith("**-0.5") or text.endswith("**(-0.5)"):
                    yield node, getattr(node, other)                           # dropped
        if _is_sqrt(node):
            inner = node.args[0].value if isinstance(node, cst.Call) and node.args else getattr(node, "left", None)
            if inner is None or "d_model" in _code(inner):
                continue
            params = {p.name.value for s in scopes if isinstance(s, cst.FunctionDef) for p in s.params.params}
            for width in widths:
                if width == "d_model" and "d_model" not in params:
                    continue
                if width == "self.d_model" and "self" not in params:
                    continue
                if isinstance(node, cst.Call):
                    yield node, _with_arg(node, 0, _expr(width))
                else:
                    yield node, node.with_changes(left=_expr(width))


def mask_sign(module, nodes):
    """The mask inverted: masked_fill(m, ...) -> masked_fill(~m, ...); where(m, a, b) -> where(m, b, a).
    (``~m`` -> ``m`` is mutmut's unary-operator removal.)"""
    for node, _ in nodes:
        if not isinstance(node, cst.Call):
            continue
        name = _name(node.func)
        if name in ("masked_fill", "masked_fill_"):
            i, a = _arg(node, "mask", 0)
            if a is not None and not isinstance(a.value, cst.UnaryOperation):
                yield node, _with_arg(node, i, _expr(f"~({_code(a.value)})"))
        if name == "where" and len([a for a in node.args if a.keyword is None]) == 3:
            a1, a2 = node.args[1], node.args[2]
            args = list(node.args)
            args[1], args[2] = a1.with_changes(value=a2.value), a2.with_changes(value=a1.value)
            yield node, node.with_changes(args=args)


def fill_value(module, nodes):
    """Masked scores filled with 0 or with a finite -1e4 instead of -inf (or the dtype's minimum)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) in ("masked_fill", "masked_fill_"):
            i, a = _arg(node, "value", 1)
            if a is not None and _is_neg_inf(a.value):
                for value in ("0.0", "-1e4"):
                    yield node, _with_arg(node, i, _expr(value))


def causal_diagonal(module, nodes):
    """tril()/triu() with the diagonal moved by one (a literal diagonal: the number operators)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) in ("tril", "triu"):
            method = isinstance(node.func, cst.Attribute) and _dotted(node.func.value) != "torch"
            i, a = _arg(node, "diagonal", 0 if method else 1)
            if a is None:
                for value in ("1", "-1"):
                    yield node, _add_kw(node, "diagonal", value)


def missing_transpose(module, nodes):
    """A transpose or permute left out: x.transpose(-2, -1) -> x, x.permute(...) -> x, x.T -> x."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                node.func.attr.value in ("transpose", "permute", "swapaxes", "swapdims", "t"):
            if _dotted(node.func.value) == "torch":
                if node.args:
                    yield node, node.args[0].value
            else:
                yield node, node.func.value
        if isinstance(node, cst.Attribute) and node.attr.value in ("T", "mT"):
            yield node, node.value


def permute_order(module, nodes):
    """Two neighbouring axes of a permute swapped (patch order, heads and time): permute(0, 2, 1, 3) -> (0, 1, 2, 3)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) == "permute":
            args = [a for a in node.args if a.keyword is None]
            if len(args) < 3 or len(args) != len(node.args):
                continue
            for j in range(1, len(args) - 1):
                swapped = list(node.args)
                swapped[j], swapped[j + 1] = (node.args[j].with_changes(value=node.args[j + 1].value),
                                              node.args[j + 1].with_changes(value=node.args[j].value))
                yield node, node.with_changes(args=swapped)


def variance(module, nodes):
    """Biased and unbiased variance exchanged where the call leaves it to the default (a literal
    ``unbiased=``/``correction=`` is flipped by the constant operators)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) in ("var", "std", "var_mean", "std_mean"):
            if _arg(node, "unbiased", None)[1] is None and _arg(node, "correction", None)[1] is None:
                yield node, _add_kw(node, "unbiased", "False")


def _is_dropout_call(node) -> bool:
    return isinstance(node, cst.Call) and "drop" in _name(node.func).lower() and bool(node.args)


def dropout(module, nodes):
    """Dropout dropped at a site, or moved from its site to the next (or previous) assignment of the
    same block."""
    for node, _ in nodes:
        if _is_dropout_call(node):
            yield node, node.args[0].value
        if not isinstance(node, cst.IndentedBlock):
            continue
        body = list(node.body)
        for i, stmt in enumerate(body):
            calls = [n for n, _ in _nodes(cst.Module(body=[stmt])) if _is_dropout_call(n)]
            if not calls or not isinstance(stmt, cst.SimpleStatementLine):
                continue
            site = calls[0]
            removed = stmt.deep_replace(site, site.args[0].value)
            for j in (i + 1, i - 1):
                if not 0 <= j < len(body) or not isinstance(body[j], cst.SimpleStatementLine):
                    continue
                target = body[j].body[0]
                if not isinstance(target, cst.Assign) or any(_is_dropout_call(n) for n, _ in _nodes(cst.Module(body=[body[j]]))):
                    continue
                wrapped = body[j].with_changes(body=[target.with_changes(
                    value=site.with_changes(args=[cst.Arg(value=target.value)] + list(site.args[1:])))])
                new = list(body)
                new[i], new[j] = removed, wrapped
                yield node, node.with_changes(body=new)


def shared_layers(module, nodes):
    """Layers shared instead of independent: ModuleList([L() for _ in range(n)]) -> ModuleList([L()] * n);
    ``self.b = nn.Linear(same args as self.a)`` -> ``self.b = self.a``."""
    for node, _ in nodes:
        if isinstance(node, cst.ListComp) and isinstance(node.for_in.iter, cst.Call) and _name(node.for_in.iter.func) == "range" \
                and node.for_in.iter.args:
            yield node, _expr(f"[{_code(node.elt)}] * ({_code(node.for_in.iter.args[-1].value)})")
        if isinstance(node, cst.IndentedBlock):
            seen = {}
            for i, stmt in enumerate(node.body):
                if not (isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)):
                    continue
                assign = stmt.body[0]
                target = _code(assign.targets[0].target)
                if not (target.startswith("self.") and isinstance(assign.value, cst.Call)):
                    continue
                made = _code(assign.value)
                if made in seen:
                    body = list(node.body)
                    body[i] = stmt.with_changes(body=[assign.with_changes(value=_expr(seen[made]))])
                    yield node, node.with_changes(body=body)
                else:
                    seen[made] = target


def running_max_start(module, nodes):
    """An online softmax's running maximum started at 0 instead of -inf: torch.full(shape, -inf) -> 0."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) in ("full", "full_like", "new_full"):
            i, a = _arg(node, "fill_value", 1 if _name(node.func) != "new_full" else 1)
            if a is not None and _is_neg_inf(a.value):
                yield node, _with_arg(node, i, _expr("0.0"))


def position_shift(module, nodes):
    """Positions off by one: arange(a, b) -> arange(a + 1, b + 1); arange(n) -> arange(1, n + 1)."""
    for node, _ in nodes:
        if isinstance(node, cst.Call) and _name(node.func) == "arange":
            positional = [a for a in node.args if a.keyword is None]
            if len(positional) == 1:
                n = _code(positional[0].value)
                args = [cst.Arg(value=_expr("1"), comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
                        positional[0].with_changes(value=_expr(f"({n}) + 1"))] + list(node.args[1:])
                yield node, node.with_changes(args=args)
            elif len(positional) >= 2:
                args = list(node.args)
                for k in (0, 1):
                    args[k] = args[k].with_changes(value=_expr(f"({_code(args[k].value)}) + 1"))
                yield node, node.with_changes(args=args)


def length_penalty(module, nodes):
    """The length penalty dropped (0) or applied in full (1): a name holding it replaced where it is used."""
    for node, scopes in nodes:
        if isinstance(node, cst.BinaryOperation):
            for side in ("left", "right"):
                part = getattr(node, side)
                if isinstance(part, (cst.Name, cst.Attribute)) and "penalty" in _code(part):
                    for value in ("0.0", "1.0"):
                        yield node, node.with_changes(**{side: _expr(value)})


HAND_OPERATORS: dict[str, HandOperator] = {
    "generic:number_decrement": number_decrement,
    "generic:slice_bounds": slice_bounds,
    "generic:axis_change": axis_change,
    "generic:statement_removal": statement_removal,
    "attention:softmax_axis": softmax_axis,
    "attention:scale": scale,
    "attention:mask_sign": mask_sign,
    "attention:fill_value": fill_value,
    "attention:causal_diagonal": causal_diagonal,
    "attention:missing_transpose": missing_transpose,
    "attention:permute_order": permute_order,
    "attention:variance": variance,
    "attention:dropout": dropout,
    "attention:shared_layers": shared_layers,
    "attention:running_max_start": running_max_start,
    "attention:position_shift": position_shift,
    "attention:length_penalty": length_penalty,
}


def library_operators() -> dict[str, tuple[type, Callable]]:
    """mutmut's node operators that this engine uses: name -> (libcst node type, function)."""
    from mutmut.mutation import mutators

    table = {}
    for node_type, fn in mutators.mutation_operators:
        if fn.__name__ in LIBRARY_OPERATORS:
            table[f"mutmut:{fn.__name__}"] = (node_type, fn)
    missing = {f"mutmut:{n}" for n in LIBRARY_OPERATORS} - set(table)
    if missing:
        raise ImportError(f"mutmut no longer provides {sorted(missing)}: pin the version in constraints.txt")
    return table


def _sites(module: cst.Module, only: set[str] | None = None) -> Iterator[tuple[str, Site]]:
    """The attention-specific operators first: a mutant that a generic operator also makes (``dim=-1`` ->
    ``dim=-2`` in a softmax) is counted under the specific one."""
    nodes = _nodes(module)
    for name, op in HAND_OPERATORS.items():
        if name.startswith("attention:") and (only is None or name in only):
            for site in op(module, nodes):
                yield name, site
    for name, (node_type, fn) in library_operators().items():
        if only is not None and name not in only:
            continue
        for node, _ in nodes:
            if isinstance(node, node_type):
                for new in fn(node):
                    if fn.__name__ == "operator_arg_removal" and len(new.args) == len(node.args):
                        continue                # an argument replaced by None: left out (LIBRARY_OPERATORS)
                    yield name, (node, new)
    for name, op in HAND_OPERATORS.items():
        if name.startswith("generic:") and (only is None or name in only):
            for site in op(module, nodes):
                yield name, site


# --------------------------------------------------------------------------------------------------
# Generation

def _outside(reference: str, mutated: str, region: set[int]) -> bool:
    """Does the change touch a line outside the solution region?"""
    a, b = reference.splitlines(), mutated.splitlines()
    for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            if not ({i1, i1 + 1} & region):
                return True
        elif not all(line in region for line in range(i1 + 1, i2 + 1)):
            return True
    return False


def _key(lesson: str, cell: str, normalised: str) -> str:
    return hashlib.sha1(f"{lesson}\0{cell}\0{normalised}".encode()).hexdigest()[:10]


def mutate_cell(lesson: str, cell: str, raw_source: str, only: set[str] | None = None) -> Generated:
    """Every mutant of one solution cell (``raw_source`` with its solution markers)."""
    reference, region = split_solution(raw_source)
    found = Generated(lesson, cell)
    module = cst.parse_module(reference)
    reference_norm = normalise(reference)
    seen = {reference_norm}
    sites = _sites(module, only)
    while True:
        try:
            name, (old, new) = next(sites)
        except StopIteration:
            break
        except Exception:  # noqa: BLE001 - an operator that cannot build its node here: no mutant, counted
            found.dropped["not expressible"] += 1
            continue
        try:
            code = module.deep_replace(old, new).code
        except Exception:  # noqa: BLE001 - a node libcst cannot put there: no mutant, counted
            found.dropped["not expressible"] += 1
            continue
        if _outside(reference, code, region):
            found.dropped["outside the solution region"] += 1
            continue
        try:
            compile(code, cell, "exec")
            norm = normalise(code)
        except SyntaxError:
            found.dropped["does not compile"] += 1
            continue
        if norm == reference_norm:
            found.dropped["identical to the reference"] += 1
            continue
        if norm in seen:
            found.dropped["duplicate of another mutant"] += 1
            continue
        seen.add(norm)
        diff = "".join(difflib.unified_diff(reference.splitlines(True), code.splitlines(True),
                                            f"reference/{cell}", f"mutant/{cell}", n=1))
        found.mutants.append(Mutant(lesson, cell, name, code, diff, _key(lesson, cell, norm)))
    return found


def mutate_lesson(root: Path, lesson: str, only: set[str] | None = None) -> dict[str, Generated]:
    """grade_id -> its mutants, for every solution cell of the lesson."""
    return {cell: mutate_cell(lesson, cell, raw, only) for cell, raw in solution_cells(root, lesson).items()}


def sample(mutants: list[Mutant], n: int | None, salt: str = "") -> list[Mutant]:
    """A fixed sample of at most ``n`` mutants, chosen by a stable hash (the same on every machine)."""
    if n is None or len(mutants) <= n:
        return list(mutants)
    ranked = sorted(mutants, key=lambda mu: hashlib.sha1(f"{salt}{mu.key}".encode()).hexdigest())
    return sorted(ranked[:n], key=lambda mu: mutants.index(mu))

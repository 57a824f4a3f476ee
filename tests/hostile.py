"""A hostile submission with script in every field a notebook has (the trust issue's formgrader attacks).

Every payload, if it ever ran in a browser, would ask for a URL holding :data:`MARK` (a fetch, an image,
a navigation) and set ``window.__course_pwned``: a test that opens the pages watches for both. The fields:
the notebook's metadata (kernelspec, language_info, widget state, a custom key), each cell's metadata (an
nbgrader ``grade_id`` and ``points`` of markup, forged on an extra code cell and on a Markdown cell, tags,
a custom key), a Markdown cell's attachments (an SVG with a script), outputs of every MIME type (HTML,
SVG, JavaScript, Markdown, LaTeX, JSON, a widget view, a stream and an error holding markup), Markdown and
raw cells of markup, and a cell id of markup.
"""

from __future__ import annotations

import base64

import nbformat

MARK = "course-pwned"


def payload(where: str) -> str:
    """Markup that, rendered anywhere, runs script reporting ``where``."""
    js = f"window.__course_pwned=(window.__course_pwned||[]).concat(['{where}']);fetch('/{MARK}?{where}')"
    return (f'<img src="/{MARK}-img?{where}" onerror="{js}">'
            f"<script>{js}</script><svg onload=\"{js}\"></svg><iframe src=\"javascript:{js}\"></iframe>")


def hostile(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` (a submission) with payloads added in every field; its own cells keep their sources."""
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(nb), as_version=4))
    nb.metadata["kernelspec"]["display_name"] = payload("kernelspec")
    nb.metadata.setdefault("language_info", {})["name"] = "python"
    nb.metadata["language_info"]["pygments_lexer"] = "ipython3"
    nb.metadata["custom"] = payload("notebook-metadata")
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {
        "version_major": 2, "version_minor": 0,
        "state": {"m1": {"model_name": "HTMLModel", "model_module": "@jupyter-widgets/controls",
                         "model_module_version": "2.0.0", "state": {"value": payload("widget-state")}}}}}
    for cell in nb.cells:
        cell.metadata["custom"] = payload("cell-metadata")
        cell.metadata.setdefault("tags", []).append(payload("tag"))
    svg = base64.b64encode(f'<svg xmlns="http://www.w3.org/2000/svg"><script>{payload("attachment")}</script></svg>'
                           .encode()).decode()
    md = nbformat.v4.new_markdown_cell(f"notes {payload('markdown')} ![x](attachment:x.svg)",
                                       attachments={"x.svg": {"image/svg+xml": svg}})
    md.metadata["nbgrader"] = {"grade": True, "grade_id": payload("markdown-grade-id"), "points": 5,
                               "solution": False, "locked": False, "schema_version": 3}
    code = nbformat.v4.new_code_cell("x = 1  # an extra cell, claiming to be graded")
    code.metadata["nbgrader"] = {"grade": True, "grade_id": payload("grade-id"), "points": 50, "solution": False,
                                 "locked": False, "schema_version": 3}
    code.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": payload("html-output"), "image/svg+xml": f"<svg><script>{payload('svg-output')}</script></svg>",
            "application/javascript": f"fetch('/{MARK}?javascript-output')", "text/markdown": payload("md-output"),
            "text/latex": payload("latex-output"), "application/json": {"x": payload("json-output")},
            "application/vnd.jupyter.widget-view+json": {"model_id": "m1", "version_major": 2, "version_minor": 0},
            "text/plain": payload("plain-output")}),
        nbformat.v4.new_output("stream", name="stdout", text=payload("stream")),
        nbformat.v4.new_output("error", ename=payload("ename"), evalue=payload("evalue"), traceback=[payload("tb")]),
    ]
    raw = nbformat.v4.new_raw_cell(payload("raw"))
    raw.metadata["format"] = "text/html"
    printing = nbformat.v4.new_code_cell(f"print({payload('printed')!r})\nraise ValueError({payload('error')!r})")
    nb.cells[1:1] = [md, code, raw, printing]
    nb.cells[2]["id"] = "x" * 10
    return nb

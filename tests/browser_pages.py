"""Which lessons' pages `make test` drives in Chromium (tests/test_browser.py), and why those.

A page costs 30-50 CPU-seconds (JupyterLab laying out and running the notebook), so all 13 would be a
quarter of the suite's budget. Every lesson's widget is moved, control by control, in the notebooks
`make run` executes (``COURSE_WIDGET_PROBE``, checked in tests/test_newcomer.py); the browser adds
what only a page shows: each kind of control's view in JupyterLab, and redraws sent from it. These
four lessons have every kind of control the lessons use between them, which test_newcomer.py checks
against what the probe met. ``make test-browser`` drives all 13.
"""

# 00: a float slider; 01: an int slider and a text box; 03: a selection slider; 04: dropdowns, and the
# redraws that once raced on two kernel threads (as 02's did).
EVERY_CONTROL = ["00_softmax_lookup", "01_attention_pooling", "03_attention_scores", "04_multi_hop_attention"]

# The browser test moves sliders, dropdowns and text boxes; the probe alone moves a checkbox.
NOT_MOVED_IN_BROWSER = {"Checkbox"}


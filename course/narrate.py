"""Reading an experiment's result in words computed from this run's numbers, next to the learner's prediction.

A lesson asks for a prediction before an experiment (a code cell such as ``my_guess = None  # ...``) and reads
the result after it::

    narrate.say(f"With positions, {exact:.0%} of the test sequences came out exactly reversed. "
                + narrate.versus(my_guess, exact, "the exact match with positions", fmt="{:.0%}"))

so the text always speaks of the numbers the learner's own run produced (another seed, profile or machine gives
other numbers), and says how far the prediction was.
"""

from __future__ import annotations

import sys

__all__ = ["say", "versus", "pick"]


def say(markdown: str) -> None:
    """Show ``markdown`` as formatted text in a notebook (plain text elsewhere)."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(markdown))
            return
    except ImportError:  # pragma: no cover - IPython is always there in a notebook
        pass
    print(markdown, file=sys.stdout)


def versus(prediction, actual, what: str, *, fmt: str = "{:.3g}", tolerance: float | None = None) -> str:
    """A sentence comparing the learner's ``prediction`` for ``what`` with this run's ``actual`` value.

    ``prediction`` may be a number (compared, within ``tolerance`` when given: absolute, else 10 % of the
    value), a string (shown as written, for the learner to compare), or ``None`` (no prediction written)."""
    shown = fmt.format(actual) if isinstance(actual, (int, float)) else str(actual)
    if prediction is None or (isinstance(prediction, str) and not prediction.strip()):
        return f"(No prediction written for {what}: a guess written before the run, even a wrong one, teaches more.)"
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)):
        return f"You predicted **{prediction}** for {what}; this run gave **{shown}**. Were you close?"
    close = tolerance if tolerance is not None else 0.1 * abs(actual) if isinstance(actual, (int, float)) else 0
    guessed = fmt.format(prediction)
    if isinstance(actual, (int, float)) and abs(prediction - actual) <= close:
        return f"You predicted **{guessed}** for {what}, and this run gave **{shown}**: close."
    direction = "" if not isinstance(actual, (int, float)) else (" (lower than your guess)" if actual < prediction
                                                                 else " (higher than your guess)")
    return (f"You predicted **{guessed}** for {what}; this run gave **{shown}**{direction}. The text below says "
            "why.")


def pick(value: float, cases: list[tuple[float, str]], otherwise: str) -> str:
    """The text of the first ``(threshold, text)`` whose threshold ``value`` reaches (thresholds from high to low),
    else ``otherwise``: an interpretation that changes with this run's number."""
    for threshold, text in cases:
        if value >= threshold:
            return text
    return otherwise

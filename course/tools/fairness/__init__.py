"""The course's fairness certificate: do the graded exercises' tests tell right from wrong?

Instructor-only (``course dist`` leaves ``course/tools/`` out). Four parts:

* :mod:`.mutants`: mutants derived from each reference solution cell, by mutmut's generic operators
  (on libcst) and the course's own attention-specific ones;
* :mod:`.equivalence`: a mutant that keeps full marks is run beside the reference, outside the grader,
  on the calls the lesson's tests make and on random and edge-case inputs of the same shapes: equal
  everywhere is an equivalent mutant (listed with that evidence), different somewhere is a survivor;
* :mod:`.messages`: the checks every killed mutant's failure messages must pass;
* :mod:`.certify`: grades it all with ``course grade`` and writes ``docs/fairness.md`` (``make certify``).
"""

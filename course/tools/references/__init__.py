"""Reference implementations used as oracles by hidden tests; instructor side, never shipped to students.

Each ``refs_NN`` module holds what lesson NN's hidden tests compare the learner's answer with, where that
comparison needs code that computes (all or part of) a graded answer. Hidden tests import them inside the
hidden block (``from course.tools.references import refs_05``), which is stripped from student notebooks;
``course dist`` leaves this folder out. Helpers that are not answers stay in ``course/checks_NN.py``.
"""

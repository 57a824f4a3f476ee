"""The learner's layer of every lesson, built from sources kept here: the diagrams (``diagrams/``, drawn with
``draw.py``), the learner's path (``path.py``: each lesson's objectives, prerequisites, core or optional, and
study time), and the "over seeds" boxes read from measured runs. ``course learner-layer`` writes them into the
solution notebooks (``--check`` says what differs); ``course release`` then carries them into the student
notebooks. See CONTRIBUTING.md, "The learner's layer"."""

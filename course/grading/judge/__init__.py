"""The trusted side of grading: decides every test cell's verdict outside the student's reach.

For one submission the judge starts a worker in the sandbox (:mod:`course.grading.sandboxed.worker`) and walks
the student's notebook. Ordinary cells and solution cells run in the worker; cells the lesson tags
``experiment`` are skipped. At each test cell the judge runs the **instructor's** test code (from
the lesson's source notebook, hidden tests included) in its own interpreter, where the learner's
names are :class:`Remote` stand-ins: a call or attribute read becomes a request to the worker and
what comes back is data (tensors by value, numbers, strings...) or another stand-in. Checks, oracles,
torch and the test code itself all live here, where the student's code never runs, so patching them
in the notebook changes nothing. A test passes when its code finishes without an exception.

A cell that runs past its time limit, or a worker that dies, is stopped; the worker is restarted and
the cells before are replayed, so the rest of the notebook is still graded.

The package, one module per concept: ``errors`` (how a run fails), ``remote`` (stand-ins for the
learner's objects), ``session`` (the worker in its warm sandbox), ``lesson`` (the instructor's notebooks,
read once per judge), ``scrutiny`` (what is reported for a human to read), ``run`` (one submission, test
cell by test cell), ``watchdog`` (a deadline on the judge's own work), ``__main__`` (the judge process and
the judges' fork server). It imports nothing heavy here: ``python -m course.grading.judge`` launches its
warm sandbox before importing torch.
"""

"""The only grading code that runs inside the sandbox, beside the learner's code: the worker (runs cells and
calls, answers with data), the sandbox's PID 1 (``zygote``), the comparisons of a call's inputs (``ops``)
and the wire. Nothing here is trusted by the judge, and nothing here imports the rest of
``course.grading``: the sandbox binds this folder and the learner's library, and nothing else."""

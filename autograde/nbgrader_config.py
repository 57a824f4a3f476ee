"""nbgrader settings shared by `course release`, `course check` and `course grade`.

The `course` command writes a small nbgrader_config.py into each workspace that loads this file and
then sets the workspace's own root, gradebook and timeout. Grading state (submitted/, autograded/,
feedback/, gradebook.db) lives in that workspace, never in the repository.
"""

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

# Student versions: the solution region becomes a stub that fails loudly and says, in words, what to do
# (Run All on an untouched notebook stops at the first exercise with this sentence).
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\n'
              'raise NotImplementedError("Write your solution here, replacing this line; then run the test cells below.")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
c.ClearSolutions.enforce_metadata = True

# Hidden tests are removed from student versions (### BEGIN HIDDEN TESTS ... ### END HIDDEN TESTS).
c.ClearHiddenTests.enforce_metadata = True

# Execution while grading: every cell has a time limit; an error in one cell does not stop the rest.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.allow_errors = True
c.Execute.kernel_name = "python3"
# After a cell finishes, wait this long for its last output: nbclient's 4 s default fails cells
# spuriously on a loaded machine (several kernels grading at once).
c.Execute.iopub_timeout = 30

# Never copy bulky or private folders into releases or submissions.
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", "feedback", ".DS_Store"]
c.CourseDirectory.include = ["*"]
c.Exchange.assignment_dir = "."

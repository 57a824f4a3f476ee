# The course on The Littlest JupyterHub: learner labs for learners, the instructor lab for instructors.
# install.sh copies this file to /opt/tljh/config/jupyterhub_config.d/course.py; TLJH loads it after
# its own settings (config.yaml), at every hub start. It runs in TLJH's hub environment, which does
# not have the course installed: it imports course.commands.hub (standard library only) from the handout.
import sys

HANDOUT = "/srv/course"                      # the `course dist` handout, unpacked by install.sh
sys.path.insert(0, HANDOUT)

from course.commands import hub  # noqa: E402

hub.configure(
    c,  # noqa: F821  (JupyterHub's configuration object)
    exchange="/srv/nbgrader/exchange",       # nbgrader's exchange, mode 1777 (made here if missing)
    config_dir="/srv/course-lab-config",      # the learner/ and instructor/ Jupyter settings, written here
    course_id="attention-course",
    instructors={"instructor"},               # hub login names (their Unix accounts are jupyter-<name>)
    grades="/home/jupyter-instructor/grades",  # the instructor's gradebook: `course workshop` fills it
    python="/opt/course/learner/bin/python",  # the learners' environment: the handout, from install.sh
    instructor_python="/home/jupyter-instructor/course/.venv/bin/python",  # the instructor's checkout
)

#!/usr/bin/env bash
# The course on The Littlest JupyterHub, after TLJH's own installer (deploy/tljh/README.md, step 1).
# Run as root on the hub machine:   sudo deploy/tljh/install.sh HANDOUT
# HANDOUT is the folder `course dist HANDOUT` wrote on the instructor's machine, copied here
# (never the repository: it holds the solutions).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
handout=$(cd "${1:?usage: sudo deploy/tljh/install.sh HANDOUT (a folder written by course dist)}" && pwd)
python=${PYTHON:-python3}                      # 3.11 or newer, as the handout's README says
[ -d "$handout/notebooks" ] && [ -f "$handout/pyproject.toml" ] || { echo "$handout: not a course dist handout" >&2; exit 2; }
[ ! -d "$handout/solutions" ] || { echo "$handout holds solutions/: give the course dist handout, not the repository" >&2; exit 2; }

# 1. The handout, readable by every learner (their servers import the course package from it).
install -d -m 0755 /srv/course
cp -a "$handout"/. /srv/course/
chmod -R a+rX /srv/course

# 2. The learners' environment: the handout installed in a venv of its own, with JupyterHub's
#    single-user server at the hub's own version (TLJH's user environment is left as it is).
hub_version=$(/opt/tljh/hub/bin/python3 -c 'import jupyterhub; print(jupyterhub.__version__)')
"$python" -m venv /opt/course/learner
/opt/course/learner/bin/pip install --quiet -c /srv/course/constraints.txt -e /srv/course
/opt/course/learner/bin/pip install --quiet "jupyterhub==$hub_version"
/opt/course/learner/bin/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (course)"
chmod -R a+rX /opt/course

# 3. nbgrader's exchange (anyone may add, nobody may remove others' files) and the course's hub settings.
install -d -m 1777 /srv/nbgrader/exchange
install -m 0644 "$here/course.py" /opt/tljh/config/jupyterhub_config.d/course.py

# 4. TLJH's settings, each set explicitly (the installer's --admin instructor made the instructor an admin) (keys of TLJH's config.yaml; tests/test_deploy.py checks them).
tljh-config set user_environment.default_app jupyterlab
tljh-config set services.cull.enabled true
tljh-config set services.cull.timeout 3600     # TLJH's default is 600 s: a learner reading for 10 min lost the kernel
tljh-config set services.cull.every 300
tljh-config set services.cull.users false
tljh-config set limits.memory 4G               # a cap per learner (systemd MemoryMax), not a reservation
tljh-config set limits.cpu 2
tljh-config reload hub
echo "course: hub configured; the instructor's copy comes next (deploy/tljh/README.md, step 3)"

"""deploy/: the hub files parse and name what exists (fast, no hub, no cluster, nothing downloaded).

* deploy/tljh: install.sh is valid bash and sets only keys TLJH's config.yaml has (the idle-culling
  timeout among them, not left at TLJH's 600 s); course.py calls course.commands.hub.configure with
  arguments it takes, on paths install.sh makes; the settings it produces give learners the learner
  lab and instructors the instructor lab, each from its own interpreter.
* deploy/z2jh: values.yaml has only keys of the jupyterhub chart's schema, its profiles override only
  KubeSpawner settings, hub.config names real JupyterHub settings; its hub.extraConfig, run with a
  stand-in spawner, gives two learners two distinct uids and the learner lab, the instructor the
  instructor lab, without touching the shared default environment; the Dockerfile builds from a
  handout and writes the folders the hub selects.
* every `course ...` command line in deploy/*/README.md is accepted by the course's own parser.
"""

from __future__ import annotations

import ast
import inspect
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from course.commands import hub

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"

# TLJH's config.yaml keys: tljh/configurer.py's `default` (jupyterhub/the-littlest-jupyterhub, commit
# 3eeb028f1f9d); `auth.<Class>.<trait>` and `users.*` lists are free-form there.
TLJH_KEYS = {
    "base_url", "auth.type", "users.allowed", "users.banned", "users.admin", "users.extra_user_groups",
    "limits.memory", "limits.cpu", "http.address", "http.port", "https.enabled", "https.address", "https.port",
    "https.tls.cert", "https.tls.key", "https.letsencrypt.email", "https.letsencrypt.domains",
    "https.letsencrypt.staging", "traefik_api.ip", "traefik_api.port", "traefik_api.username",
    "traefik_api.password", "user_environment.default_app", "services.cull.enabled", "services.cull.timeout",
    "services.cull.every", "services.cull.concurrency", "services.cull.users", "services.cull.max_age",
    "services.cull.remove_named_servers",
}
TLJH_CULL_DEFAULT = 600
TLJH_PATHS = ("/opt/tljh/config/jupyterhub_config.d/", "/opt/tljh/hub/bin/python3")   # tljh/config.py

# The jupyterhub chart's values (jupyterhub/values.schema.yaml of zero-to-jupyterhub-k8s, commit
# 48ea50e3; the schema allows no other key): the parts this course sets. Leaves: None; a dict value
# below `hub.config` or a list item is checked elsewhere.
Z2JH_KEYS = {
    "hub": {"config": "traitlets", "extraConfig": "code", "image": None, "db": None, "extraEnv": None},
    "singleuser": {
        "image": {"name": None, "tag": None, "pullPolicy": None, "pullSecrets": None},
        "uid": None, "fsGid": None, "cmd": None, "defaultUrl": None, "extraEnv": None,
        "cpu": {"guarantee": None, "limit": None}, "memory": {"guarantee": None, "limit": None},
        "extraResource": {"guarantees": None, "limits": None},
        "storage": {"capacity": None, "extraVolumes": None, "extraVolumeMounts": None, "homeMountPath": None,
                    "type": None, "dynamic": None, "static": None, "extraLabels": None},
        "initContainers": None, "profileList": "profiles", "nodeSelector": None, "extraTolerations": None,
        "startTimeout": None, "allowPrivilegeEscalation": None,
    },
    "cull": {"enabled": None, "timeout": None, "every": None, "users": None, "concurrency": None,
             "maxAge": None, "removeNamedServers": None, "adminUsers": None},
}
# KubeSpawner's own settings (kubespawner/spawner.py of jupyterhub/kubespawner, commit 4161d54), beside
# the ones every JupyterHub Spawner has (checked against the installed jupyterhub).
KUBESPAWNER_TRAITS = {"image", "image_pull_policy", "extra_resource_limits", "extra_resource_guarantees",
                      "node_selector", "tolerations", "uid", "gid", "fs_gid", "volumes", "volume_mounts",
                      "init_containers", "extra_labels", "extra_annotations", "storage_capacity"}
PROFILE_KEYS = {"display_name", "description", "default", "kubespawner_override", "slug"}


def _paths(tree: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in tree.items():
        if isinstance(v, dict) and v:
            out += _paths(v, f"{prefix}{k}.")
        else:
            out.append(f"{prefix}{k}")
    return out


def _course_call(path: Path, name: str) -> dict:
    """The keyword arguments (literals) of the one call `hub.<name>(...)` in a Python file."""
    calls = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == name]
    assert len(calls) == 1, f"{path}: {len(calls)} calls of hub.{name}"
    return {k.arg: ast.literal_eval(k.value) for k in calls[0].keywords}


def _spawner(name: str, uid: int):
    return SimpleNamespace(user=SimpleNamespace(name=name, id=uid), environment={"SHARED": "1"},
                           cmd=["jupyterhub-singleuser"])


# --- The Littlest JupyterHub --------------------------------------------------------------------------

def test_tljh_install_script_sets_real_keys_and_culling():
    script = (DEPLOY / "tljh" / "install.sh").read_text(encoding="utf-8")
    if shutil.which("bash"):
        r = subprocess.run(["bash", "-n", str(DEPLOY / "tljh" / "install.sh")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    sets = dict(re.findall(r"^tljh-config set (\S+) (\S+)", script, re.M))
    assert sets, "install.sh sets no TLJH option"
    unknown = set(sets) - TLJH_KEYS
    assert not unknown, f"install.sh sets options TLJH does not have: {unknown}"
    assert "services.cull.timeout" in sets and int(sets["services.cull.timeout"]) != TLJH_CULL_DEFAULT
    assert sets.get("services.cull.enabled") == "true"
    assert "tljh-config reload hub" in script
    for path in TLJH_PATHS:
        assert path in script, f"install.sh does not use TLJH's {path}"
    # the learners' environment is the handout, and the script refuses the repository
    assert "solutions" in script and "constraints.txt -e /srv/course" in script


def test_tljh_hub_settings_give_each_user_their_lab(tmp_path):
    kwargs = _course_call(DEPLOY / "tljh" / "course.py", "configure")
    inspect.signature(hub.configure).bind(None, **kwargs)       # every argument is one configure takes
    script = (DEPLOY / "tljh" / "install.sh").read_text(encoding="utf-8")
    assert kwargs["python"] == "/opt/course/learner/bin/python" and "-m venv /opt/course/learner" in script
    assert f"-m 1777 {kwargs['exchange']}" in script
    assert re.search(r"course\.py\"? /opt/tljh/config/jupyterhub_config\.d/course\.py", script)
    assert kwargs["grades"].startswith("/home/jupyter-instructor/")   # TLJH's Unix name for hub user "instructor"
    assert kwargs["instructors"] == {"instructor"}
    readme = (DEPLOY / "tljh" / "README.md").read_text(encoding="utf-8")
    assert kwargs["instructor_python"] == "/home/jupyter-instructor/course/.venv/bin/python"
    assert "git clone REPOSITORY course" in readme and "python3 -m venv .venv" in readme

    # the same call, on folders of this test: what each user's server gets
    from traitlets.config import Config

    c = Config()
    here = dict(kwargs, exchange=str(tmp_path / "exchange"), config_dir=str(tmp_path / "lab-config"),
                grades=str(tmp_path / "grades"))
    folders = hub.configure(c, **here)
    assert c.Spawner.cmd == [kwargs["python"], "-m", "jupyterhub.singleuser"]
    learner, instructor = _spawner("ann", 7), _spawner("instructor", 1)
    c.Spawner.pre_spawn_hook(learner)
    c.Spawner.pre_spawn_hook(instructor)
    assert learner.environment["JUPYTER_CONFIG_PATH"] == str(folders["learner"])
    assert learner.cmd == ["jupyterhub-singleuser"]              # untouched: the hub's Spawner.cmd applies
    assert "COURSE_GRADES" not in learner.environment
    assert instructor.environment["JUPYTER_CONFIG_PATH"] == str(folders["instructor"])
    assert instructor.cmd == [kwargs["instructor_python"], "-m", "jupyterhub.singleuser"]
    assert instructor.environment["PATH"].startswith("/home/jupyter-instructor/course/.venv/bin")
    assert instructor.environment["COURSE_GRADES"] == here["grades"]
    assert "formgrader" in (folders["learner"] / "labconfig" / "page_config.json").read_text()
    assert "formgrader" not in (folders["instructor"] / "labconfig" / "page_config.json").read_text()


def test_tljh_hub_environment_can_import_the_hub_module_alone():
    """TLJH's hub environment lacks the course's dependencies: course.commands.hub must need none."""
    import sys

    code = ("import sys; from course.commands import hub; "
            "print(sorted(m for m in ('torch', 'numpy', 'nbgrader', 'jupyterhub', 'traitlets', 'nbformat') "
            "if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", f"course.commands.hub imports {r.stdout.strip()}"


# --- Zero to JupyterHub -------------------------------------------------------------------------------

def _values() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((DEPLOY / "z2jh" / "values.yaml").read_text(encoding="utf-8"))


def test_z2jh_values_name_real_chart_and_spawner_settings():
    pytest.importorskip("jupyterhub", reason="needs jupyterhub (pip install -e '.[test]')")
    from jupyterhub.app import JupyterHub
    from jupyterhub.auth import Authenticator
    from jupyterhub.spawner import Spawner

    values = _values()
    allowed = set(_paths(Z2JH_KEYS))
    unknown = []
    for path in _paths(values):
        if path in allowed or any(path.startswith(f"{p}.") for p in allowed):
            continue
        unknown.append(path)
    assert not unknown, f"values.yaml keys the chart does not have: {unknown}"
    classes = {"JupyterHub": JupyterHub, "Authenticator": Authenticator, "Spawner": Spawner}
    for cls, traits in values["hub"]["config"].items():
        assert cls in classes, f"hub.config.{cls}: not a class this test knows"
        missing = set(traits) - set(classes[cls].class_traits(config=True))
        assert not missing, f"hub.config.{cls} has no {missing}"
    spawner_traits = set(Spawner.class_traits(config=True)) | KUBESPAWNER_TRAITS
    profiles = values["singleuser"]["profileList"]
    assert [p.get("default", False) for p in profiles].count(True) == 1
    for p in profiles:
        assert set(p) <= PROFILE_KEYS, set(p) - PROFILE_KEYS
        assert set(p.get("kubespawner_override", {})) <= spawner_traits, set(p["kubespawner_override"]) - spawner_traits
    gpu = [p for p in profiles if "nvidia.com/gpu" in p.get("kubespawner_override", {}).get("extra_resource_limits", {})]
    assert len(gpu) == 1 and "GPU" in gpu[0]["display_name"] and gpu[0]["kubespawner_override"]["image"].endswith(":gpu")
    assert values["cull"]["enabled"] is True and values["cull"]["timeout"] >= 1800
    assert values["singleuser"]["uid"] == 0      # only so that docker-stacks' start script can switch to NB_UID
    mounts = {m["mountPath"] for m in values["singleuser"]["storage"]["extraVolumeMounts"]}
    assert "/srv/nbgrader/exchange" in mounts


def test_z2jh_hub_config_gives_distinct_uids_and_labs():
    from traitlets.config import Config

    values = _values()
    c = Config()
    for name, code in values["hub"]["extraConfig"].items():
        exec(compile(code, f"hub.extraConfig.{name}", "exec"), {"c": c})
    hook = c.KubeSpawner.pre_spawn_hook
    ann, ben, teacher = _spawner("ann", 2), _spawner("ben", 3), _spawner("instructor", 1)
    shared = ann.environment
    for s in (ann, ben, teacher):
        hook(s)
    assert shared == {"SHARED": "1"}, "the hook changed the shared default environment"
    uids = {s.environment["NB_UID"] for s in (ann, ben, teacher)}
    assert len(uids) == 3 and all(int(u) >= 100000 for u in uids)
    dockerfile = (DEPLOY / "z2jh" / "Dockerfile").read_text(encoding="utf-8")
    write = re.search(r"hub\.write_configs\(([^)]*)\)", dockerfile).group(1)
    kw = dict(re.findall(r"(\w+)='([^']*)'", write))
    base = write.split(",")[0].strip().strip("'")
    for s, kind in ((ann, "learner"), (ben, "learner"), (teacher, "instructor")):
        assert s.environment["JUPYTER_CONFIG_PATH"] == f"{base}/{kind}"
        assert s.environment["COURSE_EXCHANGE"] == kw["exchange"]
    assert teacher.environment["COURSE_GRADES"] == kw["grades"]
    assert f"ENV JUPYTER_CONFIG_PATH={base}/learner" in dockerfile


def test_z2jh_image_is_built_from_the_handout(tmp_path):
    dockerfile = (DEPLOY / "z2jh" / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^COPY \. /opt/course$", dockerfile, re.M)
    assert "test ! -e /opt/course/solutions" in dockerfile and "-e /opt/course" in dockerfile
    # the call it runs to write the labs' settings works, here on folders of this test
    write = re.search(r"hub\.write_configs\(([^)]*)\)", dockerfile).group(1)
    args = ast.parse(f"f({write})").body[0].value
    kw = {k.arg: ast.literal_eval(k.value) for k in args.keywords}
    folders = hub.write_configs(tmp_path / "lab-config", exchange=tmp_path / "exchange",
                                grades=tmp_path / Path(kw["grades"]).name)
    assert set(folders) == {"learner", "instructor"}
    assert set(kw) <= set(inspect.signature(hub.write_configs).parameters)


# --- the course commands the READMEs give --------------------------------------------------------------

def _course_lines(text: str) -> list[list[str]]:
    """The arguments of every command line in the Markdown code blocks that runs the course command
    (`course ...`, `.venv/bin/course ...`, `sudo .../course ...`, `python -m course.commands.cli ...`)."""
    lines = []
    for block in re.findall(r"```\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            try:
                tokens = shlex.split(line, comments=True)
            except ValueError:            # a shell line of another kind (a quoted script across lines)
                continue
            if tokens[:1] == ["sudo"]:
                tokens = tokens[1:]
            if tokens and (tokens[0] == "course" or tokens[0].endswith("/course")):
                lines.append(tokens[1:])
            elif tokens[:3] == ["python", "-m", "course.commands.cli"]:
                lines.append(tokens[3:])
    return lines


def test_deploy_readmes_give_commands_the_course_accepts():
    from course.commands.cli import build_parser

    parser = build_parser()
    seen = []
    for readme in sorted(DEPLOY.glob("*/README.md")):
        for argv in _course_lines(readme.read_text(encoding="utf-8")):
            try:
                parser.parse_args(argv)
            except SystemExit as e:
                pytest.fail(f"{readme.relative_to(ROOT)}: `course {' '.join(argv)}` is refused ({e})")
            seen.append(argv[0])
    assert {"dist", "workshop"} <= set(seen), seen

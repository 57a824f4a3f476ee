"""``course grade --executor dask``: one grading command over a Dask cluster.

Without ``--scheduler`` an embedded ``distributed.LocalCluster`` (on loopback) runs one single-threaded
worker process per job; with ``--scheduler tcp://host:8786`` an existing cluster does (``dask-ssh``,
dask-jobqueue on Slurm, the Dask Kubernetes operator): its workers need this course installed, at
the same version, and bubblewrap, as a grading machine does.

Each worker keeps one warm judge for its lifetime (:class:`JudgePlugin`, a Dask ``WorkerPlugin``):
its setup starts the judge exactly as ``course grade`` does locally (:class:`course.grading.pool.Judges`),
the judge keeps its warm sandbox between submissions, and the plugin's teardown stops it. On a
standing cluster (``--scheduler``) the plugin is registered once and stays for later batches, so
their judges and sandboxes are already warm. A task is the submission spec that local judge takes, with the
files it names carried along (the cleaned notebook, the instructor's source notebook with its
hidden tests, the released notebook, the lesson's data files): they go from the grader's machine to
the grader's workers, the trusted side; the sandbox receives nothing it would not receive locally.

The judge's answer comes back to the client, and :func:`course.grading.batch.grade` writes results,
feedback and gradebook from it exactly as for a local judge (:class:`DaskJudges` has ``Judges``'s
interface). A worker that dies while grading (killed, out of memory, a lost machine) makes the
scheduler give the submission to another worker; one that has been on ``retries + 1`` dying
workers (Dask's ``KilledWorker``) gets ``grader-error``: re-gradable, never a silent 0.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from course.grading.protocol import ProtocolError, Reply, Spec
from course.grading.pool import Judges
import course
import logging

PLUGIN = "course-judge"


def code_version() -> str:
    """A digest of this course package's Python files: the grader and each worker compare theirs, since a
    standing cluster's judges outlive an upgrade of the files they were started from."""

    global _CODE
    if _CODE is None:
        root = Path(course.__file__).resolve().parent
        digest = hashlib.sha256()
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
        _CODE = digest.hexdigest()[:16]
    return _CODE


_CODE: str | None = None

class JudgePlugin:
    """A worker's warm judge (``distributed.WorkerPlugin`` protocol: ``setup``/``teardown``)."""

    name = PLUGIN
    prestart: dict | None = None                   # the warm sandbox its judge launches first (warm, limits)

    def setup(self, worker=None):
        self.scratch = Path(tempfile.mkdtemp(prefix="course-dask-"))
        os.chmod(self.scratch, 0o711)              # as a local batch's scratch: sandboxes get their own folders in it
        self.lessons: dict[str, dict] = {}
        self.lock = threading.Lock()
        prestart = None if self.prestart is None else dict(self.prestart, scratch_base=str(self.scratch))
        self.code = code_version()                 # what its judge runs, compared with each task's
        self.judges = Judges(1, prestart)
        self.judges.start_all()                    # imports its libraries before the first submission arrives

    def teardown(self, worker=None):
        self.judges.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _lesson(self, bundle: dict) -> dict:
        """The lesson's files on this worker, written once per lesson version."""
        key = bundle["hash"]
        if key not in self.lessons:
            folder = self.scratch / "lessons" / key
            (folder / "files").mkdir(parents=True, exist_ok=True)
            (folder / "source.ipynb").write_text(bundle["source"], encoding="utf-8")
            (folder / "release.ipynb").write_text(bundle["release"], encoding="utf-8")
            files = []
            for name, data in bundle["files"].items():
                path = folder / "files" / Path(name).name
                path.write_bytes(data)
                files.append(str(path))
            self.lessons[key] = {"source": str(folder / "source.ipynb"), "release": str(folder / "release.ipynb"),
                                 "files": files}
        return self.lessons[key]

    def grade(self, task: dict) -> dict:
        """One submission (``task``: its notebook, its lesson's files, the :class:`Spec`'s other fields); the
        judge's :class:`Reply`, as JSON, decoded and checked by the grader."""
        if task.get("code") != self.code:
            return Reply(error="this Dask worker's judge runs another version of the course than `course grade` "
                               "(restart the workers after an upgrade); not graded, grade it again").to_json()
        with self.lock:                            # one submission at a time per judge (single-threaded workers)
            paths = self._lesson(task["lesson"])
            notebook = self.scratch / "submission.ipynb"
            notebook.write_text(task["notebook"], encoding="utf-8")
            spec = Spec.decode(dict(task["spec"], notebook=str(notebook), scratch_base=str(self.scratch), **paths))
            return self.judges.grade(0, spec).to_json()


def grade_on_worker(task: dict) -> dict:
    """The task a worker runs: its plugin's warm judge grades one submission."""
    # lazy: distributed takes seconds to import; this module's names are pickled to workers without it
    from distributed import get_worker

    return get_worker().plugins[PLUGIN].grade(task)


def _worker_plugin(prestart: dict | None = None, keep: bool = False):
    # lazy: distributed takes seconds to import; this module's names are pickled to workers without it
    from distributed import WorkerPlugin

    class CourseJudgePlugin(JudgePlugin, WorkerPlugin):
        pass

    plugin = CourseJudgePlugin()
    plugin.prestart = prestart
    # On a standing cluster the judges stay warm from one batch to the next: a worker that already has the
    # plugin keeps it (Dask's `idempotent`). A submission with other limits or modules gets a fresh sandbox.
    plugin.idempotent = keep
    return plugin


class DaskJudges:
    """``Judges``'s interface (``jobs``, ``first``, ``start_all``, ``grade``, ``close``) over Dask."""

    def __init__(self, jobs: int, scheduler: str | None = None, retries: int = 2, prestart: dict | None = None,
                 plugins: list | None = None):
        try:
            # lazy: distributed takes seconds to import; this module's names are pickled to workers without it
            import distributed  # noqa: F401
        except ImportError:
            raise SystemExit("course grade --executor dask needs Dask: pip install 'course[dask]'") from None
        self.scheduler, self.retries = scheduler, max(0, int(retries))
        self.prestart = prestart
        self.plugins = list(plugins or [])        # more worker plugins (Options.dask_worker_plugins)
        self.jobs = max(1, int(jobs))
        self.first: list[tuple] = []
        self.phases: dict[str, float] = {}
        self.client = self.cluster = None
        self._ready = threading.Event()
        self._start_lock, self._started, self._closed = threading.Lock(), False, False
        self._error: BaseException | None = None
        self._bundles: dict[str, dict] = {}
        self._t0 = time.perf_counter()
        if scheduler:                              # the cluster decides how many submissions run at a time
            try:
                self._connect()
            except Exception as exc:  # noqa: BLE001 - an unreachable address, no worker, another Dask version
                raise SystemExit(f"course grade: no Dask cluster to grade on at {scheduler} "
                                 f"({type(exc).__name__}: {str(exc)[:300]}); nothing was graded") from None
            threads = sum(w.get("nthreads", 1) for w in self.client.scheduler_info()["workers"].values())
            self.jobs = max(1, threads)

    def describe(self) -> str:
        if self.scheduler:
            return f"Dask cluster at {self.scheduler} ({self.jobs} worker threads)"
        return f"embedded Dask LocalCluster ({self.jobs} single-threaded workers)"

    def _connect(self) -> None:
        # lazy: Dask takes seconds to import; only a batch on a cluster needs it
        import dask
        # lazy: distributed takes seconds to import; this module's names are pickled to workers without it
        from distributed import Client, LocalCluster

        t = time.perf_counter()
        # One task per worker at a time (the others wait on the scheduler, not behind a worker that may die).
        dask.config.set({"distributed.scheduler.worker-saturation": 1.0})
        if self.scheduler:
            self.client = Client(self.scheduler, timeout="30s")
            self.client.wait_for_workers(1, timeout=120)
        else:
            # allowed-failures: how many dying workers a submission may be on before it is KilledWorker.
            dask.config.set({"distributed.scheduler.allowed-failures": self.retries})
            self.cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True, host="127.0.0.1",
                                        dashboard_address=None, memory_limit=0, silence_logs=logging.CRITICAL)
            self.client = Client(self.cluster)
        self.client.register_plugin(_worker_plugin(self.prestart, keep=bool(self.scheduler)), name=PLUGIN)
        for plugin in self.plugins:
            self.client.register_plugin(plugin)
        self.phases["dask cluster"] = time.perf_counter() - t

    def start_all(self) -> None:
        """Start the embedded cluster (its workers start their judges) while the batch is prepared. Once:
        every grading thread calls it, and each call used to start a cluster of its own (a batch with 2
        jobs ran 3 clusters, 6 workers, 6 judges and 6 warm sandboxes)."""
        with self._start_lock:
            if self._started:
                return
            self._started = True
        if self.client is not None:
            self._ready.set()
            return

        def start():
            try:
                self._connect()
            except BaseException as exc:  # noqa: BLE001 - reported by grade()
                self._error = exc
            finally:
                with self._start_lock:
                    closed = self._closed
                if closed:                     # the batch ended (e.g. failed) while the cluster started
                    self._close_now()
                self._ready.set()

        try:
            threading.Thread(target=start, daemon=True).start()
        except BaseException as exc:  # noqa: BLE001 - no thread: reported by grade(), which must not wait
            self._error = exc
            self._ready.set()

    def _bundle(self, spec: Spec) -> dict:
        source = spec.source
        if source not in self._bundles:

            files = {Path(p).name: Path(p).read_bytes() for p in sorted(spec.files)}
            bundle = {"source": Path(source).read_text(encoding="utf-8"),
                      "release": Path(spec.release).read_text(encoding="utf-8") if spec.release else "",
                      "files": files}
            digest = hashlib.sha256(bundle["source"].encode() + b"\0" + bundle["release"].encode())
            for name, data in files.items():
                digest.update(b"\0" + name.encode() + b"\0" + data)
            self._bundles[source] = dict(bundle, hash=digest.hexdigest()[:32])   # a worker writes each version once
        return self._bundles[source]

    def grade(self, slot: int, spec: Spec) -> Reply:
        # lazy: distributed takes seconds to import; this module's names are pickled to workers without it
        from distributed import KilledWorker

        self.start_all()
        self._ready.wait()
        if self._error is not None or self.client is None:
            return Reply(error=f"the Dask cluster did not start: {type(self._error).__name__}: {self._error}")
        submission = spec.submission
        task = {"submission": submission, "code": code_version(),
                "notebook": Path(spec.notebook).read_text(encoding="utf-8"),
                "lesson": self._bundle(spec),
                "spec": {k: v for k, v in asdict(spec).items()
                         if k not in ("notebook", "source", "release", "files", "scratch_base")}}
        asked = time.perf_counter()
        future = self.client.submit(grade_on_worker, task, key=f"grade-{submission.replace('/', '-')}-{uuid.uuid4().hex}",
                                    pure=False, retries=self.retries)
        try:
            answer = Reply.decode(future.result())
        except KilledWorker:
            answer = Reply(error=f"the Dask worker grading it died {self.retries + 1} times (KilledWorker): not "
                                 "graded, grade it again")
        except ProtocolError as exc:
            answer = Reply(error=f"the Dask worker's judge answered something unreadable ({str(exc)[:200]})")
        except Exception as exc:  # noqa: BLE001 - a lost cluster, a worker without the course: re-gradable
            answer = Reply(error=f"Dask could not grade it ({type(exc).__name__}: {str(exc)[:300]})")
        finally:
            future.release()
        if answer.error is None:
            self.first.append((self._t0, asked, time.perf_counter(), answer.phases))
        return answer

    def close(self, hurry: bool = False) -> None:
        with self._start_lock:
            self._closed = True
        self._close_now()

    def _close_now(self) -> None:
        for thing in (self.client, self.cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # noqa: BLE001 - closing at the end of a batch
                    pass

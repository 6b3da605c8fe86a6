"""A real Flink session cluster on this machine, for the tests and benchmarks.

Flink comes from the ``apache-flink`` wheel in its own venv (``make services`` makes
``.venv-flink`` at the root of the checkout; ``KUBESAGE_FLINK_VENV`` points elsewhere):
the wheel ships Flink's ``bin/``, ``lib/`` and ``conf/``. The cluster gets a copy of
``conf/`` in a temp dir with a ``config.yaml`` that binds everything to 127.0.0.1 on
free ports, keeps logs and pid files in that temp dir, and enables the adaptive
scheduler (in-place rescale through the resource-requirements API) with short
cooldowns, so a rescale takes seconds rather than minutes. ``stop()`` runs
``bin/stop-cluster.sh`` and then makes sure that no JVM it started is left, by the pids
Flink wrote.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from kubesage.adapters.flink.flink_home import find_flink_home, flink_venv
from kubesage.core.errors import ConfigError, DependencyError

log = logging.getLogger(__name__)

CHECKOUT_FLINK_VENV = Path(__file__).resolve().parents[2] / ".venv-flink"
"""The venv ``make services`` creates at the root of this checkout."""


class FlinkClusterError(DependencyError):
    """The local Flink cluster could not be started, reached or stopped."""


def find_flink_venv() -> Path:
    """The Flink venv: ``$KUBESAGE_FLINK_VENV``, else the checkout's ``.venv-flink``."""
    return flink_venv(CHECKOUT_FLINK_VENV)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    (port,) = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports on 127.0.0.1 that nothing listens on right now: each
    probe stays bound until all are chosen, so the kernel cannot hand one out twice."""
    with contextlib.ExitStack() as probes:
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind(("127.0.0.1", 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


PORT_OPTIONS = (
    "jobmanager.rpc.port",
    "taskmanager.rpc.port",
    "taskmanager.data.port",
    "blob.server.port",
)
"""The ports besides REST a cluster listens on, each chosen free at start."""


class LocalFlinkCluster:
    """A standalone Flink session cluster (one JobManager, one TaskManager) on 127.0.0.1.

    Use as a context manager, or call ``start()`` and ``stop()``. ``extra_conf`` entries
    override the generated ``config.yaml`` keys (flat keys, as Flink documents them).
    """

    def __init__(
        self,
        *,
        task_slots: int = 8,
        venv: Path | None = None,
        extra_conf: Mapping[str, str | int] | None = None,
        startup_timeout_s: float = 90.0,
    ) -> None:
        if task_slots < 1:
            raise ConfigError(f"task_slots must be ≥ 1, got {task_slots}", field="task_slots")
        self.venv = venv or find_flink_venv()
        self.flink_home = find_flink_home(self.venv)
        self.task_slots = task_slots
        self.extra_conf = dict(extra_conf or {})
        self.startup_timeout_s = startup_timeout_s
        self.rest_port = 0
        self._ports: dict[str, int] = {}
        self._workdir: Path | None = None
        self._pids: set[int] = set()
        self._replacing = threading.Lock()  # one replacement TaskManager at a time

    @property
    def rest_url(self) -> str:
        """The REST endpoint, e.g. ``http://127.0.0.1:40123``."""
        if not self.rest_port:
            raise FlinkClusterError("the local Flink cluster is not running")
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def conf_dir(self) -> Path:
        if self._workdir is None:
            raise FlinkClusterError("the local Flink cluster is not running")
        return self._workdir / "conf"

    @property
    def log_dir(self) -> Path:
        return self.conf_dir.parent / "log"

    @property
    def python(self) -> Path:
        """The Flink venv's interpreter: runs the Python workers and ``flink run -py``."""
        return self.venv / "bin" / "python"

    def configuration(self) -> dict[str, Any]:
        """The flat ``config.yaml`` entries this cluster runs with (the wheel's, then ours)."""
        assert self._workdir is not None
        shipped = self.flink_home / "conf" / "config.yaml"
        conf = _flatten(yaml.safe_load(shipped.read_text()) or {})
        python = str(self.python)
        conf.update(
            {
                "jobmanager.bind-host": "127.0.0.1",
                "jobmanager.rpc.address": "127.0.0.1",
                "jobmanager.rpc.port": self._ports["jobmanager.rpc.port"],
                "jobmanager.memory.process.size": "1024m",
                "taskmanager.bind-host": "127.0.0.1",
                "taskmanager.host": "127.0.0.1",
                "taskmanager.rpc.port": self._ports["taskmanager.rpc.port"],
                "taskmanager.data.port": self._ports["taskmanager.data.port"],
                "taskmanager.numberOfTaskSlots": self.task_slots,
                "taskmanager.memory.process.size": f"{1280 + 160 * self.task_slots}m",
                "taskmanager.memory.managed.fraction": 0.3,
                "rest.address": "127.0.0.1",
                "rest.bind-address": "127.0.0.1",
                "rest.port": self.rest_port,
                "blob.server.port": self._ports["blob.server.port"],
                "env.log.dir": str(self._workdir / "log"),
                "env.pid.dir": str(self._workdir / "pid"),
                "io.tmp.dirs": str(self._workdir / "tmp"),
                "parallelism.default": 1,
                "jobmanager.scheduler": "adaptive",
                "jobmanager.adaptive-scheduler.executing.cooldown-after-rescaling": "2 s",
                "jobmanager.adaptive-scheduler.executing.rescale-trigger.max-delay": "5 s",
                "jobmanager.adaptive-scheduler.resource-stabilization-timeout": "2 s",
                "metrics.fetcher.update-interval": "2 s",
                # Little data in flight: backpressure shows within seconds, and unaligned
                # checkpoints and rescales stay small.
                "taskmanager.memory.segment-size": "4 kb",
                "taskmanager.network.memory.buffers-per-channel": 2,
                "taskmanager.network.memory.floating-buffers-per-gate": 2,
                "taskmanager.network.memory.max-buffers-per-channel": 2,
                "web.backpressure.refresh-interval": "2 s",
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": 3,
                "restart-strategy.fixed-delay.delay": "2 s",
                # flink-python (and its embedded interpreter, pemja) on the cluster's own
                # class path: PyFlink's thread mode loads CPython into the JVM once, and a
                # second job's class loader could not load it again on Java 17.
                "classloader.parent-first-patterns.additional": "pemja.",
                "python.executable": python,
                "python.client.executable": python,
                # A TaskManager that dies is dropped from the JobManager's view within
                # 15 s (default 50 s), so a replacement is the only one it lists.
                "heartbeat.interval": "3 s",
                "heartbeat.timeout": "15 s",
                # A JVM crash report goes beside the logs, not into the caller's cwd
                # (added to the shipped options: they carry Java 17's --add-opens).
                "env.java.opts.all": " ".join(
                    (
                        str(conf.get("env.java.opts.all", "")),
                        f"-XX:ErrorFile={self._workdir / 'log'}/hs_err_pid%p.log",
                    )
                ).strip(),
            }
        )
        conf.update(self.extra_conf)
        return conf

    @property
    def lib_dir(self) -> Path:
        return self.conf_dir.parent / "lib"

    def _link_lib(self) -> None:
        """``lib/`` = the wheel's ``lib/*.jar`` plus ``opt/flink-python*.jar`` (as links)."""
        self.lib_dir.mkdir()
        jars = [*(self.flink_home / "lib").glob("*.jar")]
        jars += (self.flink_home / "opt").glob("flink-python*.jar")
        for jar in jars:
            (self.lib_dir / jar.name).symlink_to(jar)

    def flink_env(self) -> dict[str, str]:
        """What ``bin/flink`` needs to find this cluster's config (``FLINK_CONF_DIR``)."""
        return {"FLINK_CONF_DIR": str(self.conf_dir)}

    def python_args(self) -> tuple[str, ...]:
        """``flink run`` options that run a PyFlink job with the Flink venv's Python."""
        python = str(self.python)
        return ("-pyexec", python, "-pyclientexec", python)

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env["FLINK_CONF_DIR"] = str(self.conf_dir)
        env["FLINK_LIB_DIR"] = str(self.lib_dir)
        env["FLINK_LOG_DIR"] = str(self.log_dir)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env.pop("PYTHONPATH", None)
        return env

    def start(self) -> LocalFlinkCluster:
        """Write the config, run ``bin/start-cluster.sh`` and wait until REST answers."""
        self._workdir = Path(tempfile.mkdtemp(prefix="kubesage-flink-"))
        for sub in ("log", "pid", "tmp"):
            (self._workdir / sub).mkdir()
        shutil.copytree(self.flink_home / "conf", self.conf_dir)
        names = ("rest.port", *PORT_OPTIONS)
        self._ports = dict(zip(names, free_ports(len(names)), strict=True))
        self.rest_port = self._ports["rest.port"]
        (self.conf_dir / "config.yaml").write_text(
            yaml.safe_dump(self.configuration(), sort_keys=True)
        )
        (self.conf_dir / "masters").write_text(f"127.0.0.1:{self.rest_port}\n")
        (self.conf_dir / "workers").write_text("localhost\n")
        self._link_lib()
        try:
            self._run_script("start-cluster.sh")
            self._wait_for_rest()
        except BaseException:
            self.stop()
            raise
        log.info("local Flink cluster up at %s (conf %s)", self.rest_url, self.conf_dir)
        return self

    def _run_script(self, script: str, *args: str) -> None:
        done = subprocess.run(
            ["bash", str(self.flink_home / "bin" / script), *args],
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self._pids |= self._pid_file_pids()
        if done.returncode:
            raise FlinkClusterError(
                f"bin/{script} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"
            )

    def _pid_file_pids(self) -> set[int]:
        if self._workdir is None:
            return set()
        pids: set[int] = set()
        for pid_file in (self._workdir / "pid").glob("*.pid"):
            pids |= {int(word) for word in pid_file.read_text().split() if word.isdigit()}
        return pids

    def _wait_for_rest(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            try:
                reply = httpx.get(f"{self.rest_url}/overview", timeout=2.0)
                if reply.status_code == 200 and reply.json().get("taskmanagers", 0) >= 1:
                    return
                last_error = f"HTTP {reply.status_code}: {reply.text[:200]}"
            except (httpx.HTTPError, ValueError) as exc:
                last_error = str(exc)
            self._pids |= self._pid_file_pids()
            time.sleep(0.5)
        raise FlinkClusterError(
            f"Flink REST at {self.rest_url} did not report a TaskManager within "
            f"{self.startup_timeout_s:.0f} s ({last_error}); logs in {self.log_dir}"
        )

    def _taskmanager_ids(self) -> set[str]:
        """Ids of the TaskManagers the JobManager lists (empty when REST does not answer)."""
        try:
            reply = httpx.get(f"{self.rest_url}/taskmanagers", timeout=5.0)
            listed = reply.json().get("taskmanagers", []) if reply.status_code == 200 else []
        except (httpx.HTTPError, ValueError):
            return set()
        return {str(entry.get("id")) for entry in listed if isinstance(entry, dict)}

    def taskmanager_pids(self) -> list[int]:
        """Live TaskManager JVMs of this cluster (from its pid files)."""
        assert self._workdir is not None
        pids = set()
        for pid_file in (self._workdir / "pid").glob("*taskexecutor*.pid"):
            pids |= {int(word) for word in pid_file.read_text().split() if word.isdigit()}
        alive = []
        for pid in sorted(pids):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 0)
                alive.append(pid)
        return alive

    def ensure_taskmanager(self, timeout_s: float = 90.0) -> bool:
        """Start a new TaskManager when none is running; True when one was started.

        PyFlink's thread mode runs CPython inside the TaskManager's JVM, and cancelling a
        job whose Python operator is mid-call can crash that JVM (SIGSEGV in
        ``take_gil``; the report lands in the log dir). The JobManager and its REST API
        survive; a fresh TaskManager restores the cluster's slots. A dead JVM is seen
        from the pid files at once (the JobManager only notices on a lost heartbeat);
        this returns once the JobManager lists the new TaskManager and not the old.
        Callers on several threads start one replacement between them.
        """
        if self._workdir is None:
            raise FlinkClusterError("the cluster is not started")
        with self._replacing:
            if self.taskmanager_pids():
                return False
            log.warning("the TaskManager of %s is gone; starting a new one", self.rest_url)
            known = self._taskmanager_ids()
            self._run_script("taskmanager.sh", "start")
            deadline = time.monotonic() + timeout_s
            # Registered, and the dead one dropped (after the heartbeat timeout).
            while not (listed := self._taskmanager_ids()) or listed & known:
                if time.monotonic() > deadline:
                    raise FlinkClusterError(
                        f"no new TaskManager alone in the JobManager's view within "
                        f"{timeout_s:.0f} s (listed: {sorted(listed)}); logs in {self.log_dir}"
                    )
                time.sleep(0.5)
            return True

    def submit_python(
        self,
        script: Path,
        args: list[str],
        *,
        parallelism: int,
        conf: Mapping[str, str] | None = None,
    ) -> str:
        """Submit a PyFlink script detached (``bin/flink run -d -py``); the job id."""
        command = [
            "bash",
            str(self.flink_home / "bin" / "flink"),
            "run",
            "-d",
            "-m",
            f"127.0.0.1:{self.rest_port}",
            "-p",
            str(parallelism),
            *self.python_args(),
        ]
        for key, value in (conf or {}).items():
            command.append(f"-D{key}={value}")
        command += ["-py", str(script), *args]
        done = subprocess.run(
            command,
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        output = done.stdout + done.stderr
        for line in output.splitlines():
            if "JobID" in line:
                return line.rsplit(" ", 1)[-1].strip()
        raise FlinkClusterError(
            f"`flink run -py {script.name}` exited {done.returncode} without a job id: "
            f"{output[-3000:]}"
        )

    def stop(self) -> None:
        """Stop the cluster and remove its temp dir; kills any JVM of ours that remains."""
        if self._workdir is None:
            return
        self._pids |= self._pid_file_pids()
        try:
            self._run_script("stop-cluster.sh")
        except (FlinkClusterError, subprocess.TimeoutExpired) as exc:
            log.warning("bin/stop-cluster.sh failed (%s); killing the JVMs by pid", exc)
        deadline = time.monotonic() + 20.0
        while self._alive() and time.monotonic() < deadline:
            time.sleep(0.3)
        for pid in self._alive():
            log.warning("Flink process %d outlived stop-cluster.sh; killing it", pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if os.environ.get("KUBESAGE_KEEP_FLINK_LOGS"):
            log.info("Flink logs kept in %s", self.log_dir)
        else:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None
        self.rest_port = 0
        self._pids.clear()

    def _alive(self) -> list[int]:
        alive = []
        for pid in sorted(self._pids):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                continue
            alive.append(pid)
        return alive

    def __enter__(self) -> LocalFlinkCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

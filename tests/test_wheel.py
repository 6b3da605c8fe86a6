"""The wheel works installed outside the checkout: shipped files, simulate, topology, serve.

The wheel is built from a copy of the sources (so nothing is written into the
checkout) with ``.venv``'s setuptools, offline, and installed ``--no-deps`` into a
fresh venv in a temporary folder. Its dependencies come from the running
interpreter's site-packages through a ``.pth`` file — resolving them afresh would
download a multi-GB torch — and that folder's own ``.pth`` files (the checkout's
editable install among them) are not processed, so only the installed wheel
provides ``kubesage``. Every command runs from an empty temporary folder with
``PYTHONPATH`` unset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "core", "adapters", "configs")
"""What the build reads (pyproject's package-dir, readme and package-data)."""
FALLBACK_WORDS = ("falls back", "fallback")
"""How the ppo policy says it could not use its model (core/rl/policy.py)."""
SIMULATION = """\
apiVersion: kubesage.io/v1alpha1
kind: Simulation
spec:
  cluster:
    synthetic: {nodes: 40, seed: 0}
  workload:
    synthetic: {pods: 300, seed: 0}
  policies: [fgd, ppo]
  seeds: [42]
  jobs: 1
"""

pytestmark = pytest.mark.slow


class Installed:
    """The venv with the wheel installed, and how to run its commands."""

    def __init__(self, venv: Path, workdir: Path):
        self.venv = venv
        self.workdir = workdir
        self.env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.env["KUBESAGE_CACHE_DIR"] = str(workdir / "cache")

    def run(self, *command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / command[0]), *command[1:]],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def python(self, code: str) -> str:
        done = self.run("python", "-c", code)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    scratch = tmp_path_factory.mktemp("wheel")
    assert not scratch.resolve().is_relative_to(ROOT), "the venv must be outside the checkout"
    source = scratch / "src"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(ROOT / name, source / name)
    dist = scratch / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    built = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(source)],
        cwd=scratch,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("kubesage-*.whl")
    venv = scratch / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    site_packages = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dependencies = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (Path(site_packages) / "kubesage-test-dependencies.pth").write_text(
        "".join(f"{path}\n" for path in sorted(dependencies))
    )
    workdir = scratch / "work"
    workdir.mkdir()
    yield Installed(venv, workdir)


def test_the_installed_package_is_the_one_that_runs(installed: Installed) -> None:
    located = json.loads(
        installed.python(
            "import json, kubesage.core, kubesage.adapters, kubesage.configs; "
            "print(json.dumps([m.__file__ for m in "
            "(kubesage.core, kubesage.adapters, kubesage.configs)]))"
        )
    )
    for path in located:
        assert Path(path).resolve().is_relative_to(installed.venv.resolve()), path


def test_every_configs_file_ships_and_is_found(installed: Installed) -> None:
    expected = sorted(
        str(path.relative_to(ROOT / "configs"))
        for path in (ROOT / "configs").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    )
    shipped = json.loads(
        installed.python(
            "import json; from importlib import resources; from pathlib import Path; "
            "root = Path(str(resources.files('kubesage.configs'))); "
            "print(json.dumps(sorted(str(p.relative_to(root)) "
            "for p in root.rglob('*') if p.is_file() and '__pycache__' not in p.parts)))"
        )
    )
    assert shipped == expected
    model = installed.python(
        "from kubesage.core.paths import shipped_file; "
        "from kubesage.core.rl.persistence import load_network; "
        "path = shipped_file('models/ppo-openb.safetensors'); load_network(path); print(path)"
    ).strip()
    assert Path(model).resolve().is_relative_to(installed.venv.resolve())


def test_simulate_runs_fgd_and_the_shipped_ppo_model(installed: Installed) -> None:
    config = installed.workdir / "simulation.yaml"
    config.write_text(SIMULATION)
    done = installed.run(
        "kubesage", "simulate", "--config", str(config), "--no-report", "--format", "json"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(document["summary"]) == {"fgd", "ppo"}
    assert all(run["alloc_at_130"] is not None for run in document["runs"])
    for words in FALLBACK_WORDS:
        assert words not in done.stderr.lower(), done.stderr
    assert not (installed.workdir / "kubesage-report").exists()


def test_topology_show_takes_a_shipped_example_by_name(installed: Installed) -> None:
    done = installed.run("kubesage", "topology", "show", "dgx-h100-pod")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "16 node(s), 128 GPU(s)" in done.stdout


def test_serve_embedded_answers_healthz(installed: Installed) -> None:
    log = installed.workdir / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [
                str(installed.venv / "bin" / "kubesage"),
                "serve", "--embedded", "--host", "127.0.0.1", "--port", "0", "--nodes", "20",
            ],
            cwd=installed.workdir,
            env=installed.env,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )  # fmt: skip
        try:
            status = _healthz_status(process, log, deadline_s=120)
        finally:
            process.terminate()
            process.wait(timeout=30)
    assert status == 200, log.read_text()[-3000:]


def _healthz_status(process: subprocess.Popen[bytes], log: Path, deadline_s: float) -> int | None:
    """GET /healthz once ``serve`` logs the port it listens on; its status code."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return None
        for line in log.read_text().splitlines():
            if line.startswith("{") and '"event":"serving"' in line:
                port = json.loads(line)["port"]
                try:
                    return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code
                except httpx.TransportError:
                    break  # listening is logged just before it accepts: try again
        time.sleep(0.2)
    return None

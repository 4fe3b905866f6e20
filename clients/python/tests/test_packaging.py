"""The package as a user gets it: a wheel and an sdist built with
``python -m build``, each installed into a fresh virtual environment, and
run there against a real server: the wheel runs examples/python-producer,
the sdist a smoke test. Set JETFLOW_SKIP_PACKAGING=1 to leave it out."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import PKG, REPO, Server

pytestmark = pytest.mark.skipif(os.environ.get("JETFLOW_SKIP_PACKAGING") == "1", reason="JETFLOW_SKIP_PACKAGING=1")

SMOKE = """
import asyncio, sys
import nats, jetflow

async def main(url):
    nc = await nats.connect(url)
    p = await jetflow.Producer.create(nc)
    rid = await p.enqueue(jetflow.define("demo.echo")({"smoke": True}))
    run = await p.wait(rid, timeout=30)
    await p.close(); await nc.close()
    assert run.state is jetflow.State.SUCCESS and run.result == {"smoke": True}, run
    print("smoke ok", jetflow.__version__, jetflow.__file__)

asyncio.run(main(sys.argv[1]))
"""


@pytest.fixture(scope="module")
def dist() -> Iterator[Path]:
    out = Path(tempfile.mkdtemp(prefix="jetflow-py-dist-"))
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(PKG)],
                       capture_output=True, text=True, cwd=PKG)
    assert r.returncode == 0, r.stdout + r.stderr
    yield out


def fresh_venv(where: Path) -> Path:
    venv.EnvBuilder(with_pip=True, clear=True).create(where)
    return where / "bin" / "python"


def test_wheel_and_sdist_contents(dist: Path) -> None:
    wheel = next(dist.glob("jetflow-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "jetflow/py.typed" in names and "jetflow/__init__.py" in names
    assert not [n for n in names if n.startswith("tests/")]
    sdist = next(dist.glob("jetflow-*.tar.gz"))
    members = tarfile.open(sdist).getnames()
    for want in ("pyproject.toml", "README.md", "src/jetflow/py.typed", "src/jetflow/_producer.py"):
        assert any(m.endswith("/" + want) for m in members), want


def test_wheel_in_a_fresh_venv_runs_the_example(dist: Path, peer_server: Server, tmp_path: Path) -> None:
    py = fresh_venv(tmp_path / "venv")
    wheel = next(dist.glob("jetflow-*.whl"))
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    # Run from elsewhere than the sources: the installed package is used.
    r = subprocess.run([str(py), "-c", "import jetflow, pathlib; p = pathlib.Path(jetflow.__file__).parent; "
                        "print(p); assert (p / 'py.typed').exists()"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0 and "site-packages" in r.stdout, r.stdout + r.stderr
    r = subprocess.run([str(py), str(REPO / "examples" / "python-producer" / "producer.py"), "--url", peer_server.url],
                       capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "workflow:" in r.stdout and "success" in r.stdout, r.stdout


def test_sdist_in_a_fresh_venv(dist: Path, peer_server: Server, tmp_path: Path) -> None:
    py = fresh_venv(tmp_path / "venv")
    sdist = next(dist.glob("jetflow-*.tar.gz"))
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", str(sdist)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(py), "-c", SMOKE, peer_server.url], capture_output=True, text=True, cwd=tmp_path,
                       timeout=120)
    assert r.returncode == 0 and "smoke ok" in r.stdout, r.stdout + r.stderr

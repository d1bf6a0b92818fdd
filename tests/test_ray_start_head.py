"""A Ray head started the way a cluster user starts one (`ray start --head`, token
authentication on), used as README's "Running on a Ray cluster" says: a run with
`--address` gives the embedded run's figures to the last bit, the token is found where Ray
keeps it, a missing or wrong token is one line saying what to do, and `ray job submit
--working-dir` runs the project on the head.

The head is this module's own: loopback only, free ports, its temp dir, TMPDIR and token
file (RAY_AUTH_TOKEN_PATH) under pytest's tmp dir, and its processes stopped by pid
afterwards (`ray stop` would stop every Ray on the machine, other tests' too). HOME stays
the user's: the runs keep numba's and the topologies' caches there, as every other run does
(a fresh HOME would compile the analysis kernels again); the token's default place,
~/.ray/auth_token, is tried with a HOME of the test's own, on the address check alone.

Ray's copy of the project for the job is new files at a new path, without __pycache__: it
loads the kernels the other runs compiled because the project's kernel cache is keyed by
the sources' contents and paths relative to the project (emulator/jit_cache.py; the
user's environment keeps SCRIBE_EMU_KERNEL_CACHE, where that cache is when it is set). The
job is submitted after the address run (two Spark sessions on the head's two CPUs would
wait for each other).

The head and everything run on it are this file run as a script (:func:`head_checks`):
tests/conftest.py's RayHeadChild runs it in the background, at low priority, after the
session's other background jobs; the tests (`late`) check what it recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from emulator.jit_cache import KERNEL_CACHE_ENV
from runs import figure_differences, reference_cli_args, summary

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
RAY = VENV_BIN / "ray"
HEAD_START_TIMEOUT_S = 180
MAX_RAY_TEMP_DIR_LEN = 40


def _free_ports(n: int) -> list[int]:
    """n distinct ports free on loopback now (all bound at once, so no two are the same)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _user_env(token: Path, tmp: Path) -> dict[str, str]:
    """The environment of a user of this head: no Ray settings of the caller's (address,
    auth mode or token) but the token file, TMPDIR ours; the machine's kernel cache. The
    venv's bin first on PATH, as after `source .venv/bin/activate`: the README asks for
    that before `ray start`, so that `python` in a job is the project's.
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps Ray on 127.0.0.1 (otherwise it announces, and
    connects to, the machine's routable address)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "SCRIBE_EMU_")) and k not in ("VIRTUAL_ENV",)
           or k == KERNEL_CACHE_ENV}
    env.update(RAY_AUTH_TOKEN_PATH=str(token), TMPDIR=str(tmp),
               PATH=f"{VENV_BIN}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(VENV_BIN.parent),
               RAY_USAGE_STATS_ENABLED="0",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", SPARK_LOCAL_IP="127.0.0.1",
               COLUMNS="200", NO_COLOR="1")
    return env


def _ours(tmp: Path) -> list[psutil.Process]:
    """Processes that run with our TMPDIR: the head's, its workers and job drivers (they
    inherit the raylet's environment) and the runs this test started."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("TMPDIR") == str(tmp):
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


@contextlib.contextmanager
def running_head(base: Path):
    """(environment, GCS address, dashboard URL) of a running `ray start --head` with
    token authentication on, stopped (and every process of it killed) afterwards."""
    tmp = base / "tmp"
    tmp.mkdir()
    # Ray's socket paths (<temp dir>/session_<date>_<pid>/sockets/plasma_store) must stay
    # within AF_UNIX's 107 bytes: a short temp dir, under /tmp if pytest's is too long.
    ray_tmp = base / "r"
    own_ray_tmp = len(str(ray_tmp)) > MAX_RAY_TEMP_DIR_LEN
    if own_ray_tmp:
        ray_tmp = Path(tempfile.mkdtemp(prefix="rh-", dir="/tmp"))
    # A token where Ray looks for one: `ray start --head` then turns token authentication
    # on by itself.
    token = base / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = _user_env(token, tmp)
    gcs, dash, agent, client, metrics, runtime_env = _free_ports(6)
    log_path = base / "head.log"
    with open(log_path, "wb") as log:
        head = subprocess.Popen(
            [str(RAY), "start", "--head", "--block", "--port", str(gcs),
             "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1",
             "--dashboard-port", str(dash), "--dashboard-agent-listen-port", str(agent),
             "--ray-client-server-port", str(client), "--metrics-export-port", str(metrics),
             "--runtime-env-agent-port", str(runtime_env), "--temp-dir", str(ray_tmp),
             "--num-cpus", "2", "--disable-usage-stats"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=base)
    try:
        deadline = time.monotonic() + HEAD_START_TIMEOUT_S
        while "Ray runtime started" not in log_path.read_text(errors="replace"):
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the head did not start:\n"
                                   + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        if "Token authentication is enabled" not in log_path.read_text(errors="replace"):
            raise RuntimeError("the head runs without token authentication")
        yield env, f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}"
    finally:
        procs = _ours(tmp)
        head.send_signal(signal.SIGTERM)       # `--block`: stops the processes it started
        try:
            head.wait(timeout=20)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(timeout=10)
        for proc in procs + _ours(tmp):
            try:
                proc.kill()
            except psutil.Error:
                continue
        if own_ray_tmp:
            shutil.rmtree(ray_tmp, ignore_errors=True)


def _outcome(res: subprocess.CompletedProcess) -> dict:
    return {"returncode": res.returncode, "stdout": res.stdout[-4000:],
            "stderr": res.stderr[-4000:]}


def address_run(env, gcs, base: Path) -> dict:
    """The session's reference run (tests/runs.py) with `--address` against the head, this
    machine holding the token and RAY_AUTH_MODE unset."""
    out = base / "address-run"
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), *reference_cli_args(2),
                          "--no-progress", "--out", str(out), "--address", gcs],
                         capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
    return {**_outcome(res), "out": str(out)}


_CHECK = ("import os, sys; from runtime.ray_spark import check_cluster_address; "
          "check_cluster_address(sys.argv[1]); print(os.environ.get('RAY_AUTH_MODE'))")


def token_in_home(env, gcs, base: Path) -> dict:
    """The address check with the token only in ~/.ray/auth_token (Ray's default place)."""
    home = base / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text(Path(env["RAY_AUTH_TOKEN_PATH"]).read_text())
    user = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN_PATH"}
    res = subprocess.run([sys.executable, "-c", _CHECK, gcs], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env={**user, "HOME": str(home)})
    return _outcome(res)


TOKEN_CASES = ("none", "wrong")


def without_the_token(env, gcs, base: Path, case: str) -> dict:
    """A scenario with `--address` and no token (`none`), or another cluster's (`wrong`)."""
    user = {k: v for k, v in env.items() if k != "RAY_AUTH_TOKEN_PATH"}
    user["HOME"] = str(base / f"home-{case}")
    if case == "wrong":
        user["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    res = subprocess.run([sys.executable, str(ROOT / "cli.py"), "scenario", "quick",
                          "--address", gcs, "--no-progress"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, env=user)
    return _outcome(res)


def job_submit(env, dashboard, base: Path) -> dict:
    """The README's job: the project as working directory, `python` of the head's PATH; the
    job's driver finds the head through RAY_ADDRESS. Ray's own `ray job submit` needs
    RAY_AUTH_MODE=token to send the token (the README says so)."""
    out = base / "job-run"
    res = subprocess.run(
        [str(RAY), "job", "submit", "--address", dashboard, "--working-dir", str(ROOT),
         "--", "python", "cli.py", "scenario", "quick", "--nodes", "200", "--groups",
         "3", "--topologies", "1", "--no-progress", "--out", str(out)],
        capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**env, "RAY_AUTH_MODE": "token"})
    return {**_outcome(res), "out": str(out)}


def head_checks(base: Path) -> dict:
    """Every check of this module on one head, one after another."""
    with running_head(base) as (env, gcs, dashboard):
        return {"address_run": address_run(env, gcs, base),
                "token_in_home": token_in_home(env, gcs, base),
                "without_the_token": {c: without_the_token(env, gcs, base, c)
                                      for c in TOKEN_CASES},
                "job": job_submit(env, dashboard, base)}


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]
    print(json.dumps(head_checks(Path(sys.argv[1]))))


@pytest.fixture(scope="module")
def ray_head(request, warm_kernels, tmp_path_factory) -> dict:
    """What the head's child process found (conftest.py's RayHeadChild, in the
    background)."""
    from conftest import background

    job = background("ray_head", tmp_path_factory)
    request.getfixturevalue("reference_runs")
    return job.found()


def said(outcome: dict) -> str:
    return outcome["stdout"] + outcome["stderr"]


@pytest.mark.late
def test_address_run_gives_the_embedded_figures(ray_head, reference_runs):
    """`--address` against a token-auth head with this machine holding the token and
    RAY_AUTH_MODE unset: the product turns token mode on itself. The run is the session's
    reference run (tests/runs.py), made on the embedded Ray."""
    run = ray_head["address_run"]
    assert run["returncode"] == 0, said(run)
    mine, ref = summary(Path(run["out"])), summary(reference_runs[2])
    assert figure_differences(mine, ref) == []
    # and the protocol's counters (the engine's statistics, such as windows, are no result)
    assert mine["emulation"]["counters"] == ref["emulation"]["counters"]


@pytest.mark.late
def test_token_in_home_is_found(ray_head):
    """The token in ~/.ray/auth_token (Ray's default place) is enough too."""
    check = ray_head["token_in_home"]
    assert check["returncode"] == 0 and check["stdout"].strip() == "token", said(check)


@pytest.mark.late
@pytest.mark.parametrize("case", TOKEN_CASES)
def test_address_without_the_token_says_what_to_do(ray_head, case):
    """No token, or another cluster's: one line naming the variable, the files and the
    command that prints the token; exit code 2."""
    res = ray_head["without_the_token"][case]
    assert res["returncode"] == 2, said(res)
    lines = res["stderr"].strip().splitlines()
    assert len(lines) == 1, res["stderr"]
    expected = {"none": "wants an authentication token and this machine has none",
                "wrong": "rejected the authentication token from the variable RAY_AUTH_TOKEN"}
    assert expected[case] in lines[0]
    assert "`ray get-auth-token`" in lines[0]


@pytest.mark.late
def test_ray_job_submit_runs_a_scenario(ray_head):
    job = ray_head["job"]
    assert job["returncode"] == 0, said(job)
    assert "succeeded" in said(job)
    s = summary(Path(job["out"]))
    assert s["nodes"] == 200 and s["groups"] == 3

#!/usr/bin/env python3
"""MLflowLogger against a real MLflow tracking server (`mlflow server`, the pinned version of the
2.15 venv) on loopback, read back through mlflow's own Python client:

1. examples/mlflow_mnist on 2 ranks: the run FINISHED in the named experiment, its parameters,
   every metric's history equal (step and value, exactly) to the JsonLogger mirror of the same
   handlers, under ignite's keys ("training batch_loss", "lr group_0", "test accuracy"), once
   per step (only rank 0 logs), and the artifacts (report.html, the best checkpoint) equal to
   the files byte for byte.
2. The same run resumed (MLFLOW_RUN_ID) with a changed parameter: the server refuses it, the
   program warns, goes on and exits 0; its metrics are appended to the run.
3. The server killed after the run was created (the program stopped meanwhile, so training
   happens with the server gone): the program finishes, exits 0 within a bound, and says what
   was not logged.
Exits 77 (skipped) when the interpreter has no mlflow (Debian's python of the 1.13 build).
"""
import argparse
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_") and "proxy" not in k.lower()}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def start_server(folder, attempts=3):
    """The server on a free loopback port; a port taken by another process between free_port()
    and the server's bind (the server then exits at once) is tried again with a new one."""
    for attempt in range(attempts):
        try:
            return start_server_once(folder)
        except PortTaken as error:
            if attempt == attempts - 1:
                raise RuntimeError(str(error)) from None


class PortTaken(Exception):
    pass


def start_server_once(folder):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(os.path.join(folder, "server.log"), "wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{folder}/mlflow.db", "--artifacts-destination", f"{folder}/artifacts"],
        stdout=log, stderr=subprocess.STDOUT, env=clean_env(), start_new_session=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if server.poll() is not None:
            with open(os.path.join(folder, "server.log"), errors="replace") as log_text:
                taken = "address already in use" in log_text.read().lower()
            message = f"mlflow server exited with {server.returncode}; see {folder}/server.log"
            raise PortTaken(message) if taken else RuntimeError(message)
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as answer:
                if answer.status == 200:
                    return server, url
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(f"mlflow server did not answer /health within 90 s; see {folder}/server.log")


def stop(process):
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run_program(args, env_extra=None, timeout=240):
    env = clean_env()
    env.update(env_extra or {})
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def run_id_of(output):
    for line in output.splitlines():
        if line.startswith("run ") and ": experiment " in line:
            return line.split()[1].rstrip(":")
    raise AssertionError("the program printed no 'run <id>: experiment ...' line:\n" + output)


def ignite_key(tag, name):
    return " ".join(([tag] if tag else []) + name.split("/"))


def expected_history(mirror):
    history = {}
    with open(mirror) as lines:
        for line in lines:
            record = json.loads(line)
            value = record["value"] if record["value"] is not None else float(record["non_finite"])
            history.setdefault(ignite_key(record["tag"], record["name"]), []).append((record["step"], value))
    return history


def same_number(a, b):
    return a == b or (math.isnan(a) and math.isnan(b))


def check_happy_run(client, url, folder, program):
    out = os.path.join(folder, "out")
    mirror = os.path.join(folder, "mirror.jsonl")
    rc, output = run_program([program, "--tracking-uri", url, "--experiment", "kindling-test", "--run-name", "happy",
                              "--epochs", "2", "--limit", "1280", "--test-limit", "512", "--log-every", "5",
                              "--output-path", out, "--json-mirror", mirror])
    assert rc == 0, f"mlflow_mnist exited {rc}:\n{output}"
    assert "not logged" not in output, output
    run_id = run_id_of(output)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED", run.info
    assert client.get_experiment(run.info.experiment_id).name == "kindling-test"
    assert run.data.tags["mlflow.runName"] == "happy" and run.data.tags["mlflow.source.type"] == "LOCAL", run.data.tags
    params = {"lr": "0.050000", "batch_size": "64", "epochs": "2", "world_size": "2", "backend": "gloo"}
    assert run.data.params == params, run.data.params
    expected = expected_history(mirror)
    for key in ("training batch_loss", "lr group_0", "test accuracy", "test loss"):
        assert key in expected, f"{key!r} not among the mirror's keys {sorted(expected)}"
    assert set(run.data.metrics) == set(expected), (sorted(run.data.metrics), sorted(expected))
    for key, values in expected.items():
        kept = [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
        kept.sort(key=lambda sv: sv[0])
        values = sorted(values, key=lambda sv: sv[0])
        assert len(kept) == len(values) and all(
            s == t and same_number(a, b) for (s, a), (t, b) in zip(kept, values)), (key, kept, values)
    check_artifacts(client, run_id, url, folder, out)
    return run_id, sum(len(v) for v in expected.values())


def check_artifacts(client, run_id, url, folder, out):
    import mlflow.artifacts
    top = sorted(a.path for a in client.list_artifacts(run_id))
    assert top == ["checkpoints", "report.html"], top
    checkpoints = [a.path for a in client.list_artifacts(run_id, "checkpoints")]
    assert len(checkpoints) == 1 and checkpoints[0].startswith("checkpoints/best_model_"), checkpoints
    for path, local in (("report.html", os.path.join(out, "report.html")),
                        (checkpoints[0], os.path.join(out, os.path.basename(checkpoints[0])))):
        got = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, tracking_uri=url,
                                                  dst_path=os.path.join(folder, "downloaded"))
        with open(got, "rb") as a, open(local, "rb") as b:
            assert a.read() == b.read(), f"artifact {path} differs from {local}"


def check_refused_parameter(client, url, program, run_id, folder):
    before = len(client.get_metric_history(run_id, "test accuracy"))
    rc, output = run_program([program, "--tracking-uri", url, "--epochs", "1", "--limit", "640", "--test-limit",
                              "256", "--lr", "0.07", "--output-path", os.path.join(folder, "out2")],
                             {"MLFLOW_RUN_ID": run_id})
    assert rc == 0, f"mlflow_mnist (resumed, changed lr) exited {rc}:\n{output}"
    assert "Changing param values is not allowed" in output, output
    assert "were not logged to MLflow (run " + run_id + ")" in output, output
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["lr"] == "0.050000", (run.info, run.data.params)
    after = len(client.get_metric_history(run_id, "test accuracy"))
    assert after == before + 1, (before, after)


def check_server_lost(server, url, program, folder):
    env = clean_env()
    worker = subprocess.Popen([program, "--tracking-uri", url, "--backend", "serial", "--epochs", "2", "--limit",
                               "1280", "--test-limit", "512", "--log-every", "1", "--output-path",
                               os.path.join(folder, "out3")],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True)
    try:
        first = ""
        while ": experiment " not in first:  # the line printed once the run exists, before training
            line = worker.stdout.readline()
            if not line:
                break
            first += line
        run_id = run_id_of(first)
        os.killpg(worker.pid, signal.SIGSTOP)  # training waits while the server goes away
        stop(server)
        os.killpg(worker.pid, signal.SIGCONT)
        resumed = time.monotonic()
        rest, _ = worker.communicate(timeout=120)
        took = time.monotonic() - resumed
    finally:
        stop(worker)
    output = first + rest
    assert worker.returncode == 0, f"mlflow_mnist exited {worker.returncode} after the server was lost:\n{output}"
    assert "no answer from " + url in output, output
    assert "were not logged to MLflow (run " + run_id + ")" in output, output
    assert "the run stays RUNNING on the server" in output, output
    assert took < 60, f"the program took {took:.1f} s after the server was lost"
    return took


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", required=True, help="the mlflow_mnist example")
    args = parser.parse_args()
    try:
        from mlflow.tracking import MlflowClient
    except ImportError:
        print("skipped: this python has no mlflow (the 2.15 venv has it: scripts/requirements-torch2.txt)")
        return 77
    folder = tempfile.mkdtemp(prefix="kindling-mlflow-")
    server = None
    try:
        for name in [k for k in os.environ if "proxy" in k.lower()]:
            del os.environ[name]  # the client below talks to loopback
        started = time.monotonic()
        server, url = start_server(folder)
        print(f"mlflow server at {url} answered after {time.monotonic() - started:.1f} s")
        client = MlflowClient(tracking_uri=url)
        run_id, values = check_happy_run(client, url, folder, args.program)
        print(f"run {run_id}: {values} values, params, tags and 2 artifacts equal to what was logged")
        check_refused_parameter(client, url, args.program, run_id, folder)
        print("a changed parameter refused by the server: warned, training went on, metrics appended")
        took = check_server_lost(server, url, args.program, folder)
        print(f"server lost mid-run: the program finished {took:.1f} s after, exit 0, told what was not logged")
        return 0
    finally:
        stop(server)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

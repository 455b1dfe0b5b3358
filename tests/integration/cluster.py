"""A local dapple cluster for integration tests: a real dapple-coordinator and real
dapple-worker processes on 127.0.0.1, driven through the real dapplectl binary.

Every wait has a deadline; every process started is killed on close(), so a failing test never
leaves processes behind or hangs the suite.
"""
import atexit
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import param_io  # noqa: E402  (worker/runtime/param_io.h's format)

BUILD_DIR = os.environ.get("DAPPLE_BUILD_DIR") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
SOURCE_DIR = os.environ.get("DAPPLE_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
COORDINATOR = os.path.join(BUILD_DIR, "coordinator", "dapple-coordinator")
WORKER = os.path.join(BUILD_DIR, "worker", "dapple-worker")
DAPPLECTL = os.path.join(BUILD_DIR, "dapplectl", "dapplectl")
REFERENCE = os.path.join(BUILD_DIR, "tests", "dapple-reference")
# Where scripts/setup puts the datasets: the coordinator's default --data-root folders.
DEFAULT_DATA_ROOTS = ["/usr/share/datasets", "/var/lib/dapple/datasets"]
_data_dir = None


def data_dir():
    """A folder for this process's data files (text corpora, emulation profiles): every Cluster's
    coordinator lets jobs read it (--data-root), as it does the datasets and examples/profiles.
    The cluster folders, which hold the tokens and databases, stay outside."""
    global _data_dir
    if _data_dir is None:
        _data_dir = tempfile.mkdtemp(prefix="dapple-it-data-")
        atexit.register(shutil.rmtree, _data_dir, True)
    return _data_dir


def data_roots():
    return DEFAULT_DATA_ROOTS + [data_dir(),
                                 os.path.abspath(os.path.join(SOURCE_DIR, "examples", "profiles"))]


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


class Cluster:
    def __init__(self, workers=2, worker_timeout_ms=3000, heartbeat_ms=100, dump=False,
                 worker_args=(), coordinator_args=()):
        self.dir = tempfile.mkdtemp(prefix="dapple-it-")
        self.worker_args = list(worker_args)  # extra flags for every worker, e.g. --devices
        self.coordinator_args = list(coordinator_args)  # e.g. --trace-every-steps 3
        if "--data-root" not in self.coordinator_args:
            self.coordinator_args += ["--data-root", ",".join(data_roots())]
        self.db = os.path.join(self.dir, "dapple.db")
        self.worker_timeout_ms = worker_timeout_ms
        self.heartbeat_ms = heartbeat_ms
        self.dump_dir = os.path.join(self.dir, "dump") if dump else None
        if self.dump_dir:
            os.makedirs(self.dump_dir)
        self.coordinator = None
        self.workers = []
        self.address = None
        # Written by the coordinator's first start next to its database (docs/security.md):
        # dapplectl calls carry the admin's token, workers join with the join token.
        self.admin_token_file = os.path.join(self.dir, "admin.token")
        self.join_token_file = os.path.join(self.dir, "join.token")
        self.admin_token = None
        self.start_coordinator()
        for _ in range(workers):
            self.add_worker()

    # -- processes -------------------------------------------------------------------------
    def start_coordinator(self):
        """Starts the coordinator; a restart listens on the same port, so workers find it again."""
        listen = self.address or "127.0.0.1:0"
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.remove(port_file)
        with open(os.path.join(self.dir, "coordinator.log"), "ab") as log:
            self.coordinator = subprocess.Popen(
                [COORDINATOR, "--listen", listen, "--port-file", port_file, "--db", self.db,
                 "--heartbeat-interval-ms", str(self.heartbeat_ms),
                 "--worker-timeout-ms", str(self.worker_timeout_ms)] + self.coordinator_args,
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while time.time() < deadline:
            port = read(port_file).strip() if os.path.exists(port_file) else ""
            if port:
                self.address = "127.0.0.1:%d" % int(port)
                if self.admin_token is None:
                    self.admin_token = read(self.admin_token_file).strip()
                return
            if self.coordinator.poll() is not None:
                raise RuntimeError("coordinator exited: " + self.log("coordinator"))
            time.sleep(0.05)
        raise RuntimeError("coordinator did not write its port in 20 s")

    def stop_coordinator(self):
        self.coordinator.send_signal(signal.SIGTERM)
        self.coordinator.wait(timeout=20)

    def add_worker(self, name=None, log_name=None):
        """Starts a worker; its output goes to worker-<log_name or name>.log (see log())."""
        i = len(self.workers) + 1
        name = name or "it-w%d" % i
        cmd = [WORKER, "--coordinator", self.address, "--name", name, "--transport-timeout-s", "60",
               "--join-token-file", self.join_token_file]
        if self.dump_dir:
            cmd += ["--dump-dir", self.dump_dir]
        cmd += self.worker_args
        with open(os.path.join(self.dir, "worker-%s.log" % (log_name or name)), "ab") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.workers.append((name, p))
        return name, p

    def wait_workers(self, count, state="IDLE", timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            ws = self.workers_json()
            if sum(1 for w in ws if w.get("state", "").endswith(state)) >= count:
                return ws
            time.sleep(0.1)
        raise AssertionError("fewer than %d workers %s after %d s: %s" % (count, state, timeout, self.workers_json()))

    def close(self):
        for _, p in self.workers:
            if p.poll() is None:
                p.kill()
        if self.coordinator and self.coordinator.poll() is None:
            self.coordinator.kill()
        for _, p in self.workers:
            p.wait(timeout=10)
        if self.coordinator:
            self.coordinator.wait(timeout=10)
        if os.environ.get("DAPPLE_KEEP_TEST_DIRS"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def wait_log(self, name, text, timeout=10):
        """Waits until <name>.log contains `text`; returns the seconds it took."""
        start = time.time()
        while time.time() < start + timeout:
            path = os.path.join(self.dir, name + ".log")
            if os.path.exists(path) and text in read(path):
                return time.time() - start
            time.sleep(0.05)
        raise AssertionError("%r not in %s.log after %d s:\n%s" % (text, name, timeout, self.log(name)))

    def log(self, name):
        try:
            return read(os.path.join(self.dir, name + ".log"))[-4000:]
        except OSError:
            return ""

    def all_logs(self):
        out = []
        for f in sorted(os.listdir(self.dir)):
            if f.endswith(".log"):
                out.append("---- %s\n%s" % (f, read(os.path.join(self.dir, f))[-3000:]))
        return "\n".join(out)

    # -- dapplectl -------------------------------------------------------------------------
    def ctl(self, *args, timeout=60, check=True, token=None):
        """Runs dapplectl as the admin (or with `token`; "" for none); returns (exit code,
        stdout, stderr)."""
        env = dict(os.environ, DAPPLE_COORDINATOR=self.address,
                   DAPPLE_TOKEN=self.admin_token if token is None else token)
        if not env["DAPPLE_TOKEN"]:
            del env["DAPPLE_TOKEN"]
        env.pop("DAPPLE_TOKEN_FILE", None)
        r = subprocess.run([DAPPLECTL] + list(args), env=env, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError("dapplectl %s -> %d\nstdout: %s\nstderr: %s" % (
                " ".join(args), r.returncode, r.stdout, r.stderr))
        return r.returncode, r.stdout, r.stderr

    def submit_text(self, yaml_text, name="job.yaml", check=True):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(yaml_text)
        return self.ctl("submit", path, "-o", "json", check=check)

    def submit(self, yaml_text, name="job.yaml"):
        _, out, _ = self.submit_text(yaml_text, name)
        return json.loads(out)["id"]

    def get(self, job):
        _, out, _ = self.ctl("get", job, "-o", "json")
        return json.loads(out)

    def workers_json(self):
        _, out, _ = self.ctl("workers", "-o", "json")
        return json.loads(out).get("workers", [])

    def wait_state(self, job, states, timeout, poll_s=0.1):
        """Polls the job every poll_s seconds until it is in one of `states`. Each poll runs
        dapplectl (about 18 ms of CPU here): benchmarks that time jobs on this small host poll
        once a second or less, so that the poller does not take the CPU from the job it times."""
        deadline = time.time() + timeout
        j = None
        while time.time() < deadline:
            j = self.get(job)
            if j["state"] in states:
                return j
            time.sleep(poll_s)
        raise AssertionError("job %s not in %s after %d s: %s\n%s" % (job, states, timeout, j, self.all_logs()))


def spec_yaml(name, layers, global_batch, micro_batch, stages, schedule="dapple", epochs=1,
              max_steps=0, lr=0.05, momentum=0.9, optimizer="sgd", seed=3, planner="balanced",
              data_path="/usr/share/datasets/fashion-mnist", devices=None, training_extra=()):
    """A job spec; `devices` defaults to `stages` (one replica per stage); a multiple of it gives
    every stage devices / stages replicas; stages 0 writes `stages: auto`. `training_extra`:
    more lines of the training section ("max_grad_norm: 0.5"). `epochs` is raised to cover
    `max_steps` (Fashion-MNIST's 60000 samples / global_batch steps an epoch): the coordinator
    refuses a max_steps the epochs end before."""
    if max_steps > 0:
        per_epoch = 60000 // global_batch
        epochs = max(epochs, -(-max_steps // per_epoch))
    lines = ["name: %s" % name, "model:", "  input_shape: [1, 28, 28]", "  layers:"]
    for t, out in layers:
        lines.append("    - {type: %s%s}" % (t, ", out: %d" % out if out else ""))
    lines += ["data: {dataset: fashion-mnist, path: %s}" % data_path,
              "training:",
              "  global_batch: %d" % global_batch,
              "  micro_batch: %d" % micro_batch,
              "  epochs: %d" % epochs,
              "  max_steps: %d" % max_steps,
              "  optimizer: {type: %s, lr: %g%s}" % (optimizer, lr, ", momentum: %g" % momentum if optimizer == "sgd" else ""),
              "  seed: %d" % seed]
    lines += ["  %s" % line for line in training_extra]
    lines += ["parallel:",
              "  schedule: %s" % schedule,
              "  planner: %s" % planner,
              "  stages: %s" % (stages or "auto"),
              "  devices: %d" % (devices or stages)]
    return "\n".join(lines) + "\n"


SMALL_MLP = [("flatten", 0), ("linear", 64), ("relu", 0), ("linear", 32), ("gelu", 0), ("linear", 10)]


def load_params(path):
    """A worker's --dump-dir file (or dapple-reference's): {name: floats}."""
    return param_io.load_params(path)


def load_job_params(dump_dir, job, stages, replica=None):
    """Every stage's --dump-dir file of `job` merged: {name: floats}. `replica` picks the files
    of that replica of replicated stages (<job>.stage<s>.replica<r>.params)."""
    params = {}
    for s in range(stages):
        suffix = "" if replica is None else ".replica%d" % replica
        params.update(load_params(os.path.join(dump_dir, "%s.stage%d%s.params" % (job, s, suffix))))
    return params


def relative_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num / max(den, 1e-30))


def reference_run(directory, name, global_batch, steps, layers=None, training_extra=()):
    """Trains `steps` steps of SMALL_MLP (or `layers`) on one process (dapple-reference, no
    pipelining; `training_extra` as spec_yaml's); returns (per-step losses, final params)."""
    return reference_run_yaml(directory, name,
                              spec_yaml(name, layers or SMALL_MLP, global_batch, global_batch, 1,
                                        max_steps=steps, training_extra=training_extra), steps)


def reference_run_yaml(directory, name, yaml_text, steps):
    """Trains `steps` steps of the job spec `yaml_text` on one process (dapple-reference: the
    whole global batch at once, no pipelining, whatever its parallel section says); returns
    (per-step losses, final params)."""
    ref_dir = os.path.join(directory, "ref", name)
    os.makedirs(ref_dir, exist_ok=True)
    path = os.path.join(ref_dir, "ref.yaml")
    with open(path, "w") as f:
        f.write(yaml_text)
    subprocess.run([REFERENCE, path, str(steps), ref_dir], check=True, timeout=120)
    with open(os.path.join(ref_dir, "reference.losses")) as f:
        losses = [float(x) for x in f]
    return losses, load_params(os.path.join(ref_dir, "reference.params"))


def check_matches_reference(tc, name, losses, params, ref_losses, ref_params, rtol):
    """unittest asserts: every step's loss and every parameter (relative L2 and max |diff|)
    within `rtol` of the reference, and the same parameter names."""
    tc.assertEqual(len(losses), len(ref_losses), name)
    for step, (got, want) in enumerate(zip(losses, ref_losses), 1):
        tc.assertLessEqual(abs(got - want), rtol * abs(want),
                           "%s step %d loss %.9g vs reference %.9g" % (name, step, got, want))
    tc.assertEqual(sorted(params), sorted(ref_params), name)
    for k, want in ref_params.items():
        got = params[k]
        scale = max(abs(x) for x in want)
        worst = max(abs(x - y) for x, y in zip(got, want))
        tc.assertLessEqual(relative_l2(got, want), rtol, "%s %s" % (name, k))
        tc.assertLessEqual(worst, rtol * scale, "%s %s max |diff| %.3g" % (name, k, worst))

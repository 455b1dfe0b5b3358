"""deploy/local_cluster.sh: start brings up a coordinator and N workers that dapplectl sees, status
reports them, a second start refuses, stop ends every process it started and nothing else.
Every call has a timeout; tearDown stops whatever a failed test left running.
"""
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

SOURCE_DIR = os.path.abspath(os.environ.get("DAPPLE_SOURCE_DIR") or
                             os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.path.abspath(os.environ.get("DAPPLE_BUILD_DIR") or os.path.join(SOURCE_DIR, "build"))
SCRIPT = os.path.join(SOURCE_DIR, "deploy", "local_cluster.sh")
DAPPLECTL = os.path.join(BUILD_DIR, "dapplectl", "dapplectl")


def free_port_run(count):
    """A port p with p..p+count-1 all free on 127.0.0.1 right now."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            socks = []
            for p in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            pass
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of %d free ports" % count)


def pid_alive(pid):
    """True while pid runs (a zombie that only waits to be reaped counts as ended)."""
    try:
        with open("/proc/%d/status" % pid) as f:
            return "State:\tZ" not in f.read()
    except OSError:
        return False


class LocalClusterTest(unittest.TestCase):
    def setUp(self):
        self.run_dir = tempfile.mkdtemp(prefix="dapple-lc-")
        self.pids = []

    def tearDown(self):
        self.script("stop", check=False)
        for pid in self.pids:
            if pid_alive(pid):
                os.kill(pid, 9)
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def script(self, *args, check=True, timeout=90):
        cmd = [SCRIPT] + list(args[:1]) + ["--run-dir", self.run_dir, "--build-dir", BUILD_DIR] + list(args[1:])
        if args[0] in ("stop", "status"):
            cmd = [SCRIPT, args[0], "--run-dir", self.run_dir]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check:
            self.assertEqual(r.returncode, 0, "%s -> %d\n%s%s" % (" ".join(cmd), r.returncode, r.stdout, r.stderr))
        return r

    def recorded_pids(self):
        out = {}
        pid_dir = os.path.join(self.run_dir, "pids")
        for f in os.listdir(pid_dir):
            if f.endswith(".pid"):
                with open(os.path.join(pid_dir, f)) as fh:
                    out[f[:-4]] = int(fh.read().split()[0])
        self.pids += list(out.values())
        return out

    def test_help_is_the_header_comment_only(self):
        r = subprocess.run([SCRIPT, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("deploy/local_cluster.sh stop   [--run-dir DIR]", r.stdout)
        self.assertTrue(r.stdout.rstrip().endswith("2 usage."), r.stdout)
        self.assertNotIn("set -euo pipefail", r.stdout)
        # Misuse prints the same text to stderr and exits 2.
        bad = subprocess.run([SCRIPT], capture_output=True, text=True, timeout=30)
        self.assertEqual(bad.returncode, 2)
        self.assertNotIn("SRC=", bad.stderr)

    def test_start_workers_stop(self):
        r = self.script("start", "-n", "2", "--port", "0", "--metrics-port", "0")
        with open(os.path.join(self.run_dir, "address")) as f:
            address = f.read().strip()
        self.assertIn("export DAPPLE_COORDINATOR=%s" % address, r.stdout)
        self.assertIn("stop", r.stdout)
        pids = self.recorded_pids()
        self.assertEqual(sorted(pids), ["coordinator", "worker-1", "worker-2"])
        for name, pid in pids.items():
            self.assertTrue(pid_alive(pid), name)

        # The admin's token, written next to the database at the first start (docs/security.md).
        self.assertIn("export DAPPLE_TOKEN_FILE=%s/admin.token" % self.run_dir, r.stdout)
        env = dict(os.environ, DAPPLE_TOKEN_FILE=os.path.join(self.run_dir, "admin.token"))
        env.pop("DAPPLE_TOKEN", None)
        w = subprocess.run([DAPPLECTL, "--coordinator", address, "workers", "-o", "json"],
                           capture_output=True, text=True, timeout=20, env=env)
        self.assertEqual(w.returncode, 0, w.stderr)
        workers = json.loads(w.stdout)["workers"]
        self.assertEqual(sorted(x["id"] for x in workers), ["local-w1", "local-w2"])
        self.assertEqual(sorted(x["pid"] for x in workers), sorted([pids["worker-1"], pids["worker-2"]]))
        self.assertTrue(all(x["devices"] == ["cpu"] for x in workers), workers)

        st = self.script("status")
        self.assertEqual(st.stdout.count(" running\n"), 3, st.stdout)

        again = self.script("start", "-n", "1", "--port", "0", check=False)
        self.assertEqual(again.returncode, 1)
        self.assertIn("already runs", again.stderr)

        self.script("stop")
        for name, pid in pids.items():
            self.assertFalse(pid_alive(pid), "%s (pid %d) still runs after stop" % (name, pid))
        self.assertEqual([f for f in os.listdir(os.path.join(self.run_dir, "pids")) if f.endswith(".pid")], [])
        self.assertEqual(self.script("status", check=False).returncode, 1)
        self.assertTrue(os.path.exists(os.path.join(self.run_dir, "coordinator.log")), "logs are kept")

    def test_metrics_ports(self):
        help_text = subprocess.run([os.path.join(BUILD_DIR, "worker", "dapple-worker"), "--help"],
                                   capture_output=True, text=True, timeout=20).stdout
        if "--metrics-port" not in help_text:
            self.skipTest("this build's dapple-worker has no --metrics-port")
        base = free_port_run(3)
        self.script("start", "-n", "2", "--port", "0", "--metrics-port", str(base))
        self.recorded_pids()
        for port in (base, base + 1, base + 2):
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as resp:
                self.assertEqual(resp.status, 200, port)
                self.assertIn("# TYPE", resp.read().decode(), port)
        self.script("stop")

    def test_prometheus_scrapes_every_process(self):
        help_text = subprocess.run([os.path.join(BUILD_DIR, "worker", "dapple-worker"), "--help"],
                                   capture_output=True, text=True, timeout=20).stdout
        if "--metrics-port" not in help_text:
            self.skipTest("this build's dapple-worker has no --metrics-port")
        if not shutil.which("prometheus"):
            self.skipTest("prometheus is not installed (apt-get install prometheus)")
        if not os.path.exists(os.path.join(SOURCE_DIR, "deploy", "prometheus", "prometheus.yml")):
            self.skipTest("deploy/prometheus/prometheus.yml is missing")
        base = free_port_run(3)
        prom = free_port_run(1)
        self.script("start", "-n", "2", "--port", "0", "--metrics-port", str(base),
                    "--prometheus", "--prometheus-port", str(prom))
        self.recorded_pids()
        # Prometheus scrapes a few seconds after it is ready: poll `up` with a deadline.
        # deploy/prometheus/prometheus.yml relabels `instance`: the host alone for the coordinator
        # (one per host), host/port for workers.
        want = {("dapple-coordinator", "127.0.0.1"),
                ("dapple-worker", "127.0.0.1/%d" % (base + 1)), ("dapple-worker", "127.0.0.1/%d" % (base + 2))}
        deadline = time.time() + 40
        up = set()
        while time.time() < deadline:
            with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/query?query=up" % prom, timeout=10) as resp:
                result = json.loads(resp.read())["data"]["result"]
            up = {(r["metric"]["job"], r["metric"]["instance"]) for r in result if r["value"][1] == "1"}
            if want <= up:
                break
            time.sleep(0.5)
        self.assertLessEqual(want, up, "targets up after 40 s: %s" % sorted(up))
        self.script("stop")
        self.assertEqual([f for f in os.listdir(os.path.join(self.run_dir, "pids")) if f.endswith(".pid")], [])

    def test_restart_after_join_token_rotation(self):
        """The token files are written at the first start only. Rotated through the script, the
        next start uses the new token; rotated with dapplectl behind its back, the start fails
        saying which file is stale and what to do; a revoked admin token is named too."""
        self.script("start", "-n", "1", "--port", "0", "--metrics-port", "0")
        self.recorded_pids()
        join_file = os.path.join(self.run_dir, "join.token")
        with open(join_file) as f:
            first = f.read()
        r = self.script("rotate-join-token")
        self.assertIn("rotated the join token", r.stdout)
        with open(join_file) as f:
            second = f.read()
        self.assertNotEqual(first, second)
        self.assertEqual(os.stat(join_file).st_mode & 0o777, 0o600)
        self.script("stop")
        # The restart on the same database: the new join token registers the workers.
        self.script("start", "-n", "2", "--port", "0", "--metrics-port", "0")
        self.recorded_pids()
        # Rotated with dapplectl directly: join.token is stale.
        with open(os.path.join(self.run_dir, "address")) as f:
            address = f.read().strip()
        env = dict(os.environ, DAPPLE_TOKEN_FILE=os.path.join(self.run_dir, "admin.token"))
        env.pop("DAPPLE_TOKEN", None)
        rot = subprocess.run([DAPPLECTL, "--coordinator", address, "admin", "join-token", "rotate"],
                             capture_output=True, text=True, timeout=20, env=env)
        self.assertEqual(rot.returncode, 0, rot.stderr)
        self.script("stop")
        stale = self.script("start", "-n", "1", "--port", "0", "--metrics-port", "0", check=False)
        self.recorded_pids()
        self.assertEqual(stale.returncode, 1, stale.stdout + stale.stderr)
        self.assertIn("the join token in %s was refused" % join_file, stale.stderr)
        self.assertIn("--join-token-file", stale.stderr)
        # Given the current token, it starts.
        current = os.path.join(self.run_dir, "current.token")
        with open(current, "w") as f:
            f.write(rot.stdout)
        self.script("start", "-n", "1", "--port", "0", "--metrics-port", "0",
                    "--join-token-file", current)
        self.recorded_pids()
        self.script("stop")
        # A refused admin token is named as such.
        bad = os.path.join(self.run_dir, "bad-admin.token")
        with open(bad, "w") as f:
            f.write("dpl_0000000000000000_notatoken\n")
        r = self.script("start", "-n", "1", "--port", "0", "--metrics-port", "0",
                        "--join-token-file", current, "--admin-token-file", bad, check=False)
        self.recorded_pids()
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("the admin token in %s was refused" % bad, r.stderr)

    def test_missing_build_refused(self):
        r = subprocess.run([SCRIPT, "start", "--run-dir", self.run_dir, "--build-dir", self.run_dir + "/nope"],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 1)
        self.assertIn("is missing: build it first", r.stderr)
        # Usage errors exit 2, as the script's header says; `start --help` is help, exit 0.
        r = subprocess.run([SCRIPT, "start", "-n", "two"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)
        self.assertIn("-n needs a number", r.stderr)
        r = subprocess.run([SCRIPT, "start", "--help"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("--prometheus-port PORT", r.stdout)
        r = subprocess.run([SCRIPT, "restart"], capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()

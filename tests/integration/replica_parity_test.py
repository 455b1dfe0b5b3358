"""Stage replicas end to end (DAPPLE's split-concat + gradient AllReduce over Gloo): a real
coordinator and 4 real worker processes on 127.0.0.1.

- Parity: schedule dapple with P=2, D=2 (4 workers) and P=1, D=2 (planner dp) train exactly like
  one process on the full global batch (dapple-reference): per-step loss and final weights within
  1e-5 relative; the replicas of a stage dump bitwise-identical weights; every rank's traced steps
  hold exactly one ALLREDUCE (`dapplectl trace`).
- A dead replica: killing one replica's worker mid-job fails the job, naming that rank, within a
  bounded time (no hang).
- Gradient clipping and a learning-rate schedule over P=2, D=2: every rank joins the job-wide
  Gloo group through the coordinator's store, runs one GLOBAL_NORM per step, and the job still
  trains exactly like dapple-reference with the same settings.
- The zero-bubble schedules zb-h1 and zb-h2 (BACKWARD_INPUT / BACKWARD_WEIGHT) over P=2, D=2 train
  exactly like dapple-reference too, and every rank's trace holds one W per micro-batch.
- Interleaved 1F1B (P=2, v=2 model chunks per stage, planned by the coordinator) with M=4 on
  D=2 and M=5 on D=1 trains exactly like dapple-reference.
"""
import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 3
GLOBAL_BATCH = 64
RTOL = 1e-5
# A killed replica must fail the job within this (heartbeat timeout 3 s, plus reporting).
FAIL_WITHIN_S = 30
# Clipping well inside the MLP's first gradient norms, and a schedule that warms up and decays
# within the run.
CLIPPED = ("max_grad_norm: 0.3", "lr_schedule: {warmup_steps: 2, decay: cosine, min_lr: 0.005, "
           "decay_steps: 3}")


class ReplicaParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = cluster.Cluster(workers=4, dump=True,
                                      coordinator_args=["--trace-every-steps", "1"])
        cls.cluster.wait_workers(4)
        cls.ref_losses, cls.ref_params = cluster.reference_run(cls.cluster.dir, "replica-ref",
                                                               GLOBAL_BATCH, STEPS)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def run_job(self, name, stages, devices, micro_batches, planner, training_extra=(),
                schedule="dapple"):
        c = self.cluster
        c.wait_workers(4)  # the previous job's ranks are idle again
        job = c.submit(cluster.spec_yaml(name, cluster.SMALL_MLP, GLOBAL_BATCH,
                                         GLOBAL_BATCH // micro_batches, stages, max_steps=STEPS,
                                         planner=planner, devices=devices,
                                         training_extra=training_extra, schedule=schedule))
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=180)
        self.assertEqual(j["state"], "SUCCEEDED", "%s: %s\n%s" % (name, j.get("message"),
                                                                  c.all_logs()))
        return job, j

    def check_parity(self, name, job, j, stages, replicas, ref=None):
        c = self.cluster
        ref_losses, ref_params = ref or (self.ref_losses, self.ref_params)
        plan = j["plan"]
        self.assertEqual(len(plan["stages"]), stages)
        for s in plan["stages"]:
            self.assertEqual(s["replicas"], replicas, plan)
            self.assertEqual(len(s["worker_ids"]), replicas, plan)
        self.assertEqual(len(set(j["worker_ids"])), stages * replicas)
        for r in range(replicas):
            params = cluster.load_job_params(c.dump_dir, job, stages, replica=r)
            cluster.check_matches_reference(self, "%s replica %d" % (name, r), j["step_losses"],
                                            params, ref_losses, ref_params, RTOL)
        # The replicas of a stage hold bitwise-identical weights.
        for s in range(stages):
            files = [os.path.join(c.dump_dir, "%s.stage%d.replica%d.params" % (job, s, r))
                     for r in range(replicas)]
            blobs = []
            for path in files:
                with open(path, "rb") as f:
                    blobs.append(f.read())
            for r, blob in enumerate(blobs[1:], 1):
                self.assertEqual(blob, blobs[0], "%s stage %d replica %d differs from replica 0" %
                                 (name, s, r))

    def trace_events(self, job):
        c = self.cluster
        path = os.path.join(c.dir, "trace-%s.json" % job)
        c.ctl("trace", job, "-o", path)
        with open(path) as f:
            trace = json.load(f)
        return trace, [e for e in trace["traceEvents"] if e["ph"] == "X"]

    def check_allreduce_once_per_step(self, name, job, stages, replicas, collectives=2):
        """Per rank and step, `collectives` actions of the allreduce category: the replicas'
        ALLREDUCE, then GLOBAL_NORM (every synchronous program: the step's non-finite decision
        and, with clipping, its norm)."""
        trace, events = self.trace_events(job)
        steps = trace["metadata"]["traced_steps"]
        self.assertEqual(steps, list(range(1, STEPS + 1)), name)
        for s in range(stages):
            for r in range(replicas):
                for step in steps:
                    mine = [e for e in events if e["pid"] == s + 1 and e["tid"] == r + 1 and
                            e["args"].get("step") == step]
                    self.assertTrue(mine, "%s: no trace of stage %d replica %d step %d" %
                                    (name, s, r, step))
                    allreduces = [e for e in mine if e["cat"] == "allreduce"]
                    self.assertEqual(len(allreduces), collectives,
                                     "%s stage %d replica %d step %d: %s" %
                                     (name, s, r, step, [e["name"] for e in allreduces]))

    def test_1_pipeline_of_replicated_stages(self):
        name = "replicas-dapple-p2-d2"
        job, j = self.run_job(name, stages=2, devices=4, micro_batches=4, planner="balanced")
        self.check_parity(name, job, j, stages=2, replicas=2)
        self.check_allreduce_once_per_step(name, job, stages=2, replicas=2)

    def test_2_data_parallel(self):
        name = "replicas-dapple-p1-d2"
        job, j = self.run_job(name, stages=0, devices=2, micro_batches=2, planner="dp")
        self.check_parity(name, job, j, stages=1, replicas=2)
        self.check_allreduce_once_per_step(name, job, stages=1, replicas=2)

    def test_3_clipping_and_schedule_over_processes(self):
        name = "replicas-clipped-p2-d2"
        ref = cluster.reference_run(self.cluster.dir, "replica-clipped-ref", GLOBAL_BATCH, STEPS,
                                    training_extra=CLIPPED)
        job, j = self.run_job(name, stages=2, devices=4, micro_batches=4, planner="balanced",
                              training_extra=CLIPPED)
        self.check_parity(name, job, j, stages=2, replicas=2, ref=ref)
        # Per rank and step: ALLREDUCE then GLOBAL_NORM (both in the allreduce category).
        self.check_allreduce_once_per_step(name, job, stages=2, replicas=2)
        _, events = self.trace_events(job)
        norms = [e for e in events if e["name"] == "GLOBAL_NORM"]
        self.assertEqual(len(norms), 2 * 2 * STEPS, name)
        # Clipping acted: step 1's global norm (the stages' replica 0) exceeds max_grad_norm, and
        # each rank reports the schedule's rate (warm-up: half of lr at step 1).
        steps = [e for e in events if e["cat"] == "step" and e["args"].get("step") == 1]
        total = sum(e["args"]["gradient_sq_norm"] for e in steps if e["tid"] == 1)
        self.assertGreater(total ** 0.5, 0.3, name)
        for e in steps:
            self.assertAlmostEqual(e["args"]["learning_rate"], 0.025, places=9)

    def test_3b_zero_bubble_schedules(self):  # before test_4 kills a worker
        for schedule in ("zb-h1", "zb-h2"):
            name = "replicas-%s-p2-d2" % schedule
            job, j = self.run_job(name, stages=2, devices=4, micro_batches=4, planner="balanced",
                                  schedule=schedule)
            self.assertEqual(j["plan"]["schedule"], schedule)
            self.check_parity(name, job, j, stages=2, replicas=2)
            self.check_allreduce_once_per_step(name, job, stages=2, replicas=2)
            _, events = self.trace_events(job)
            weights = [e for e in events if e["name"].startswith("W")]
            self.assertEqual(len(weights), 2 * 2 * STEPS * 4, name)

    def test_3c_interleaved(self):  # before test_4 kills a worker
        """Interleaved 1F1B, P = 2 stages of v = 2 model chunks each (4 virtual stages of
        SMALL_MLP's 6 layers), planned by the coordinator: M = 4 on D = 2 replicas per stage,
        and M = 5 (not a multiple of P) on one."""
        c = self.cluster
        for micro_batches, replicas in ((4, 2), (5, 1)):
            name = "interleaved-p2-v2-m%d-d%d" % (micro_batches, replicas)
            global_batch = 16 * micro_batches
            ref = None
            if global_batch != GLOBAL_BATCH:
                ref = cluster.reference_run(c.dir, "%s-ref" % name, global_batch, STEPS)
            c.wait_workers(4)
            job = c.submit(cluster.spec_yaml(name, cluster.SMALL_MLP, global_batch, 16, 2,
                                             max_steps=STEPS, planner="balanced",
                                             devices=2 * replicas, schedule="interleaved") +
                           "  interleave: 2\n")
            j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=180)
            self.assertEqual(j["state"], "SUCCEEDED", "%s: %s\n%s" % (name, j.get("message"),
                                                                      c.all_logs()))
            plan = j["plan"]
            self.assertEqual(plan["schedule"], "interleaved", plan)
            # Rank r holds virtual stages r and r + 2: 4 contiguous ranges over the 6 layers.
            chunks = [s["chunks"] for s in plan["stages"]]
            self.assertEqual([len(x) for x in chunks], [2, 2], plan)
            order = [chunks[k % 2][k // 2] for k in range(4)]
            # (JSON leaves out a field at 0.)
            first = [r.get("first_layer", 0) for r in order]
            last = [r.get("last_layer", 0) for r in order]
            self.assertEqual(first[0], 0, plan)
            self.assertEqual(first[1:], [x + 1 for x in last[:-1]], plan)
            self.assertEqual(last[-1], len(cluster.SMALL_MLP) - 1, plan)
            if replicas > 1:
                self.check_parity(name, job, j, stages=2, replicas=replicas, ref=ref)
            else:  # one replica per stage: <job>.stage<s>.params
                cluster.check_matches_reference(
                    self, name, j["step_losses"], cluster.load_job_params(c.dump_dir, job, 2),
                    *(ref or (self.ref_losses, self.ref_params)), RTOL)
            # The programs' actions name the virtual stages: each rank ran both of its chunks.
            _, events = self.trace_events(job)
            forwards = [e for e in events if e["name"].startswith("F")]
            self.assertEqual(len(forwards), 2 * replicas * STEPS * micro_batches * 2, name)

    def test_3d_pipesgd_loss_is_the_batchs(self):
        """Pipe-SGD's replicas reduce gradients only and each report the loss of their own share;
        the coordinator combines them, so step 1 (the initial weights on the first batch) reads
        the single process's loss (a user's D = 2 run read one replica's share instead)."""
        job, j = self.run_job("pipesgd-loss", 1, 2, 1, "dp", schedule="pipesgd")
        self.assertEqual(j["plan"]["stages"][0]["replicas"], 2, j["plan"])
        got, want = float(j["step_losses"][0]), self.ref_losses[0]
        self.assertLessEqual(abs(got - want), RTOL * abs(want), "%s: %r vs %r" % (job, got, want))

    def running_past(self, job, step, timeout=60):
        """Waits until `job` RUNS past `step`; returns it."""
        c = self.cluster
        deadline = time.time() + timeout
        j = c.get(job)
        while time.time() < deadline and not (j["state"] == "RUNNING" and
                                              int(j.get("metrics", {}).get("step", 0)) >= step):
            self.assertNotIn(j["state"], ("SUCCEEDED", "FAILED", "CANCELLED"), j)
            time.sleep(0.1)
            j = c.get(job)
        self.assertEqual(j["state"], "RUNNING", j)
        return j

    def test_4_dead_replica_fails_the_job_naming_it(self):
        c = self.cluster
        c.wait_workers(4)
        job = c.submit(cluster.spec_yaml("replicas-kill", cluster.SMALL_MLP, GLOBAL_BATCH, 16, 2,
                                         max_steps=100000, devices=4))
        j = self.running_past(job, 3)
        victim = j["plan"]["stages"][1]["worker_ids"][1]  # stage 1 replica 1
        procs = dict(c.workers)
        self.assertIn(victim, procs)
        killed = time.time()
        procs[victim].kill()
        j = c.wait_state(job, ("FAILED", "SUCCEEDED", "CANCELLED"), timeout=FAIL_WITHIN_S)
        took = time.time() - killed
        self.assertEqual(j["state"], "FAILED", j)
        message = j.get("message", "")
        self.assertTrue("stage 1 replica 1" in message or victim in message,
                        "the failure does not name stage 1 replica 1 (%s): %s\n%s" %
                        (victim, message, c.all_logs()))
        self.assertLess(took, FAIL_WITHIN_S)
        print("%s failed %.1f s after its stage 1 replica 1 was killed: %s" % (job, took, message))

    def test_5_dead_pipesgd_replica_is_named(self):
        """Pipe-SGD's AllReduce runs beside the rank: a dead replica's peer reports the failure
        in the action that starts the next one; the message names the lost replica, as dapple's
        AllReduce does (it gave only Gloo's socket error)."""
        c = self.cluster
        c.wait_workers(2)
        job = c.submit(cluster.spec_yaml("pipesgd-kill", cluster.SMALL_MLP, GLOBAL_BATCH, 16, 1,
                                         schedule="pipesgd", max_steps=100000, devices=2))
        j = self.running_past(job, 3)
        victim = j["plan"]["stages"][0]["worker_ids"][1]  # stage 0 replica 1
        dict(c.workers)[victim].kill()
        j = c.wait_state(job, ("FAILED", "SUCCEEDED", "CANCELLED"), timeout=FAIL_WITHIN_S)
        self.assertEqual(j["state"], "FAILED", j)
        message = j.get("message", "")
        self.assertIn(victim, message, "%s\n%s" % (message, c.all_logs()))
        print("%s: %s" % (job, message))

if __name__ == "__main__":
    unittest.main()

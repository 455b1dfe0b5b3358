"""Automatic restarts (training.restart; coordinator/jobs/restart_policy.h) on real processes:
a real coordinator and real workers on 127.0.0.1, workers SIGKILLed with os.kill.

- Chaos: a synchronous job (dapple, 2 stages x 2 replicas, STEPS small steps of an MLP
  784-64-32-10, global batch 1024 in 16 micro-batches, a checkpoint every CKPT steps) loses a worker three times at seeded random
  steps; a replacement worker starts after each restart. The job SUCCEEDS under its one id with 3 restarts, and every step's
  loss equals the uninterrupted single-process run's (dapple-reference) within 1e-5 relative:
  no step lost, none applied twice.
- Elastic: one worker killed, none started: the job is planned again on the remaining workers
  (fewer ranks), continues, and its losses still equal the uninterrupted run's. The recovery
  time (the kill to the first step after the restart) is printed.
- Bounds: with the policy exhausted the job FAILS saying so; with no worker left it FAILS after
  wait_for_workers_seconds saying why; both within a bounded time.

Recovery time alone: `python3 tests/integration/restart_test.py -v RestartTest.test_elastic`
prints "recovery: ...".
"""
import json
import os
import random
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 300
CKPT = 8
# A large batch of a small model: a step takes milliseconds, so that the kills land at the steps
# they aim at, and the losses still match the reference's to 1e-5 (a wide model's drift more).
GLOBAL_BATCH = 1024
MICRO_BATCH = 64
EPOCHS = 6  # 58 steps per epoch
# At lr 0.05 this job's uninterrupted distributed run itself drifts from dapple-reference by up to
# 1% after 250 steps (chaotic: fp32 sums in another order); at 0.01 by 1e-7 at most.
LR = 0.01
LAYERS = cluster.SMALL_MLP
RTOL = 1e-5
SEED = 17
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def restart_spec(name, steps, max_restarts=5, devices=4, wait_s=30, backoff_s=0.5):
    return cluster.spec_yaml(
        name, LAYERS, GLOBAL_BATCH, MICRO_BATCH, 2, max_steps=steps, devices=devices, epochs=EPOCHS, lr=LR,
        training_extra=("checkpoint_every_steps: %d" % CKPT,
                        "restart: {max_restarts: %d, backoff_seconds: %g, max_backoff_seconds: 2, "
                        "wait_for_workers_seconds: %g}" % (max_restarts, backoff_s, wait_s)))


class RestartTest(unittest.TestCase):
    def setUp(self):
        self.c = cluster.Cluster(workers=4, worker_timeout_ms=2000)
        self.c.wait_workers(4)

    def tearDown(self):
        self.c.close()

    def proc(self, worker_id):
        for name, p in self.c.workers:
            if name == worker_id:
                return p
        raise AssertionError("no worker process named %s" % worker_id)

    def wait_running_at(self, job, step, timeout=120):
        """Waits until the job RUNS past `step`; returns the job."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.c.get(job)
            self.assertNotIn(j["state"], TERMINAL, "%s ended early: %s" % (job, j.get("message")))
            if j["state"] == "RUNNING" and int(j["metrics"].get("step", 0)) >= step:
                return j
            time.sleep(0.05)
        raise AssertionError("job %s not past step %d in %d s" % (job, step, timeout))

    def kill_rank(self, j, rng):
        victim = rng.choice(j["worker_ids"])
        os.kill(self.proc(victim).pid, signal.SIGKILL)
        return victim, time.time()

    def recovery_seconds(self, job, restarts, killed_at, timeout=60):
        """Seconds from the kill until the job reported a step after its restart number
        `restarts` resumed."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.c.get(job)
            self.assertNotIn(j["state"], ("FAILED", "CANCELLED"), j.get("message"))
            history = j.get("restart_history", [])
            if j["state"] == "SUCCEEDED":
                return time.time() - killed_at
            if (len(history) >= restarts and int(history[restarts - 1].get("resumed_unix_ms", 0)) > 0
                    and j["state"] == "RUNNING"
                    and int(j["metrics"].get("step", 0)) > int(history[restarts - 1].get("resumed_after_step", 0))):
                return time.time() - killed_at
            time.sleep(0.02)
        raise AssertionError("job %s did not run a step after restart %d in %d s" % (job, restarts, timeout))

    def expect_reference_losses(self, j, name):
        ref_losses, _ = cluster.reference_run_yaml(
            self.c.dir, name + "-ref",
            cluster.spec_yaml(name + "-ref", LAYERS, GLOBAL_BATCH, GLOBAL_BATCH, 1, epochs=EPOCHS,
                              max_steps=STEPS, lr=LR), STEPS)
        losses = [float(v) for v in j.get("step_losses", [])]
        self.assertEqual(len(losses), STEPS)
        for step, (got, want) in enumerate(zip(losses, ref_losses), 1):
            self.assertLessEqual(abs(got - want), RTOL * abs(want),
                                 "%s step %d loss %.9g vs uninterrupted %.9g" % (name, step, got, want))

    def test_chaos(self):
        rng = random.Random(SEED)
        job = self.c.submit(restart_spec("chaos", STEPS))
        recoveries = []
        resumed = 0
        for n in range(1, 4):
            # A seeded random moment: 10..50 steps after the previous restart resumed.
            j = self.wait_running_at(job, resumed + rng.randint(10, 50))
            self.assertEqual(int(j.get("restarts", 0)), n - 1)
            victim, killed_at = self.kill_rank(j, rng)
            print("chaos: killed %s after step %s" % (victim, j["metrics"]["step"]), flush=True)
            recoveries.append(self.recovery_seconds(job, n, killed_at))
            self.c.add_worker(name="it-r%d" % n)  # the replacement, started later
            resumed = int(self.c.get(job)["restart_history"][n - 1].get("resumed_after_step", 0))
        j = self.c.wait_state(job, TERMINAL, timeout=240)
        self.assertEqual(j["state"], "SUCCEEDED", "%s\n%s" % (j.get("message"), self.c.all_logs()))
        self.assertEqual(int(j.get("restarts", 0)), 3)
        self.assertEqual(j["id"], job)
        redone = sum(int(r.get("steps_redone", 0)) for r in j["restart_history"])
        self.assertEqual(int(j.get("steps_redone", 0)), redone)
        for r in j["restart_history"]:
            self.assertEqual(int(r.get("resumed_after_step", 0)) % CKPT, 0)
            # Only the steps after the newest published checkpoint run again.
            self.assertLess(int(r.get("steps_redone", 0)), 3 * CKPT, r)
        print("chaos: restarts %s, steps redone %d, recovery %s s" % (
            [(r["cause"], r["failed_after_step"], r.get("resumed_after_step", 0)) for r in j["restart_history"]],
            redone, ["%.2f" % s for s in recoveries]), flush=True)
        self.expect_reference_losses(j, "chaos")
        described = self.c.ctl("describe", job)[1]
        for reason in ("Restarting", "Replanned", "Resumed"):
            self.assertIn(reason, described)

    def test_elastic(self):
        job = self.c.submit(restart_spec("elastic", STEPS))
        j = self.wait_running_at(job, STEPS // 3)
        self.assertEqual(len(j["worker_ids"]), 4)
        victim, killed_at = self.kill_rank(j, random.Random(SEED))
        recovery = self.recovery_seconds(job, 1, killed_at)
        print("recovery: %.2f s from the SIGKILL to the first step after the restart "
              "(MLP 784-64-32-10, global batch 1024, M = 16, heartbeat 100 ms, worker timeout 2 s, backoff 0.5 s)" % recovery, flush=True)
        j = self.c.wait_state(job, TERMINAL, timeout=240)
        self.assertEqual(j["state"], "SUCCEEDED", "%s\n%s" % (j.get("message"), self.c.all_logs()))
        self.assertEqual(int(j.get("restarts", 0)), 1)
        self.assertLess(len(j["worker_ids"]), 4)
        self.assertNotIn(victim, j["worker_ids"])
        self.expect_reference_losses(j, "elastic")
        out = self.c.ctl("get", job)[1]
        self.assertIn("RESTARTS", out)
        # The trace is the resumed run's: its ranks (the new layout's), its steps, the first one
        # included; none of the failed run's 4 ranks.
        path = os.path.join(self.c.dir, "elastic-trace.json")
        self.c.ctl("trace", job, "-o", path)
        with open(path) as f:
            meta = json.load(f)["metadata"]
        resumed = int(j["restart_history"][0].get("resumed_after_step", 0))
        self.assertEqual(meta["ranks"], len(j["worker_ids"]), meta)
        self.assertEqual(min(meta["traced_steps"]), resumed + 1, meta)

    def test_resumed_job_restarts_from_its_checkpoint(self):
        """A job submitted with --resume-from that published nothing since restarts from that
        checkpoint (a new user's restart threw the 600 resumed steps away, starting from 0)."""
        first = self.c.submit(cluster.spec_yaml(
            "first", LAYERS, GLOBAL_BATCH, MICRO_BATCH, 2, max_steps=2 * CKPT, epochs=EPOCHS,
            lr=LR, training_extra=("checkpoint_every_steps: %d" % CKPT,)))
        j = self.c.wait_state(first, TERMINAL, timeout=120)
        self.assertEqual(j["state"], "SUCCEEDED", j.get("message"))
        newest = j["checkpoints"][-1]["path"]
        path = os.path.join(self.c.dir, "resumed.yaml")
        with open(path, "w") as f:
            f.write(cluster.spec_yaml(
                "resumed", LAYERS, GLOBAL_BATCH, MICRO_BATCH, 2, max_steps=STEPS, devices=4,
                epochs=EPOCHS, lr=LR,
                training_extra=("restart: {max_restarts: 1, backoff_seconds: 0.5}",)))
        job = json.loads(self.c.ctl("submit", path, "--resume-from", newest, "-o", "json")[1])["id"]
        j = self.wait_running_at(job, 2 * CKPT + 10)
        _, killed_at = self.kill_rank(j, random.Random(SEED))
        self.recovery_seconds(job, 1, killed_at)
        j = self.c.wait_state(job, TERMINAL, timeout=240)
        self.assertEqual(j["state"], "SUCCEEDED", "%s\n%s" % (j.get("message"), self.c.all_logs()))
        restart = j["restart_history"][0]
        self.assertEqual(int(restart.get("resumed_after_step", 0)), 2 * CKPT, restart)
        self.assertEqual(restart.get("checkpoint"), newest, restart)

    def test_policy_exhausted(self):
        job = self.c.submit(restart_spec("exhausted", 900, max_restarts=1, devices=2))
        j = self.wait_running_at(job, 5)
        rng = random.Random(SEED)
        self.kill_rank(j, rng)
        self.recovery_seconds(job, 1, time.time())
        j = self.wait_running_at(job, int(j["metrics"]["step"]))
        _, killed_at = self.kill_rank(j, rng)
        j = self.c.wait_state(job, TERMINAL, timeout=30)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn("restart policy exhausted: 1 of 1 restarts used", j["message"])
        self.assertLess(time.time() - killed_at, 15)

    def test_no_workers(self):
        job = self.c.submit(restart_spec("no-workers", 900, devices=4, wait_s=3))
        j = self.wait_running_at(job, 5)
        for w in j["worker_ids"]:
            os.kill(self.proc(w).pid, signal.SIGKILL)
        killed_at = time.time()
        j = self.c.wait_state(job, TERMINAL, timeout=30)
        self.assertEqual(j["state"], "FAILED")
        self.assertIn("no usable worker for 3 s", j["message"])
        # ... after what it was restarting from (a lost worker), not the wait alone.
        self.assertTrue(j["message"].startswith("restarting after: "), j["message"])
        self.assertLess(time.time() - killed_at, 15)
        # Nothing left running: every worker process is gone.
        self.assertTrue(all(p.poll() is not None for _, p in self.c.workers))


if __name__ == "__main__":
    unittest.main()

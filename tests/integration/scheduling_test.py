"""Scheduling a shared cluster on real processes (issue 16; docs/scheduling.md): a real
coordinator, 4 real workers on 127.0.0.1, tenants, users and tokens made with `dapplectl admin`,
jobs submitted with the users' own tokens.

- Reclaim: tenant b borrows tenant a's idle quota (a 4-device job on b's nominal 2); when a
  submits, b's job is checkpointed, stopped and queued again within a bounded time, a's job runs,
  then b's job resumes from its checkpoint by itself and its every step's loss equals an
  uninterrupted single-process run's (dapple-reference) within 1e-5 relative.
- Priority: within one tenant a higher-priority job preempts a lower one through the same
  checkpoint-and-requeue path; the lower one resumes and trains exactly.
- A coordinator SIGKILLed while a reclaim is under way: the borrower is preempted once, from a
  checkpoint, and resumes exactly.
- No head-of-line blocking, no partial start: a job that does not fit the free devices waits
  (WaitingForDevices, shown by `dapplectl get`) holding no worker, and a smaller one submitted
  after it starts.
- No starvation of a big job: once a 4-device job has waited --starvation-after-s, the devices
  that come free are held for it; small jobs submitted after that wait for it, though each of
  them would fit a freed device.
"""
import json
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

GLOBAL_BATCH = 1024
MICRO_BATCH = 64
LR = 0.01
EPOCHS = 6
CKPT = 8
RTOL = 1e-5
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
# From a quota's holder submitting to the borrower's job stopping: the checkpoint a few steps
# ahead plus the stop; generous for a loaded 2-core machine.
RECLAIM_BOUND_S = 60
# Jobs that must still be running when a preemption or a freed device reaches them, however fast
# the machine steps (a step of SMALL_MLP takes 3 ms on a quiet 2-core machine): they would train
# for LONG_EPOCHS and are cancelled by the test once they showed what it checks. Their first
# steps equal a reference run's of the same epochs (the sample order is a function of seed and
# epoch; the learning rate is constant).
LONG_EPOCHS = 2000
LONG_STEPS = 100000
# --starvation-after-s of the starvation scenario.
STARVATION_S = 2


def job_spec(name, steps, devices, priority=None, stages=2, epochs=EPOCHS):
    text = cluster.spec_yaml(name, cluster.SMALL_MLP, GLOBAL_BATCH, MICRO_BATCH, stages,
                             max_steps=steps, devices=devices, epochs=epochs, lr=LR,
                             training_extra=("checkpoint_every_steps: %d" % CKPT,))
    # Quotas are per device type as the job names it (docs/scheduling.md).
    text += "  device_type: cpu\n"
    if priority is not None:
        text += "priority: %d\n" % priority
    return text


class SchedulingTest(unittest.TestCase):
    def setUp(self, coordinator_args=()):
        self.c = cluster.Cluster(workers=4, worker_timeout_ms=3000,
                                 coordinator_args=coordinator_args)
        self.c.wait_workers(4)
        self.tokens = {}

    def tearDown(self):
        self.c.close()

    # -- helpers -----------------------------------------------------------------------------
    def tenant(self, name, *quota):
        self.c.ctl("admin", "tenant", "create", name, *quota)

    def user(self, name, tenant):
        self.c.ctl("admin", "user", "create", name, "--tenant", tenant)
        _, out, _ = self.c.ctl("admin", "token", "issue", name)
        self.tokens[name] = out.strip()

    def submit_as(self, user, text, name):
        path = os.path.join(self.c.dir, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        _, out, _ = self.c.ctl("submit", path, "-o", "json", token=self.tokens[user])
        return json.loads(out)["id"]

    def wait_running_at(self, job, step, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.c.get(job)
            self.assertNotIn(j["state"], TERMINAL, "%s ended early: %s" % (job, j.get("message")))
            if j["state"] == "RUNNING":
                # All or nothing: a running job holds every rank of its plan.
                self.assertEqual(len(j.get("worker_ids", [])), int(j["spec"]["parallel"]["devices"]))
                if int(j["metrics"].get("step", 0)) >= step:
                    return j
            time.sleep(0.05)
        raise AssertionError("job %s not past step %d in %d s:\n%s" % (job, step, timeout, self.c.all_logs()))

    def expect_uninterrupted_losses(self, j, name, steps, epochs=EPOCHS):
        """The job's first `steps` losses equal an uninterrupted single-process run's."""
        ref_losses, _ = cluster.reference_run_yaml(
            self.c.dir, name + "-ref",
            cluster.spec_yaml(name + "-ref", cluster.SMALL_MLP, GLOBAL_BATCH, GLOBAL_BATCH, 1,
                              epochs=epochs, max_steps=steps, lr=LR), steps)
        losses = [float(v) for v in j.get("step_losses", [])]
        self.assertGreaterEqual(len(losses), steps)
        for step, (got, want) in enumerate(zip(losses[:steps], ref_losses), 1):
            self.assertLessEqual(abs(got - want), RTOL * abs(want),
                                 "%s step %d loss %.9g vs uninterrupted %.9g" % (name, step, got, want))

    def cancel_after(self, job, step, user):
        """Waits until the (resumed) long job `job` is past `step`, cancels it, returns it."""
        self.wait_running_at(job, step, timeout=300)
        self.c.ctl("cancel", job, token=self.tokens[user])
        j = self.c.wait_state(job, TERMINAL, timeout=60)
        self.assertEqual(j["state"], "CANCELLED", j.get("message"))
        return j

    def wait_preempted(self, job, since, bound):
        deadline = since + bound
        while time.time() < deadline:
            j = self.c.get(job)
            if int(j.get("preemptions", 0)) >= 1:
                return j, time.time() - since
            time.sleep(0.05)
        raise AssertionError("job %s not preempted %d s after:\n%s" % (job, bound, self.c.all_logs()))

    def start_borrower(self):
        """Tenants team-a (alice) and team-b (bob) of cohort research, 2 cpus each; bob's long
        4-device job borrows team-a's idle 2 and is running past two checkpoints. Its id."""
        self.tenant("team-a", "--cohort", "research", "--nominal", "cpu=2")
        self.tenant("team-b", "--cohort", "research", "--nominal", "cpu=2")
        self.user("alice", "team-a")
        self.user("bob", "team-b")
        borrower = self.submit_as("bob", job_spec("borrower", LONG_STEPS, devices=4,
                                                  epochs=LONG_EPOCHS), "borrower")
        self.wait_running_at(borrower, 2 * CKPT + 2)
        return borrower

    # -- scenarios ---------------------------------------------------------------------------
    def test_reclaim_resumes_exactly(self):
        borrower = self.start_borrower()
        submitted = time.time()
        lender = self.submit_as("alice", job_spec("lender", 24, devices=2), "lender")
        j, took = self.wait_preempted(borrower, submitted, RECLAIM_BOUND_S)
        print("reclaim: borrower preempted %.2f s after the lender's submit" % took, flush=True)
        self.assertIn("reclaim", j.get("last_preemption", ""))
        a = self.c.wait_state(lender, TERMINAL, timeout=180)
        self.assertEqual(a["state"], "SUCCEEDED", a.get("message"))
        # Resumed by itself from its checkpoint; past the preemption it trains exactly.
        checked = int(j["metrics"].get("step", 0)) + 2 * CKPT
        b = self.cancel_after(borrower, checked, "bob")
        self.assertEqual(int(b.get("preemptions", 0)), 1)
        self.expect_uninterrupted_losses(b, "borrower", checked, epochs=LONG_EPOCHS)
        described = self.c.ctl("describe", borrower, token=self.tokens["bob"])[1]
        self.assertIn("Preempted", described)
        # Isolation on the way: alice cannot read bob's job.
        code, _, err = self.c.ctl("get", borrower, token=self.tokens["alice"], check=False)
        self.assertEqual(code, 7, err)

    def test_a_coordinator_restart_during_a_reclaim_loses_no_work(self):
        """The coordinator is SIGKILLed as soon as a reclaim began (the borrower asked for a
        checkpoint) and restarted: the borrower is preempted once, from a checkpoint (not from
        scratch, not from a step its ranks were past), and resumes exactly. A user's borrower
        was preempted again after the restart from its row's stale step and resumed from
        scratch."""
        borrower = self.start_borrower()
        lender = self.submit_as("alice", job_spec("lender", 24, devices=2), "lender")
        deadline = time.time() + RECLAIM_BOUND_S
        while not any(e["reason"] == "Preempted" for e in self.c.get(borrower)["events"]):
            self.assertLess(time.time(), deadline, self.c.all_logs())
            time.sleep(0.02)
        self.c.coordinator.send_signal(signal.SIGKILL)
        self.c.coordinator.wait(timeout=20)
        time.sleep(2.0)
        self.c.start_coordinator()
        a = self.c.wait_state(lender, TERMINAL, timeout=180)
        self.assertEqual(a["state"], "SUCCEEDED", "%s\n%s" % (a.get("message"), self.c.all_logs()))
        j = self.c.get(borrower)
        stops = [e["message"] for e in j["events"] if e["reason"] == "Preempted"
                 and ("stopped" in e["message"] or "resumes" in e["message"])]
        self.assertTrue(stops, j["events"])
        for m in stops:
            self.assertNotIn("from scratch", m, j["events"])
        checked = int(j["metrics"].get("step", 0)) + 2 * CKPT
        b = self.cancel_after(borrower, checked, "bob")
        self.assertEqual(int(b.get("preemptions", 0)), 1, b.get("events"))
        self.expect_uninterrupted_losses(b, "borrower", checked, epochs=LONG_EPOCHS)

    def test_priority_preempts_within_a_tenant(self):
        self.tenant("solo", "--nominal", "cpu=2")
        self.user("carol", "solo")
        low = self.submit_as("carol", job_spec("low", LONG_STEPS, devices=2, priority=0,
                                               epochs=LONG_EPOCHS), "low")
        self.wait_running_at(low, 2 * CKPT + 2)
        submitted = time.time()
        high = self.submit_as("carol", job_spec("high", 24, devices=2, priority=10), "high")
        preempted, took = self.wait_preempted(low, submitted, RECLAIM_BOUND_S)
        print("priority: low preempted %.2f s after the high one's submit" % took, flush=True)
        h = self.c.wait_state(high, TERMINAL, timeout=180)
        self.assertEqual(h["state"], "SUCCEEDED", h.get("message"))
        checked = int(preempted["metrics"].get("step", 0)) + 2 * CKPT
        lo = self.cancel_after(low, checked, "carol")
        self.expect_uninterrupted_losses(lo, "low", checked, epochs=LONG_EPOCHS)

    def test_no_head_of_line_blocking_and_no_partial_start(self):
        self.tenant("team-a", "--cohort", "research", "--nominal", "cpu=2")
        self.tenant("team-b", "--cohort", "research", "--nominal", "cpu=2")
        self.user("alice", "team-a")
        # An operator's job holds 2 of the 4 workers.
        admin_job = self.c.submit(job_spec("operator", 100000, devices=2))
        self.wait_running_at(admin_job, 1)
        big = self.submit_as("alice", job_spec("big", 50, devices=4), "big")
        small = self.submit_as("alice", job_spec("small", 20, devices=1, stages=1), "small")
        s = self.c.wait_state(small, TERMINAL + ("RUNNING",), timeout=60)
        self.assertIn(s["state"], ("RUNNING", "SUCCEEDED"), s.get("message"))
        j = self.c.get(big)
        self.assertEqual(j["state"], "PENDING")
        self.assertEqual(j.get("worker_ids", []), [])  # never a partial start
        self.assertIn(j.get("pending_reason"), ("WaitingForDevices", "WaitingForQuota"))
        _, out, _ = self.c.ctl("get", big, token=self.tokens["alice"])
        # The reason may change between the two reads (the small job took a device meanwhile).
        self.assertRegex(out, r"REASON +(WaitingForDevices|WaitingForQuota): ")
        self.c.ctl("cancel", admin_job, check=False)  # it may have ended by itself
        b = self.c.wait_state(big, TERMINAL, timeout=240)
        self.assertEqual(b["state"], "SUCCEEDED", b.get("message"))

    def test_no_starvation_of_a_big_job(self):
        self.c.close()
        self.setUp(coordinator_args=["--starvation-after-s", str(STARVATION_S)])
        self.tenant("solo", "--nominal", "cpu=4")
        self.user("dave", "solo")
        # Four long 1-device jobs hold the 4 workers until the test cancels them.
        first = [self.submit_as("dave", job_spec("first%d" % i, LONG_STEPS, devices=1, stages=1,
                                                 epochs=LONG_EPOCHS), "first%d" % i)
                 for i in range(4)]
        for j in first:
            self.wait_running_at(j, 1)
        # Long too, so that it is still running when the test looks (then cancelled).
        big = self.submit_as("dave", job_spec("big", LONG_STEPS, devices=4, epochs=LONG_EPOCHS),
                             "big")
        time.sleep(STARVATION_S + 0.5)
        self.assertEqual(self.c.get(big)["state"], "PENDING")
        # Small jobs that each fit one freed device, submitted once the big one is starving.
        later = [self.submit_as("dave", job_spec("later%d" % i, 20, devices=1, stages=1),
                                "later%d" % i) for i in range(4)]

        def later_all_pending():
            states = {j: self.c.get(j)["state"] for j in later}
            self.assertEqual(set(states.values()), {"PENDING"},
                             "a later small job started before the starving big one: %s" % states)

        # The devices come free one by one; each is held for the big job, none taken by a
        # small one.
        for j in first:
            self.c.ctl("cancel", j, token=self.tokens["dave"])
            self.c.wait_state(j, TERMINAL, timeout=60)
            time.sleep(0.5)  # a few scheduling passes
            later_all_pending()
        self.wait_running_at(big, 1)  # all 4 workers: all or nothing
        later_all_pending()
        self.cancel_after(big, 1, "dave")
        for j in later:
            s = self.c.wait_state(j, TERMINAL, timeout=240)
            self.assertEqual(s["state"], "SUCCEEDED", s.get("message"))

if __name__ == "__main__":
    unittest.main()

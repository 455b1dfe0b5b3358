"""Non-finite steps through real processes (issue 17 item 4; docs/schedules.md, "Non-finite
steps"): a coordinator and 6 workers started with the test hook DAPPLE_TEST_INJECT_NONFINITE
(worker/runtime/nonfinite_injection.h), which writes a NaN into the gradient of stage 1 (the
middle stage) replica 1 after micro-batch 1 of step 3. A dapple job of 3 stages x 2 replicas:

- with training.max_consecutive_skipped_steps 1, every rank skips step 3 together, the job
  SUCCEEDED, every rank counted skipped_steps 1, `dapplectl get` says so, the steps before
  equal the single-process reference (1e-5) and every loss after is finite;
- with the default 0, the job FAILED at step 3 with a message naming the stage, the replica and
  the gradient; the same under zb-h2, whose check is deferred (GLOBAL_NORM_ASYNC).
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STAGES = 3
REPLICAS = 2
STEPS = 5
GLOBAL_BATCH = 64
MICRO_BATCH = 16
INJECT = "1/1@3:1"  # stage 1 replica 1, step 3, micro-batch 1
JOB_DEADLINE_S = 180
RTOL = 1e-5


class NonFiniteTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        os.environ["DAPPLE_TEST_INJECT_NONFINITE"] = INJECT  # inherited by every worker
        try:
            cls.cluster = cluster.Cluster(workers=STAGES * REPLICAS, dump=True)
        finally:
            del os.environ["DAPPLE_TEST_INJECT_NONFINITE"]
        cls.cluster.wait_workers(STAGES * REPLICAS)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def spec(self, name, skips, schedule="dapple"):
        extra = ["max_consecutive_skipped_steps: %d" % skips] if skips else []
        return cluster.spec_yaml(name, cluster.SMALL_MLP, GLOBAL_BATCH, MICRO_BATCH, STAGES,
                                 schedule=schedule, planner="uniform", max_steps=STEPS,
                                 devices=STAGES * REPLICAS, training_extra=extra)

    def test_a_skipped_step_and_the_job_goes_on(self):
        c = self.cluster
        job = c.submit(self.spec("nan-skip", 1))
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=JOB_DEADLINE_S)
        self.assertEqual(j["state"], "SUCCEEDED", "%s\n%s" % (j.get("message"), c.all_logs()))
        ranks = j.get("stage_metrics", [])
        self.assertEqual(len(ranks), STAGES * REPLICAS, ranks)
        for m in ranks:
            self.assertEqual(int(m.get("skipped_steps", 0)), 1, m)
        # Every rank logged the skip, naming the place.
        where = "step 3 skipped: non-finite gradient (NaN) at stage 1 replica 1"
        logs = [cluster.read(os.path.join(c.dir, "worker-%s.log" % w)) for w, _ in c.workers]
        self.assertEqual(sum(1 for log in logs if where in log), STAGES * REPLICAS, where)
        _, out, _ = c.ctl("get", job)
        self.assertIn("SKIPPED STEPS 1 (a non-finite loss or gradient; at most 1 in a row)", out)
        # The steps before the skip (and the skipped step's own loss) are the reference's; the
        # run goes on with finite losses.
        losses = j["step_losses"]
        self.assertEqual(len(losses), STEPS)
        ref_losses, _ = cluster.reference_run(c.dir, "nan-ref", GLOBAL_BATCH, 3)
        for step in range(3):
            self.assertLessEqual(abs(losses[step] - ref_losses[step]), RTOL * abs(ref_losses[step]),
                                 "step %d: %r vs %r" % (step + 1, losses[step], ref_losses[step]))
        for loss in losses:
            self.assertTrue(math.isfinite(loss), losses)

    def test_no_skip_allowed_fails_naming_where(self):
        # dapple takes the decision at a barrier; zb-h2 without clipping defers it
        # (GLOBAL_NORM_ASYNC: the ranks that would apply the NaN fail at once, the others when
        # their neighbours are gone). Either way: FAILED at step 3, naming the place, and the
        # workers take the next job.
        c = self.cluster
        for schedule in ("dapple", "zb-h2"):
            with self.subTest(schedule=schedule):
                job = c.submit(self.spec("nan-fail-" + schedule, 0, schedule))
                j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"),
                                 timeout=JOB_DEADLINE_S)
                self.assertEqual(j["state"], "FAILED", c.all_logs())
                message = j.get("message", "")
                self.assertIn("step 3", message)
                self.assertIn("non-finite gradient (NaN) at stage 1 replica 1 (micro-batch not "
                              "tracked: the step's accumulated gradient); "
                              "training.max_consecutive_skipped_steps is 0", message)
                c.wait_workers(STAGES * REPLICAS)


if __name__ == "__main__":
    unittest.main()

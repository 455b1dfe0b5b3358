"""Checkpoints end to end (docs/operations.md, "Checkpoints"): a real coordinator and real
workers on 127.0.0.1, driven through dapplectl.

(a) A 2-stage job that checkpoints every K steps is killed (SIGKILL of a worker) after a
    checkpoint C was published; resubmitted with --resume-from C, its losses of steps C+1..
    match an uninterrupted run's within 1e-6 relative.
(b) A worker dies while writing its shard of checkpoint 2K (the test-only fault hook
    DAPPLE_FAULT_EXIT_DURING_CHECKPOINT): step-2K stays .partial (never listed, refused by
    --resume-from), checkpoint K is still published, and the job resumes from it and matches.
(c) A checkpoint saved with P = 2 resumed with P = 1 and with P = 3 gives the next step's loss of
    the uninterrupted P = 2 run within 1e-5 relative (summation order may differ); and an
    on-demand `dapplectl checkpoint` of a running job is published with reason "on demand".
(e) Interleaved 1F1B (P = 2 stages of v = 2 model chunks): a job checkpointing every K steps is
    stopped after a checkpoint C; resumed from C its losses match an uninterrupted interleaved
    run's within 1e-6 relative, and C resumed as a plain 2-stage dapple job gives the next
    step's loss within 1e-5.
(d) Time-based checkpoints (training.checkpoint_every_minutes) saved asynchronously: every one
    is published with reason "timed" and the job's losses equal the uninterrupted run's; resumed
    onto the same two workers, each rank loads its shard from its worker's memory, and the
    resumed steps' losses equal the uninterrupted run's.
"""
import json
import math
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
K = 10            # checkpoint_every_steps of the interrupted runs
LONG = 100000     # max_steps of a run that is killed before it ends
FAULT_ENV = "DAPPLE_FAULT_EXIT_DURING_CHECKPOINT"


def spec(name, max_steps, stages=2, every=0, minutes=0, interleave=0):
    # An epoch is 468 steps of 128 samples; a long run needs more epochs (the data order of a
    # step does not depend on how many epochs the job has).
    epochs = 1 if max_steps <= 468 else 100
    text = cluster.spec_yaml(name, cluster.SMALL_MLP, 128, 32, stages, max_steps=max_steps,
                             seed=5, epochs=epochs,
                             schedule="interleaved" if interleave else "dapple")
    if interleave:
        text += "  interleave: %d\n" % interleave  # parallel is the last section
    extra = "  checkpoint_every_minutes: %g\n" % minutes if minutes else ""
    return text.replace("  max_steps: %d\n" % max_steps,
                        "  max_steps: %d\n  checkpoint_every_steps: %d\n%s" % (max_steps, every, extra))


def losses(job):
    """step_losses as floats; index i is step i + 1 (NaN before a resumed job's first step)."""
    return [float(v) for v in job.get("step_losses", [])]


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


class CheckpointTest(unittest.TestCase):
    reference = None  # losses of the uninterrupted 2-stage run, filled on first use

    def setUp(self):
        self.c = cluster.Cluster(workers=0)
        self.addCleanup(self.c.close)

    def fail_with_logs(self, message):
        self.fail("%s\n%s" % (message, self.c.all_logs()))

    def run_to_end(self, text, name, resume_from=None, timeout=90):
        path = os.path.join(self.c.dir, name + ".yaml")
        with open(path, "w") as f:
            f.write(text)
        args = ["submit", path, "-o", "json"]
        if resume_from:
            args += ["--resume-from", resume_from]
        job = json.loads(self.c.ctl(*args)[1])["id"]
        j = self.c.wait_state(job, TERMINAL, timeout)
        if j["state"] != "SUCCEEDED":
            self.fail_with_logs("%s ended %s: %s" % (job, j["state"], j.get("message")))
        return j

    def uninterrupted(self, steps):
        """Per-step losses of the plain 2-stage run (computed once, long enough for all)."""
        cls = CheckpointTest
        if cls.reference is None or len(cls.reference) < steps:
            self.c.wait_workers(2)
            j = self.run_to_end(spec("reference", max(steps, 4 * K)), "reference")
            cls.reference = losses(j)
        return cls.reference

    def wait_checkpoint(self, job, min_step=1, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            j = self.c.get(job)
            published = [c for c in j.get("checkpoints", []) if int(c["step"]) >= min_step]
            if published:
                return j, published
            if j["state"] in TERMINAL:
                self.fail_with_logs("%s ended %s before a checkpoint: %s" % (job, j["state"], j.get("message")))
            time.sleep(0.05)
        self.fail_with_logs("no checkpoint of %s after %d s" % (job, timeout))

    def expect_resumed_matches(self, resumed, first, last, reference, rel):
        got = losses(resumed)
        self.assertEqual(len(got), last, got)
        for step in range(1, first + 1):  # steps before the checkpoint were not run by this job
            self.assertTrue(math.isnan(got[step - 1]), (step, got[step - 1]))
        for step in range(first + 1, last + 1):
            a, b = got[step - 1], reference[step - 1]
            self.assertTrue(close(a, b, rel), "step %d: resumed %.9g, uninterrupted %.9g" % (step, a, b))

    # -- (a) -------------------------------------------------------------------------------------
    def test_a_killed_run_resumes_exactly(self):
        for _ in range(3):
            self.c.add_worker()
        self.c.wait_workers(3)
        path = os.path.join(self.c.dir, "long.yaml")
        with open(path, "w") as f:
            f.write(spec("interrupted", LONG, every=K))
        job = json.loads(self.c.ctl("submit", path, "-o", "json")[1])["id"]
        j, published = self.wait_checkpoint(job)
        # SIGKILL one of the job's workers.
        victim = j["worker_ids"][1] if len(j.get("worker_ids", [])) > 1 else None
        names = {name: p for name, p in self.c.workers}
        proc = names.get(victim) or self.c.workers[-1][1]
        proc.send_signal(signal.SIGKILL)
        j = self.c.wait_state(job, ("FAILED",), 30)
        ckpt = j["checkpoints"][0]
        step = int(ckpt["step"])
        self.assertEqual(step % K, 0)
        self.assertTrue(os.path.exists(os.path.join(ckpt["path"], "manifest.pb")))
        self.assertEqual(ckpt["reason"], "periodic")
        # A tenant's weights are the daemons' user's alone: no folder or shard is readable by
        # another local user (umask 077 in both daemons).
        tenant_dir = os.path.dirname(os.path.dirname(ckpt["path"]))
        for root, dirs, files in os.walk(tenant_dir):
            for name in [root] + [os.path.join(root, f) for f in files]:
                self.assertEqual(os.stat(name).st_mode & 0o077, 0, name)

        last = step + 2 * K
        reference = self.uninterrupted(last)
        self.c.wait_workers(2)
        resumed = self.run_to_end(spec("resumed", last, every=K), "resumed", resume_from=ckpt["path"])
        self.assertEqual(resumed["resumed_from"], ckpt["path"])
        self.expect_resumed_matches(resumed, step, last, reference, 1e-6)
        # The resumed job checkpoints on: its own checkpoints are after steps it ran.
        steps = [int(c["step"]) for c in resumed.get("checkpoints", [])]
        self.assertIn(last, steps)
        self.assertTrue(all(s > step for s in steps), steps)
        # The text view names both.
        out = self.c.ctl("get", resumed["id"])[1]
        self.assertIn("RESUMED FROM  " + ckpt["path"], out)
        self.assertIn("CHECKPOINTS", out)

    # -- (b) -------------------------------------------------------------------------------------
    def test_b_writer_killed_mid_save(self):
        self.c.add_worker()
        os.environ[FAULT_ENV] = str(2 * K)
        try:
            _, faulty = self.c.add_worker(name="it-faulty")
        finally:
            del os.environ[FAULT_ENV]
        self.c.wait_workers(2)
        path = os.path.join(self.c.dir, "long.yaml")
        with open(path, "w") as f:
            f.write(spec("mid-save", LONG, every=K))
        job = json.loads(self.c.ctl("submit", path, "-o", "json")[1])["id"]
        faulty.wait(timeout=60)  # it _exit(1)s half way through its shard of step 2K
        self.assertEqual(faulty.returncode, 1)
        j = self.c.wait_state(job, ("FAILED",), 30)
        self.assertEqual([int(c["step"]) for c in j["checkpoints"]], [K], j["checkpoints"])
        good = j["checkpoints"][0]["path"]
        job_dir = os.path.dirname(good)
        partial = os.path.join(job_dir, "step-%d.partial" % (2 * K))
        self.assertTrue(os.path.isdir(partial), os.listdir(job_dir))
        self.assertFalse(os.path.exists(os.path.join(job_dir, "step-%d" % (2 * K))))
        self.assertFalse(os.path.exists(os.path.join(partial, "manifest.pb")))
        self.assertTrue(any(f.endswith(".tmp") for f in os.listdir(partial)), os.listdir(partial))
        # A partial checkpoint is refused.
        yaml_path = os.path.join(self.c.dir, "again.yaml")
        with open(yaml_path, "w") as f:
            f.write(spec("again", 3 * K, every=K))
        rc, out, err = self.c.ctl("submit", yaml_path, "--resume-from", partial, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("not a published checkpoint", err)
        # Another model is refused, naming the field.
        with open(yaml_path, "w") as f:
            f.write(spec("again", 3 * K, every=K).replace("out: 64", "out: 65"))
        rc, out, err = self.c.ctl("submit", yaml_path, "--resume-from", good, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("model.layers[1].out differs: checkpoint 64, job 65", err)

        last = 2 * K + 5
        self.c.add_worker()
        self.c.wait_workers(2)
        reference = self.uninterrupted(last)
        resumed = self.run_to_end(spec("from-k", last, every=0), "from-k", resume_from=good)
        self.expect_resumed_matches(resumed, K, last, reference, 1e-6)

    # -- (c) -------------------------------------------------------------------------------------
    def test_c_reshard_and_on_demand(self):
        for _ in range(3):
            self.c.add_worker()
        self.c.wait_workers(3)
        path = os.path.join(self.c.dir, "long.yaml")
        with open(path, "w") as f:
            f.write(spec("on-demand", LONG, every=0))
        job = json.loads(self.c.ctl("submit", path, "-o", "json")[1])["id"]
        deadline = time.time() + 60
        while time.time() < deadline:
            j = self.c.get(job)
            if j["state"] == "RUNNING" and int(j.get("metrics", {}).get("step", 0)) >= 3:
                break
            self.assertNotIn(j["state"], TERMINAL, j.get("message"))
            time.sleep(0.05)
        _, text, _ = self.c.ctl("checkpoint", job)
        self.assertRegex(text, r"^%s: checkpoint after step \d+ requested\n$" % job)
        requested = int(text.split("after step ")[1].split()[0])
        self.assertGreaterEqual(requested, 3 + 2)
        again = json.loads(self.c.ctl("checkpoint", job, "-o", "json")[1])
        self.assertEqual(int(again["step"]), requested)  # still pending: the same step
        j, published = self.wait_checkpoint(job, requested)
        self.assertEqual(int(published[0]["step"]), requested)
        self.assertEqual(published[0]["reason"], "on demand")
        self.c.ctl("cancel", job)
        self.c.wait_state(job, TERMINAL, 30)
        rc, _, err = self.c.ctl("checkpoint", job, check=False)
        self.assertNotEqual(rc, 0)
        self.assertIn("only a running job can be checkpointed", err)

        ckpt = published[0]["path"]
        reference = self.uninterrupted(requested + 1)
        for stages in (1, 3):
            self.c.wait_workers(stages)
            text = spec("reshard-p%d" % stages, requested + 1, stages=stages)
            resumed = self.run_to_end(text, "reshard-p%d" % stages, resume_from=ckpt)
            self.assertEqual(len(resumed["plan"]["stages"]), stages)
            got = losses(resumed)[requested]
            want = reference[requested]
            self.assertTrue(close(got, want, 1e-5),
                            "P=%d step %d: resumed %.9g, P=2 uninterrupted %.9g" % (
                                stages, requested + 1, got, want))

    # -- (d) -------------------------------------------------------------------------------------
    def test_d_timed_async_checkpoints_resume_from_memory(self):
        for _ in range(2):
            self.c.add_worker()
        self.c.wait_workers(2)
        steps = 150
        reference = self.uninterrupted(steps + 20)
        # Due 0.12 s after the first step; the coordinator asks for a step about 2 s ahead
        # (capped at the last step), so the rank saves it at the very end of the job: the rank's
        # end waits for that save in flight.
        timed = self.run_to_end(spec("timed", steps, minutes=0.002), "timed")
        self.expect_resumed_matches(timed, 0, steps, reference, 1e-6)
        published = timed.get("checkpoints", [])
        self.assertTrue(published, "no timed checkpoint in %s" % timed["id"])
        for c in published:
            self.assertEqual(c["reason"], "timed", c)
        ckpt = published[-1]
        step = int(ckpt["step"])
        self.assertLess(step, steps + 1)

        last = step + 20
        resumed = self.run_to_end(spec("from-memory", last), "from-memory", resume_from=ckpt["path"])
        self.expect_resumed_matches(resumed, step, last, reference, 1e-6)
        logs = "".join(cluster.read(os.path.join(self.c.dir, "worker-%s.log" % name))
                       for name, _ in self.c.workers)
        loaded = [line for line in logs.splitlines()
                  if "%s: stage" % resumed["id"] in line and " resumed layers " in line]
        self.assertEqual(len(loaded), 2, loaded)
        if resumed.get("worker_ids") == timed.get("worker_ids"):
            # Each worker runs the stage (layer range) it ran before: its shard is in its memory.
            for line in loaded:
                self.assertIn("1 shard(s) from this worker's memory, 0 from disk", line)
        else:
            for line in loaded:
                self.assertIn("shard(s) from this worker's memory", line)

    # -- (e) -------------------------------------------------------------------------------------
    def test_e_interleaved_resumes_exactly(self):
        for _ in range(2):
            self.c.add_worker()
        self.c.wait_workers(2)
        path = os.path.join(self.c.dir, "interleaved-long.yaml")
        with open(path, "w") as f:
            f.write(spec("interleaved-stopped", LONG, every=K, interleave=2))
        job = json.loads(self.c.ctl("submit", path, "-o", "json")[1])["id"]
        j, _ = self.wait_checkpoint(job)
        self.assertEqual(j["plan"]["schedule"], "interleaved", j["plan"])
        self.assertEqual([len(s["chunks"]) for s in j["plan"]["stages"]], [2, 2], j["plan"])
        self.c.ctl("cancel", job)
        j = self.c.wait_state(job, TERMINAL, 30)
        # The newest checkpoint: the job may have published --keep-checkpoints more after the one
        # seen first, and the older ones are deleted.
        ckpt = max(j["checkpoints"], key=lambda c: int(c["step"]))
        self.assertTrue(os.path.exists(os.path.join(ckpt["path"], "manifest.pb")), ckpt)
        step = int(ckpt["step"])
        self.assertEqual(step % K, 0)
        self.assertEqual(ckpt["reason"], "periodic")

        last = step + K
        self.c.wait_workers(2)
        reference = losses(self.run_to_end(spec("interleaved-reference", last, interleave=2),
                                           "interleaved-reference"))
        resumed = self.run_to_end(spec("interleaved-resumed", last, every=K, interleave=2),
                                  "interleaved-resumed", resume_from=ckpt["path"])
        self.assertEqual(resumed["resumed_from"], ckpt["path"])
        self.expect_resumed_matches(resumed, step, last, reference, 1e-6)
        # The resumed job checkpoints on (after its last step).
        self.assertIn(last, [int(c["step"]) for c in resumed.get("checkpoints", [])])
        logs = "".join(cluster.read(os.path.join(self.c.dir, "worker-%s.log" % name))
                       for name, _ in self.c.workers)
        loaded = [line for line in logs.splitlines()
                  if "%s: stage" % resumed["id"] in line and " resumed layers " in line]
        self.assertEqual(len(loaded), 2, loaded)
        for line in loaded:
            self.assertIn(" and 1 more chunk(s) from ", line)

        # The interleaved checkpoint in a plain 2-stage pipeline: the next step's loss.
        plain = self.run_to_end(spec("interleaved-to-dapple", step + 1), "interleaved-to-dapple",
                                resume_from=ckpt["path"])
        got, want = losses(plain)[step], reference[step]
        self.assertTrue(close(got, want, 1e-5),
                        "dapple P=2 step %d: resumed %.9g, interleaved uninterrupted %.9g" % (
                            step + 1, got, want))


if __name__ == "__main__":
    unittest.main()

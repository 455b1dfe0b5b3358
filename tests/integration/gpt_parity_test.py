"""A GPT with a tied LM head through real processes: a real coordinator and 4 real worker
processes on 127.0.0.1 train a tiny byte-level GPT (embedding -> transformer block -> layernorm
-> lm_head tied to the embedding, dropout live in the embedding and the block, gradient
clipping and a learning-rate schedule) on a text file the test writes.

- Parity: dapple with P = 2 (the embedding on stage 0, the tied head on stage 1: the tied
  weights' gradients meet over Gloo between the two worker processes) and with P = 2 x D = 2
  (4 workers, the tied group spans both replicas of both stages) train exactly like one process
  on the whole global batch (dapple-reference): per-step loss and final weights within 1e-5
  relative. The head's copy of the table on stage 1 is bitwise the embedding's on stage 0 at the
  end, and the replicas of a stage dump bitwise-identical weights. (After EVERY step, and for
  every schedule, P, D and M: worker/runtime/tied_runtime_test.cc, in one process.)
- The asynchronous schedules train the same GPT: pipedream on 2 stages (the tied head on the
  second) and pipesgd on 2 replicas SUCCEED with a falling training loss and a validation loss
  below uniform guessing (ln 256).
"""
import math
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import cluster  # noqa: E402

STEPS = 4
GLOBAL_BATCH = 8
SEQ_LEN = 16
RTOL = 1e-5
TABLE = "layer0.token_embedding"
HEAD = "layer3.weight"  # the lm_head's copy of TABLE on another stage
# Genesis 1:1-5 (King James Version, public domain), 455 bytes; the file holds it 8 times:
# 3640 bytes, 90% for training = 204 samples of 16 bytes, an epoch of 25 steps of 8.
VERSES = (
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep. "
    "And the Spirit of God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n"
    "And God called the light Day, and the darkness he called Night. "
    "And the evening and the morning were the first day.\n")


def gpt_yaml(name, corpus, micro_batch, stages, devices, schedule="dapple", planner="uniform",
             max_steps=STEPS):
    return "\n".join([
        "name: %s" % name, "model:", "  layers:",
        "    - {type: embedding, vocab: 256, dim: 16, dropout: 0.1}",
        "    - {type: transformer_block, heads: 2, dropout: 0.1}",
        "    - {type: layernorm}",
        "    - {type: lm_head, tied: true}",
        "data: {dataset: text, path: %s, seq_len: %d, validation_fraction: 0.1}" % (corpus,
                                                                                   SEQ_LEN),
        "training:",
        "  global_batch: %d" % GLOBAL_BATCH,
        "  micro_batch: %d" % micro_batch,
        "  epochs: 1",
        "  max_steps: %d" % max_steps,
        "  seed: 9",
        "  optimizer: {type: sgd, lr: 0.1, momentum: 0.9}",
        "  max_grad_norm: 1.0",
        "  lr_schedule: {warmup_steps: 2, decay: cosine, min_lr: 0.01}",
        "parallel:",
        "  schedule: %s" % schedule,
        "  planner: %s" % planner,
        "  stages: %s" % (stages or "auto"),
        "  devices: %d" % devices]) + "\n"


class GptParityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.cluster = cluster.Cluster(workers=4, dump=True)
        cls.corpus = os.path.join(cluster.data_dir(), "genesis.txt")
        with open(cls.corpus, "w") as f:
            f.write(VERSES * 8)
        cls.cluster.wait_workers(4)
        cls.ref_losses, cls.ref_params = cluster.reference_run_yaml(
            cls.cluster.dir, "gpt-ref", gpt_yaml("gpt-ref", cls.corpus, GLOBAL_BATCH, 1, 1),
            STEPS)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()

    def run_job(self, name, **kwargs):
        c = self.cluster
        c.wait_workers(4)  # the previous job's ranks are idle again
        job = c.submit(gpt_yaml(name, self.corpus, **kwargs), name=name + ".yaml")
        j = c.wait_state(job, ("SUCCEEDED", "FAILED", "CANCELLED"), timeout=120)
        self.assertEqual(j["state"], "SUCCEEDED", "%s: %s\n%s" % (name, j.get("message"),
                                                                  c.all_logs()))
        return job, j

    def check_parity(self, name, micro_batch, replicas):
        c = self.cluster
        job, j = self.run_job(name, micro_batch=micro_batch, stages=2, devices=2 * replicas)
        stages = j["plan"]["stages"]
        self.assertEqual(len(stages), 2, j["plan"])
        # The embedding on stage 0, the tied head (layer 3) on stage 1.
        self.assertGreaterEqual(stages[1].get("first_layer", 0), 1, j["plan"])
        self.assertEqual([s["replicas"] for s in stages], [replicas] * 2, j["plan"])
        self.assertEqual(len(set(j["worker_ids"])), 2 * replicas)
        blobs = {}
        for r in range(replicas):
            suffix = ".replica%d" % r if replicas > 1 else ""
            params = {}
            for s in range(2):
                path = os.path.join(c.dump_dir, "%s.stage%d%s.params" % (job, s, suffix))
                with open(path, "rb") as f:
                    blobs.setdefault(s, []).append(f.read())
                params.update(cluster.load_params(path))
            # The head's copy crossed processes and is bitwise the owner's; the reference holds
            # the table once.
            self.assertEqual(params.pop(HEAD), params[TABLE], "%s replica %d: %s differs from %s" %
                             (name, r, HEAD, TABLE))
            cluster.check_matches_reference(self, "%s replica %d" % (name, r), j["step_losses"],
                                            params, self.ref_losses, self.ref_params, RTOL)
        for s, files in blobs.items():
            for r, blob in enumerate(files[1:], 1):
                self.assertEqual(blob, files[0], "%s stage %d replica %d differs from replica 0" %
                                 (name, s, r))

    def check_trains(self, name, **kwargs):
        job, j = self.run_job(name, max_steps=0, **kwargs)  # one epoch
        losses = j["step_losses"]
        self.assertGreaterEqual(len(losses), 20, name)
        self.assertTrue(all(math.isfinite(x) for x in losses), losses)
        first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
        self.assertLess(last, first, "%s: the training loss did not fall: %s" % (name, losses))
        m = j["metrics"]
        self.assertIn("validation_loss", m, m)
        self.assertTrue(0 < m["validation_loss"] < math.log(256), m)
        print("%s: loss %.3f -> %.3f over %d steps, validation loss %.3f" %
              (name, first, last, len(losses), m["validation_loss"]), file=sys.stderr)
        return j

    def test_1_two_stages_tied_across_processes(self):
        self.check_parity("gpt-dapple-p2-m4", micro_batch=2, replicas=1)

    def test_2_two_stages_two_replicas(self):
        self.check_parity("gpt-dapple-p2-d2-m4", micro_batch=2, replicas=2)

    def test_3_pipedream_trains(self):
        j = self.check_trains("gpt-pipedream", micro_batch=2, stages=2, devices=2,
                              schedule="pipedream")
        self.assertEqual(len(j["plan"]["stages"]), 2, j["plan"])

    def test_4_pipesgd_trains(self):
        j = self.check_trains("gpt-pipesgd", micro_batch=4, stages=0, devices=2,
                              schedule="pipesgd", planner="dp")
        self.assertEqual([s["replicas"] for s in j["plan"]["stages"]], [2], j["plan"])


if __name__ == "__main__":
    unittest.main()

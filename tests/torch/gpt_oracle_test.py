"""PyTorch as the oracle of dapple's GPT kernels (issue "Real models, part 1").

A tiny GPT (T 16, C 32, 2 heads, 2 blocks, the head tied to the embedding, dropout off) is
trained for 20 steps by dapple in one process (dapple-reference --trace: the CPU kernels of
kernels/cpu) and by the same model written in PyTorch (torch_gpt.py) from dapple's initial
weights on dapple's batches, under SGD with momentum and under AdamW, each with global-norm
clipping (torch.nn.utils.clip_grad_norm_) and the learning-rate schedule (warm-up + cosine) on.

  - every step's loss within 1e-4 relative;
  - step 0's gradient of every parameter within 1e-4 relative (L2 norm of the difference over
    the L2 norm of PyTorch's), before clipping;
  - PyTorch's schedule (written from common/lr_schedule.h's definition) gives the learning rates
    dapple's does, and clipping really scales some steps (the test would not see it otherwise);
  - the validation loss after the last step within 1e-4 relative.

Fails, never skips, when torch is missing: scripts/setup installs python3-torch.
"""
import os
import random
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    sys.exit("gpt_oracle_test: PyTorch is missing under %s: install Debian's python3-torch "
             "(scripts/setup does)" % sys.executable)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402

BUILD_DIR = os.environ.get("DAPPLE_BUILD_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
REFERENCE = os.path.join(BUILD_DIR, "tests", "dapple-reference")
STEPS = 20
RTOL = 1e-4

WORDS = ("in the beginning god created heaven and earth was without form void darkness upon "
         "face of deep spirit moved waters said let there be light saw that it good divided "
         "from called day night evening morning first").split()


def write_text(path, sentences=600, seed=11):
    """A few tens of KB of English-like text (words of Genesis 1 in random sentences)."""
    rng = random.Random(seed)
    lines = []
    for i in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
        lines.append("%d:%d %s." % (i // 30 + 1, i % 30 + 1, " ".join(words).capitalize()))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def spec_yaml(name, text, optimizer):
    return "\n".join([
        "name: %s" % name,
        "model:",
        "  layers:",
        "    - {type: embedding, vocab: 256, dim: 32}",
        "    - {type: transformer_block, heads: 2}",
        "    - {type: transformer_block, heads: 2}",
        "    - {type: layernorm}",
        "    - {type: lm_head, tied: true}",
        "data: {dataset: text, path: %s, seq_len: 16, validation_fraction: 0.1}" % text,
        "training:",
        "  global_batch: 8",
        "  max_steps: %d" % STEPS,
        "  optimizer: %s" % optimizer,
        # Small enough that the first steps clip (checked below).
        "  max_grad_norm: 0.5",
        "  lr_schedule: {warmup_steps: 4, decay: cosine, min_lr: 1.0e-4}",
        "  seed: 9",
    ]) + "\n"


class GptOracleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        cls.dir = tempfile.mkdtemp(prefix="dapple-torch-")
        cls.text = os.path.join(cls.dir, "genesis.txt")
        write_text(cls.text)

    def dapple_trace(self, name, optimizer):
        out = os.path.join(self.dir, name)
        os.makedirs(out)
        spec = os.path.join(out, "job.yaml")
        with open(spec, "w") as f:
            f.write(spec_yaml(name, self.text, optimizer))
        r = subprocess.run([REFERENCE, spec, str(STEPS), out, "--trace"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, "dapple-reference: %s %s" % (r.stdout, r.stderr))
        return torch_gpt.Trace(out)

    def check(self, name, optimizer):
        trace = self.dapple_trace(name, optimizer)
        model = torch_gpt.Gpt(trace.spec)
        model.load_dapple(trace.params("initial"))
        got = torch_gpt.train(trace, model)

        # Step 0's gradients, before clipping: every tensor, relative L2.
        dapple_grads = trace.params("gradients0")
        self.assertEqual(sorted(dapple_grads), sorted(got.gradients0))
        for pname, want in got.gradients0.items():
            err = torch_gpt.relative_l2(dapple_grads[pname], want)
            self.assertLessEqual(err, RTOL, "%s: step 0 gradient of %s differs by %.3g relative"
                                 % (name, pname, err))

        # The schedule and clipping are on and matter.
        training = trace.spec["training"]
        self.assertGreater(got.learning_rates[0], 0)
        self.assertLess(got.learning_rates[0], training["optimizer"]["lr"])
        self.assertTrue(any(n > training["max_grad_norm"] for n in got.grad_norms),
                        "%s: no step clipped (norms %s)" % (name, got.grad_norms))

        # Every step's loss.
        want_losses = trace.losses()
        self.assertEqual(len(want_losses), STEPS)
        for step, (d, t) in enumerate(zip(want_losses, got.losses)):
            self.assertLessEqual(abs(d - t), RTOL * abs(t), "%s step %d: dapple %.9g, PyTorch "
                                 "%.9g" % (name, step, d, t))
        # It learns: the text repeats a few words.
        self.assertLess(got.losses[-1], got.losses[0] - 1.0)

        # The validation loss after training.
        tokens, targets = trace.eval_split()
        want_eval, _ = torch_gpt.evaluate(model, tokens, targets)
        dapple_eval, _ = trace.eval_result()
        self.assertLessEqual(abs(dapple_eval - want_eval), RTOL * want_eval,
                             "%s validation loss: dapple %.9g, PyTorch %.9g" %
                             (name, dapple_eval, want_eval))

    def test_sgd_momentum(self):
        self.check("oracle-sgd", "{type: sgd, lr: 0.5, momentum: 0.9, weight_decay: 0.01}")

    def test_adamw(self):
        self.check("oracle-adamw", "{type: adamw, lr: 3.0e-3, weight_decay: 0.1, beta2: 0.99}")


if __name__ == "__main__":
    unittest.main()

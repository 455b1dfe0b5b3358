"""dapple's GPT rebuilt in PyTorch, the oracle for dapple's kernels (tests/torch/gpt_oracle_test.py)
and its peer in bench/gpt_kjv_vs_torch.py.

What dapple-reference --trace writes (tests/tools/dapple_reference.cc) is read here: the job
spec as dapple resolved it, the initial weights, the batches of every step, the evaluation
split, step 0's gradients. The model is written from the definitions in docs/layers.md with
PyTorch's own modules, so it shares no code with dapple's kernels:

  embedding          nn.Embedding tokens + nn.Embedding positions (y = tok[x] + pos[t])
  transformer_block  pre-LayerNorm GPT-2 block: x + proj(attn(ln1(x))), then + fc2(gelu(fc(ln2)))
                     with nn.LayerNorm (eps 1e-5), a fused qkv nn.Linear(C, 3C) split q | k | v,
                     heads of C / heads columns each, causal softmax attention scaled by
                     1 / sqrt(C / heads), nn.GELU() (the exact erf form)
  layernorm          nn.LayerNorm(C, eps)
  lm_head            logits = x W^T, no bias; tied: W IS the embedding's token table (one
                     nn.Parameter, so its gradient is the sum of both uses, and clipping and
                     the optimizer see it once)

Training follows dapple's TrainingSpec: the mean cross-entropy over every target of the global
batch, torch.nn.utils.clip_grad_norm_ (training.max_grad_norm > 0), the learning rate of each
update from learning_rate() (common/lr_schedule.h, written again here from its definition), and
torch.optim.SGD (momentum, weight_decay) or torch.optim.AdamW (betas, eps, weight_decay), which
define dapple's optimizers (kernels/cpu/optimizer.h). Dropout is not modelled: its masks are
dapple's own (a pure function of seed, step, sample), so the oracle needs dropout 0.

Needs /usr/bin/python3 with Debian's python3-torch (scripts/setup installs it).
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import param_io  # noqa: E402  (worker/runtime/param_io.h's format)

LAYERNORM_EPS = 1e-5  # docs/layers.md: the default of layernorm.eps and the blocks' LayerNorms


class Trace:
    """What `dapple-reference JOB STEPS DIR --trace` wrote into DIR."""

    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "trace.json")) as f:
            self.meta = json.load(f)
        self.spec = self.meta["spec"]
        self.steps = self.meta["steps"]
        self.total_steps = self.meta["total_steps"]
        self.global_batch = self.meta["global_batch"]
        self.input_elements = self.meta["input_elements"]
        self.targets_per_sample = self.meta["targets_per_sample"]
        self.eval_samples = self.meta["eval_samples"]
        self.shapes = {p["name"]: tuple(p["shape"]) for p in self.meta["params"]}
        self.optimizer = self.meta["optimizer"]

    def params(self, name):
        """{name: tensor of its shape} from DIR/<name>.params (initial, gradients0, reference)."""
        raw = param_io.load_params(os.path.join(self.dir, name + ".params"))
        return {k: torch.tensor(v, dtype=torch.float32).reshape(self.shapes[k]) for k, v in raw.items()}

    def losses(self):
        with open(os.path.join(self.dir, "reference.losses")) as f:
            return [float(x) for x in f]

    def eval_result(self):
        """(validation loss, accuracy) dapple computed after the last step."""
        with open(os.path.join(self.dir, "reference.eval")) as f:
            loss, accuracy = f.read().split()
        return float(loss), float(accuracy)

    def _read_split(self, f, rows):
        inputs = torch.frombuffer(bytearray(f.read(rows * self.input_elements * 4)),
                                  dtype=torch.float32).reshape(rows, self.input_elements)
        targets = torch.frombuffer(bytearray(f.read(rows * self.targets_per_sample * 4)),
                                   dtype=torch.int32).reshape(rows, self.targets_per_sample)
        return inputs.long(), targets.long()

    def batches(self):
        """Yields (token ids [B, T], targets [B, T]) as int64 for each step, in order."""
        with open(os.path.join(self.dir, "batches.bin"), "rb") as f:
            for _ in range(self.steps):
                yield self._read_split(f, self.global_batch)

    def eval_split(self):
        """(token ids [E, T], targets [E, T]) of the whole evaluation split."""
        with open(os.path.join(self.dir, "eval.bin"), "rb") as f:
            return self._read_split(f, self.eval_samples)


def learning_rate(training, update, total_steps):
    """The learning rate of update `update` (0-based), as common/lr_schedule.h defines it:
    linear warm-up lr (t + 1) / W for t < W, then cosine from lr to min_lr until decay_steps
    (default: the job's total steps), min_lr after; no schedule: lr. `training` is the spec's
    training section as JSON (proto field names, defaults left out)."""
    lr = training["optimizer"]["lr"]
    if "lr_schedule" not in training:
        return lr
    s = training["lr_schedule"]
    t = max(update, 0)
    warmup = max(int(s.get("warmup_steps", 0)), 0)
    if t < warmup:
        return lr * (t + 1) / warmup
    if s.get("decay", "") != "cosine":
        return lr
    end = int(s.get("decay_steps", 0)) or total_steps
    min_lr = s.get("min_lr", 0.0)
    if t >= end:
        return min_lr
    progress = (t - warmup) / (end - warmup)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class Block(nn.Module):
    """GPT-2's pre-LayerNorm block (docs/layers.md, transformer_block)."""

    def __init__(self, seq, width, heads, hidden):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width, eps=LAYERNORM_EPS)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=LAYERNORM_EPS)
        self.fc = nn.Linear(width, hidden)
        self.fc2 = nn.Linear(hidden, width)
        self.gelu = nn.GELU()  # approximate='none': the erf form
        self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

    def forward(self, x):
        n, t, c = x.shape
        d = c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (u.view(n, t, self.heads, d).transpose(1, 2) for u in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        attn = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(n, t, c)
        a = x + self.proj(attn)
        return a + self.fc2(self.gelu(self.fc(self.ln2(a))))

    def named(self, prefix):
        return {prefix + "ln1.weight": self.ln1.weight, prefix + "ln1.bias": self.ln1.bias,
                prefix + "attn.qkv.weight": self.qkv.weight, prefix + "attn.qkv.bias": self.qkv.bias,
                prefix + "attn.proj.weight": self.proj.weight, prefix + "attn.proj.bias": self.proj.bias,
                prefix + "ln2.weight": self.ln2.weight, prefix + "ln2.bias": self.ln2.bias,
                prefix + "mlp.fc.weight": self.fc.weight, prefix + "mlp.fc.bias": self.fc.bias,
                prefix + "mlp.proj.weight": self.fc2.weight, prefix + "mlp.proj.bias": self.fc2.bias}


class Gpt(nn.Module):
    """The model of a job spec's layers (embedding, transformer_block, layernorm, lm_head), with
    `dapple_params`: dapple's parameter name -> this model's nn.Parameter."""

    def __init__(self, spec):
        super().__init__()
        seq = int(spec["model"]["input_shape"][0])
        self.layers = nn.ModuleList()
        self.kinds = []
        self.dapple_params = {}
        table = None  # the embedding's token table, for a tied head
        width = None
        for i, layer in enumerate(spec["model"]["layers"]):
            kind = layer["type"]
            p = layer.get(kind, {})
            prefix = "layer%d." % i
            if float(p.get("dropout", 0)) != 0 or kind == "dropout":
                raise ValueError("model.layers[%d] (%s) has dropout: dapple's masks are its own; "
                                 "the PyTorch model needs dropout 0" % (i, kind))
            if kind == "embedding":
                width = int(p["dim"])
                m = nn.ModuleDict({"tok": nn.Embedding(int(p["vocab"]), width),
                                   "pos": nn.Embedding(int(p.get("positions", seq)), width)})
                table = m["tok"].weight
                self.dapple_params.update({prefix + "token_embedding": m["tok"].weight,
                                           prefix + "position_embedding": m["pos"].weight})
            elif kind == "transformer_block":
                m = Block(seq, width, int(p["heads"]), int(p.get("mlp_hidden", 4 * width)))
                self.dapple_params.update(m.named(prefix))
            elif kind == "layernorm":
                m = nn.LayerNorm(width, eps=float(p.get("eps", LAYERNORM_EPS)))
                self.dapple_params.update({prefix + "weight": m.weight, prefix + "bias": m.bias})
            elif kind == "lm_head":
                m = nn.Module()
                if p.get("tied", False):
                    m.weight = table  # the same Parameter: one tensor, both gradients
                else:
                    m.weight = nn.Parameter(torch.empty(int(p["vocab"]), width))
                    self.dapple_params[prefix + "weight"] = m.weight
            else:
                raise ValueError("model.layers[%d]: no PyTorch model of type %s" % (i, kind))
            self.layers.append(m)
            self.kinds.append(kind)

    def forward(self, tokens):
        x = tokens
        for kind, m in zip(self.kinds, self.layers):
            if kind == "embedding":
                x = m["tok"](x) + m["pos"](torch.arange(x.shape[1]))
            elif kind == "lm_head":
                x = x @ m.weight.t()
            else:
                x = m(x)
        return x

    def load_dapple(self, params):
        """Copies dapple's tensors {name: tensor} into the model; every parameter exactly once."""
        if sorted(params) != sorted(self.dapple_params):
            raise ValueError("dapple's parameters %s are not the model's %s" % (
                sorted(params), sorted(self.dapple_params)))
        with torch.no_grad():
            for name, p in self.dapple_params.items():
                p.copy_(params[name])


def make_optimizer(model, optimizer):
    """torch.optim's optimizer for dapple's resolved hyper-parameters (trace.json)."""
    if optimizer["type"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=optimizer["lr"],
                               momentum=optimizer["momentum"],
                               weight_decay=optimizer["weight_decay"])
    if optimizer["type"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=optimizer["lr"],
                                 betas=(optimizer["beta1"], optimizer["beta2"]),
                                 eps=optimizer["eps"], weight_decay=optimizer["weight_decay"])
    raise ValueError("no PyTorch optimizer for %s" % optimizer["type"])


def mean_loss(logits, targets):
    """The mean cross-entropy over every target (dapple's loss: one per token)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class Result:
    def __init__(self):
        self.losses = []          # per step, mean over the global batch
        self.grad_norms = []      # per step, the global L2 norm before clipping
        self.learning_rates = []  # per update
        self.gradients0 = {}      # dapple name -> step 0's gradient, before clipping
        self.seconds = 0.0        # in the training steps only
        self.cpu_seconds = 0.0    # the process's CPU time in them


def train(trace, model, on_step=None):
    """Trains `model` (dapple's initial weights loaded) on the trace's batches as dapple's
    TrainingSpec says; returns a Result. `on_step(step, loss)` is called after each step."""
    import time
    training = trace.spec["training"]
    max_norm = float(training.get("max_grad_norm", 0))
    opt = make_optimizer(model, trace.optimizer)
    params = list(model.parameters())
    result = Result()
    for step, (tokens, targets) in enumerate(trace.batches()):
        t0, cpu0 = time.perf_counter(), time.process_time()
        lr = learning_rate(training, step, trace.total_steps)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss = mean_loss(model(tokens), targets)
        loss.backward()
        if step == 0:
            result.gradients0 = {n: p.grad.detach().clone() for n, p in model.dapple_params.items()}
        if max_norm > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        else:
            norm = torch.norm(torch.stack([p.grad.norm() for p in params]))
        opt.step()
        result.seconds += time.perf_counter() - t0
        result.cpu_seconds += time.process_time() - cpu0
        result.losses.append(loss.item())
        result.grad_norms.append(float(norm))
        result.learning_rates.append(lr)
        if on_step:
            on_step(step, loss.item())
    return result


def evaluate(model, tokens, targets, chunk=256):
    """(mean loss, accuracy) over every target of the evaluation split, forward only."""
    loss_sum, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for begin in range(0, tokens.shape[0], chunk):
            logits = model(tokens[begin:begin + chunk])
            y = targets[begin:begin + chunk]
            loss_sum += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                        reduction="sum").item()
            correct += int((logits.argmax(-1) == y).sum())
            count += y.numel()
    return loss_sum / count, correct / count


def relative_l2(a, b):
    """||a - b|| / ||b|| in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))

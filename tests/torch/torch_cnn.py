"""dapple's image models rebuilt in PyTorch, the oracle for dapple's CNN kernels
(tests/torch/cnn_oracle_test.py).

What dapple-reference --trace writes (tests/tools/dapple_reference.cc) is read here (torch_gpt's
Trace, with float images for inputs, and the buffers). The model is written from the definitions
in docs/layers.md with PyTorch's own modules, so it shares no code with dapple's kernels:

  conv2d          nn.Conv2d(C, out_channels, kernel, stride, padding, bias)
  batchnorm2d     nn.BatchNorm2d(C, eps) (see below for its running statistics)
  relu            nn.ReLU()
  maxpool2d       nn.MaxPool2d(kernel, stride, padding)
  avgpool2d       nn.AvgPool2d(kernel, stride, padding, count_include_pad=True)
  global_avgpool  nn.AdaptiveAvgPool2d(1), flattened
  residual_block  torchvision's BasicBlock: conv3x3(stride) BN ReLU conv3x3 BN, plus the identity
                  or a conv1x1(stride) BN projection, then ReLU
  flatten, linear nn.Flatten(), nn.Linear(in, out)

Batch normalisation follows dapple's documented semantics (docs/layers.md, "Batch
normalisation"): in training each forward normalises with the statistics of one micro-batch
(the batch is run as its micro-batches of training.micro_batch rows, one replica), and the
running statistics are updated once per step from the whole step's batch: the modules have
momentum 0 (their own update leaves the buffers alone), and after each step every batch norm's
running mean and running (unbiased) variance move by the layer's momentum towards the mean and
variance of all the inputs it saw during the step, computed here by torch in float64.

The oracle computes in float64 (DTYPE, Cnn's default): the exact arithmetic dapple's float32
kernels are held to (bench/resnet_fmnist_vs_torch.py builds it in float32, PyTorch's speed at
dapple's precision). A float32 oracle would differ from dapple by the rounding of both; with ReLU's and max
pooling's discontinuous gradients that can also tip a unit the other way (cnn_oracle_test.py
says how its hyper-parameters keep that away).

Needs /usr/bin/python3 with Debian's python3-torch (scripts/setup installs it).
"""
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpt  # noqa: E402  (Trace, the optimizers, relative_l2)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import param_io  # noqa: E402

BATCHNORM_EPS = 1e-5       # docs/layers.md: batchnorm2d.eps's default, and the blocks'
BATCHNORM_MOMENTUM = 0.1   # batchnorm2d.momentum's default, and the blocks'
DTYPE = torch.float64


class Trace(torch_gpt.Trace):
    """dapple-reference's trace of an image model: float inputs [rows, C, H, W]."""

    def __init__(self, directory):
        super().__init__(directory)
        self.input_shape = tuple(int(d) for d in self.spec["model"]["input_shape"])
        self.buffer_shapes = {b["name"]: tuple(b["shape"]) for b in self.meta["buffers"]}

    def _read_split(self, f, rows):
        inputs = torch.frombuffer(bytearray(f.read(rows * self.input_elements * 4)),
                                  dtype=torch.float32).reshape((rows,) + self.input_shape)
        targets = torch.frombuffer(bytearray(f.read(rows * self.targets_per_sample * 4)),
                                   dtype=torch.int32).reshape(rows)
        return inputs.clone(), targets.long()

    def buffers(self):
        """{name: tensor} of reference.buffers (the running statistics after the last step)."""
        raw = param_io.load_params(os.path.join(self.dir, "reference.buffers"))
        return {k: torch.tensor(v, dtype=torch.float32).reshape(self.buffer_shapes[k])
                for k, v in raw.items()}


class StepBatchNorm(nn.BatchNorm2d):
    """nn.BatchNorm2d whose running statistics move once per step (apply_step), from every
    input it normalised in training since the last one."""

    def __init__(self, channels, eps, momentum):
        super().__init__(channels, eps=eps, momentum=0.0)
        self.step_momentum = momentum
        self.seen = []

    def forward(self, x):
        if self.training:
            self.seen.append(x.detach())
        return super().forward(x)

    def apply_step(self):
        x = torch.cat(self.seen)
        self.seen = []
        mean = x.mean(dim=(0, 2, 3))
        var = x.var(dim=(0, 2, 3), unbiased=True)
        m = self.step_momentum
        with torch.no_grad():
            self.running_mean.copy_((1 - m) * self.running_mean + m * mean)
            self.running_var.copy_((1 - m) * self.running_var + m * var)


class BasicBlock(nn.Module):
    def __init__(self, channels, out_channels, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, out_channels, 3, stride, 1, bias=False)
        self.bn1 = StepBatchNorm(out_channels, BATCHNORM_EPS, BATCHNORM_MOMENTUM)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.bn2 = StepBatchNorm(out_channels, BATCHNORM_EPS, BATCHNORM_MOMENTUM)
        self.projection = stride != 1 or channels != out_channels
        if self.projection:
            self.sconv = nn.Conv2d(channels, out_channels, 1, stride, 0, bias=False)
            self.sbn = StepBatchNorm(out_channels, BATCHNORM_EPS, BATCHNORM_MOMENTUM)

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.sbn(self.sconv(x)) if self.projection else x))

    def named(self, prefix):
        """(parameters, buffers) by dapple's names, in dapple's order."""
        parts = [("conv1.", self.conv1), ("bn1.", self.bn1), ("conv2.", self.conv2),
                 ("bn2.", self.bn2)]
        if self.projection:
            parts += [("shortcut.conv.", self.sconv), ("shortcut.bn.", self.sbn)]
        params, buffers = {}, {}
        for name, m in parts:
            params[prefix + name + "weight"] = m.weight
            if isinstance(m, nn.BatchNorm2d):
                params[prefix + name + "bias"] = m.bias
                buffers[prefix + name + "running_mean"] = m.running_mean
                buffers[prefix + name + "running_var"] = m.running_var
        return params, buffers


def window(size, kernel, stride, padding):
    return (size + 2 * padding - kernel) // stride + 1


class Cnn(nn.Module):
    """The model of a job spec's image layers, with `dapple_params` and `dapple_buffers`:
    dapple's names -> this model's tensors, computing in `dtype` (inputs are converted)."""

    def __init__(self, spec, dtype=DTYPE):
        super().__init__()
        self.dtype = dtype
        torch.set_default_dtype(dtype)
        try:
            self._build(spec)
        finally:
            torch.set_default_dtype(torch.float32)

    def _build(self, spec):
        shape = [int(d) for d in spec["model"]["input_shape"]]  # [C, H, W], then [features]
        self.layers = nn.ModuleList()
        self.dapple_params, self.dapple_buffers = {}, {}
        for i, layer in enumerate(spec["model"]["layers"]):
            kind = layer["type"]
            p = layer.get(kind, {})
            prefix = "layer%d." % i
            if kind == "conv2d":
                k, s, pad = int(p["kernel"]), int(p.get("stride", 1)), int(p.get("padding", 0))
                m = nn.Conv2d(shape[0], int(p["out_channels"]), k, s, pad,
                              bias=bool(p.get("bias", True)))
                shape = [int(p["out_channels"]), window(shape[1], k, s, pad),
                         window(shape[2], k, s, pad)]
                self.dapple_params[prefix + "weight"] = m.weight
                if m.bias is not None:
                    self.dapple_params[prefix + "bias"] = m.bias
            elif kind == "batchnorm2d":
                m = StepBatchNorm(shape[0], float(p.get("eps", BATCHNORM_EPS)),
                                  float(p.get("momentum", BATCHNORM_MOMENTUM)))
                self.dapple_params.update({prefix + "weight": m.weight, prefix + "bias": m.bias})
                self.dapple_buffers.update({prefix + "running_mean": m.running_mean,
                                            prefix + "running_var": m.running_var})
            elif kind == "relu":
                m = nn.ReLU()
            elif kind in ("maxpool2d", "avgpool2d"):
                k = int(p["kernel"])
                s, pad = int(p.get("stride", k)), int(p.get("padding", 0))
                m = (nn.MaxPool2d(k, s, pad) if kind == "maxpool2d"
                     else nn.AvgPool2d(k, s, pad, count_include_pad=True))
                shape = [shape[0], window(shape[1], k, s, pad), window(shape[2], k, s, pad)]
            elif kind == "global_avgpool":
                m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
                shape = [shape[0]]
            elif kind == "residual_block":
                out, s = int(p["out_channels"]), int(p.get("stride", 1))
                m = BasicBlock(shape[0], out, s)
                params, buffers = m.named(prefix)
                self.dapple_params.update(params)
                self.dapple_buffers.update(buffers)
                shape = [out, window(shape[1], 3, s, 1), window(shape[2], 3, s, 1)]
            elif kind == "flatten":
                m = nn.Flatten()
                shape = [int(torch.tensor(shape).prod())]
            elif kind == "linear":
                m = nn.Linear(int(torch.tensor(shape).prod()), int(p["out"]))
                shape = [int(p["out"])]
                self.dapple_params.update({prefix + "weight": m.weight, prefix + "bias": m.bias})
            else:
                raise ValueError("model.layers[%d]: no PyTorch model of type %s" % (i, kind))
            self.layers.append(m)

    def forward(self, x):
        x = x.to(self.dtype)
        for m in self.layers:
            x = m(x)
        return x

    def apply_step_statistics(self):
        for m in self.modules():
            if isinstance(m, StepBatchNorm):
                m.apply_step()

    def load_dapple(self, params):
        """Copies dapple's tensors {name: tensor} into the model; every parameter exactly once.
        The buffers keep PyTorch's initial values (mean 0, variance 1), as dapple's."""
        if sorted(params) != sorted(self.dapple_params):
            raise ValueError("dapple's parameters %s are not the model's %s" % (
                sorted(params), sorted(self.dapple_params)))
        with torch.no_grad():
            for name, p in self.dapple_params.items():
                p.copy_(params[name])


def train(trace, model):
    """Trains `model` (dapple's initial weights loaded) on the trace's batches, each step's batch
    run as its micro-batches (batch norm's row groups), the mean loss over the whole batch;
    returns a torch_gpt.Result (with cpu_seconds: this process's CPU time in the steps)."""
    training = trace.spec["training"]
    micro = int(training.get("micro_batch", trace.global_batch))
    opt = torch_gpt.make_optimizer(model, trace.optimizer)
    result = torch_gpt.Result()
    model.train()
    for step, (images, targets) in enumerate(trace.batches()):
        t0, cpu0 = time.perf_counter(), time.process_time()
        lr = torch_gpt.learning_rate(training, step, trace.total_steps)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        logits = torch.cat([model(images[b:b + micro])
                            for b in range(0, trace.global_batch, micro)])
        loss = F.cross_entropy(logits, targets)
        loss.backward()
        if step == 0:
            result.gradients0 = {n: p.grad.detach().clone() for n, p in model.dapple_params.items()}
        opt.step()
        model.apply_step_statistics()
        result.seconds += time.perf_counter() - t0
        result.cpu_seconds += time.process_time() - cpu0
        result.losses.append(loss.item())
        result.learning_rates.append(lr)
    return result


def evaluate(model, images, targets, chunk=1000):
    """(mean loss, accuracy) over the evaluation split, in evaluation mode (running
    statistics)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    with torch.no_grad():
        for begin in range(0, images.shape[0], chunk):
            logits = model(images[begin:begin + chunk])
            y = targets[begin:begin + chunk]
            loss_sum += F.cross_entropy(logits, y, reduction="sum").item()
            correct += int((logits.argmax(-1) == y).sum())
    return loss_sum / images.shape[0], correct / images.shape[0]

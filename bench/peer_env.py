"""The environment every benchmark runs both peers (dapple and PyTorch) in, defined once.

- Without OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE: this machine sets them for older OpenBLAS
  builds, and they slow the kernels of both peers (docs/benchmarks.md, the demo model).
- With OPENBLAS_NUM_THREADS=1 and OMP_NUM_THREADS=1: PyTorch's one-thread figure must be one
  thread. torch.set_num_threads(1) limits PyTorch's own (OpenMP) threads, not the threads of the
  OpenBLAS library it calls, which reads its count from the environment when it is loaded:
  without these PyTorch used both vCPUs (39 ms of CPU per 20 ms step of the demo MLP). dapple
  sets one compute thread itself (kernels/cpu/blas.h); the variables change nothing there.
"""
import os
import sys

DROPPED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


def peer_env(base=None):
    """`base` (default os.environ) without DROPPED and with ONE_THREAD."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in DROPPED}
    env.update(ONE_THREAD)
    return env


def reexec_in_peer_env():
    """Restarts this script in peer_env() unless it already runs in it. Call before importing
    torch (OpenBLAS reads the variables when it is loaded)."""
    if dict(os.environ) != peer_env():
        os.execve(sys.executable, [sys.executable] + sys.argv, peer_env())

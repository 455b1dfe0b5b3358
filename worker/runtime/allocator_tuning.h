// The C allocator's settings for a process that trains: call once at the start of main, before
// other threads allocate (the worker daemon, dapple-reference).
//
// Why: a training step allocates and frees the same large activation and gradient buffers every
// step. With glibc's defaults the freed top of the heap is returned to the kernel (trimmed) and
// faulted in again at the next step: docs/benchmarks.md measured about 68,000 minor page faults
// per step of the GPT example and about 40 % of dapple-reference's CPU time in the kernel.
// Keeping freed memory mapped removes that; the peak (what a stage really needs) is unchanged.
//
// Thread safety: mallopt is not meant to race with allocations on other threads; call it first.
#ifndef DAPPLE_WORKER_RUNTIME_ALLOCATOR_TUNING_H_
#define DAPPLE_WORKER_RUNTIME_ALLOCATOR_TUNING_H_

namespace dapple::worker {

// Sets glibc's trim threshold to 1 GiB (freed memory at the heap's top stays mapped up to that)
// and its mmap threshold to its largest allowed value, 32 MiB on 64-bit (buffers below it come
// from the heap and are reused, not unmapped at every free). No effect on other C libraries.
void TuneAllocatorForTraining();

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_ALLOCATOR_TUNING_H_

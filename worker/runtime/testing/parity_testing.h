// The in-process parity harness shared by the runtime's tests (CPU stages in
// worker/runtime/stage_runtime_test.cc, GPU stages in worker/runtime/cuda): build a small MLP job,
// run every stage's StageRuntime on its own thread for some steps and one evaluation, and check
// per-step loss and final weights against the single-device ReferenceTrainer within 1e-5
// relative. For tests only (links GoogleTest).
#ifndef DAPPLE_WORKER_RUNTIME_TESTING_PARITY_TESTING_H_
#define DAPPLE_WORKER_RUNTIME_TESTING_PARITY_TESTING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "dapple/v1/job.pb.h"
#include "dapple/v1/plan.pb.h"
#include "worker/data/dataset.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker::parity {

// Fashion-MNIST from $DAPPLE_DATA_DIR, else Debian's folder; loaded once per process (aborts
// when missing: a test machine without the dataset is misconfigured).
std::string DataDir();
const Dataset& TrainSet();
const Dataset& TestSet();

struct SpecOptions {
  int64_t global_batch = 64;
  int64_t micro_batch = 64;
  std::string optimizer = "sgd";  // sgd: lr 0.1, momentum 0.9; adamw: lr 0.01
  double weight_decay = 0;
  int64_t hidden1 = 32;  // flatten, linear hidden1, relu, linear hidden2, gelu, linear 10
  int64_t hidden2 = 16;
  // Blocks (linear hidden2, relu) added before the last linear: a deeper model (6 + 2 n layers)
  // for pipelines of many (virtual) stages.
  int extra_blocks = 0;
  uint64_t seed = 7;
};
v1::JobSpec ParitySpec(const SpecOptions& options);

// Stage s covers layers [s * L / P, (s + 1) * L / P - 1].
v1::ParallelPlanSummary UniformPlan(int layers, int stages);

// Interleaved 1F1B: the P * v virtual stages cut the layers evenly; rank r (of `stages`, each
// with `replicas` replicas) holds virtual stages c * P + r for c in [0, chunks).
v1::ParallelPlanSummary InterleavedPlan(int layers, int stages, int chunks, int replicas);

// The assignment of `stage` for `spec` on `plan` with `program`.
v1::StageAssignment Assignment(const v1::JobSpec& spec, const v1::ParallelPlanSummary& plan,
                               int stage, const v1::RankProgram& program);

// ||a - b|| / ||b|| (L2, in double).
double RelativeL2(const std::vector<float>& a, const std::vector<float>& b);

struct PipelineRun {
  std::vector<double> losses;        // per step, from the last stage
  std::vector<absl::Status> status;  // per stage
  double eval_accuracy = -1;         // from the last stage
  double eval_loss = -1;             // from the last stage
};

// Runs runtimes[s] on thread s for `steps` steps (0..steps-1), then Evaluate(1).
PipelineRun RunPipeline(const std::vector<std::unique_ptr<StageRuntime>>& runtimes, int steps);

// The one exception to comparing every weight: under an adaptive optimizer (adamw), the key
// third [C, 2C) of each transformer block's `attn.qkv.bias` [3C] (q, k, v order). In exact
// arithmetic its gradient is 0 (the key bias adds q_i . b_k to every score of query row i, and
// softmax is invariant to a constant added to a row), so the computed gradient is rounding
// noise that depends on the micro-batch split and the summation order; Adam divides it by its
// own root mean square and turns it into steps of about lr in either direction, so two correct
// runs differ there by O(lr). (The loss does not depend on that slice, so nothing else is
// affected; under SGD the noise is scaled by lr and the slice is compared like any weight.)
// Returns the slice [begin, end) of parameter `name` with `elements` values that is not
// compared under `spec`'s optimizer, or {0, 0}. Documented in docs/architecture.md
// ("Correctness backbone").
std::pair<int64_t, int64_t> UncomparedSlice(const v1::JobSpec& spec, const std::string& name,
                                            int64_t elements);

// gtest EXPECTs: every stage OK, per-step loss within 1e-5 relative of the reference trainer on
// `spec`, every parameter within 1e-5 relative L2 (all but its UncomparedSlice, for which the
// reference's gradient must instead be below 1e-5 of its tensor's gradient norm at every
// step), each parameter present once (a tied copy, kernels::Param::tied_to, is compared with
// its owner and not counted again), and test accuracy within 1e-3. The reference trains on
// `train` and evaluates on `eval` (Fashion-MNIST's TrainSet / TestSet by default).
void ExpectMatchesReference(const v1::JobSpec& spec, int steps,
                            const std::vector<std::unique_ptr<StageRuntime>>& runtimes,
                            const PipelineRun& run);
void ExpectMatchesReference(const v1::JobSpec& spec, int steps,
                            const std::vector<std::unique_ptr<StageRuntime>>& runtimes,
                            const PipelineRun& run, const Dataset& train, const Dataset& eval);

}  // namespace dapple::worker::parity

#endif  // DAPPLE_WORKER_RUNTIME_TESTING_PARITY_TESTING_H_

// Test helpers shared by the planner's model tests (gpt_planning_test.cc, cnn_planning_test.cc):
// planning a job as the coordinator does, and the memory model's non-weight, non-activation
// terms computed by hand (an independent check of common/memory_model.h). Test-only.
#ifndef DAPPLE_COORDINATOR_PLANNER_PLANNING_TESTING_H_
#define DAPPLE_COORDINATOR_PLANNER_PLANNING_TESTING_H_

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/model_info.h"
#include "coordinator/planner/planner.h"
#include "dapple/v1/job.pb.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {

// The source tree: $DAPPLE_SOURCE_DIR, else the one this test was built from.
inline std::string SourceRoot() {
  const char* env = std::getenv("DAPPLE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : DAPPLE_SOURCE_ROOT;
}

// examples/<name> parsed as dapplectl submits it.
inline v1::JobSpec ExampleSpec(const std::string& name) {
  const std::string path = absl::StrCat(SourceRoot(), "/examples/", name);
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text, name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::JobSpec();
}

// As the coordinator plans a job: replicas up to parallel.devices.
inline v1::ParallelPlan PlanOrDie(const v1::JobSpec& spec) {
  PlanInputs inputs;
  inputs.max_replicas = spec.parallel().devices();
  absl::StatusOr<v1::ParallelPlan> plan = MakePlan(spec, inputs);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : v1::ParallelPlan();
}

// What a replica holds besides its weights and its micro-batches' activations
// (common/memory_model.h), by hand: the send and receive buffers, one set per micro-batch id (M
// under dapple: the output it sends and the gradient it receives for it unless it is the last
// stage, the input gradient it sends back unless it is the first); the backward's two buffers
// for the gradients between layers (the largest inner output at even and at odd distance from
// the last layer); on the last stage each in-flight micro-batch's dL/dlogits.
inline int64_t BufferBytes(const std::vector<LayerInfo>& layers, int first, int last,
                           int64_t micro_batches, int in_flight, int64_t rows) {
  const bool is_last = last + 1 == static_cast<int>(layers.size());
  const int64_t per_id =
      (is_last ? 0 : 2 * layers[last].output_bytes) + (first == 0 ? 0 : InputBytes(layers[first]));
  int64_t buffers[2] = {0, 0};
  for (int l = first; l < last; ++l) {
    buffers[(last - 1 - l) % 2] = std::max(buffers[(last - 1 - l) % 2], layers[l].output_bytes);
  }
  const int64_t logit_gradients = is_last ? in_flight * layers[last].output_bytes : 0;
  return rows * (micro_batches * per_id + buffers[0] + buffers[1] + logit_gradients);
}

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_PLANNER_PLANNING_TESTING_H_

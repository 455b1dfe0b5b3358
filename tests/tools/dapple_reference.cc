// dapple-reference: trains a job spec in ONE process without pipelining (the single-device
// reference of the parity harness) and writes what the harness compares:
//   <out>/reference.losses   one mean loss per step, "%.9g" per line
//   <out>/reference.params   all parameters (worker/runtime/param_io.h format)
//   <out>/reference.buffers  for a model with buffers (batch norm's running statistics): all
//                            of them after the last step (param_io format)
// and prints "steps N seconds S samples_per_second X step_ms Y step_cpu_ms Z" (the single-device
// throughput; the seconds count the training steps only; step_cpu_ms is the process's CPU time
// per step, which a loaded machine does not inflate as it does the wall time).
//
// With --trace it also writes what an oracle outside the process (tests/torch: the same model
// in PyTorch) needs to train the same model on the same data and compare:
//   <out>/initial.params     the parameters before step 0 (param_io format)
//   <out>/gradients0.params  step 0's gradient of every parameter before clipping and the
//                            update (param_io format, named as the parameters)
//   <out>/batches.bin        per step: the inputs, float32 [global_batch, input elements] (token
//                            ids as exact floats), then the targets, int32 [global_batch,
//                            targets per sample]; little-endian, nothing else
//   <out>/eval.bin           the evaluation split in the same layout ([eval samples, ...])
//   <out>/reference.eval     "<loss> <accuracy>" over the evaluation split after the last step
//   <out>/trace.json         the spec as resolved here (proto field names), the sizes of the
//                            binary files, the job's total steps (common/steps.h; the
//                            learning-rate schedule's end), every parameter's and buffer's
//                            shape and the optimizer's hyper-parameters with their defaults
//                            applied
// Usage: dapple-reference JOB.yaml STEPS OUT_DIR [--trace]   (STEPS 0: the job's total steps,
// common/steps.h TotalSteps)
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/model_info.h"
#include "common/status.h"
#include "common/steps.h"
#include "common/text_data.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/cpu/blas.h"
#include "kernels/cpu/optimizer.h"
#include "worker/data/dataset.h"
#include "worker/runtime/allocator_tuning.h"
#include "worker/runtime/param_io.h"
#include "worker/runtime/reference_trainer.h"

namespace dapple {
namespace {

absl::StatusOr<v1::JobSpec> LoadSpec(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << f.rdbuf();
  DAPPLE_ASSIGN_OR_RETURN(v1::JobSpec spec, ParseJobSpec(ss.str(), path));
  // As the coordinator does at submit: a text file's sample counts go into the spec, which the
  // step arithmetic (common/steps.h) reads.
  DAPPLE_RETURN_IF_ERROR(ResolveTextData(spec.mutable_data()));
  return spec;
}

template <typename T>
void WriteRaw(std::ofstream& f, const std::vector<T>& v) {
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
}

// Parameters named as `params` with the values `values` (gradients), in param_io format.
absl::Status SaveNamed(const std::string& path, const std::vector<kernels::Param*>& params,
                       const std::vector<std::vector<float>>& values) {
  std::vector<kernels::Param> copies(params.size());
  std::vector<kernels::Param*> ptrs;
  for (size_t i = 0; i < params.size(); ++i) {
    copies[i].name = params[i]->name;
    copies[i].value.data = values[i];
    ptrs.push_back(&copies[i]);
  }
  return worker::SaveParams(path, ptrs);
}

// The whole evaluation split, inputs then targets.
absl::Status SaveEvalSplit(const std::string& path, const worker::Dataset& eval) {
  std::vector<int64_t> idx(eval.size());
  for (int64_t i = 0; i < eval.size(); ++i) idx[i] = i;
  std::vector<float> inputs(eval.size() * eval.sample_elements());
  std::vector<int32_t> targets(eval.size() * eval.targets_per_sample());
  eval.Gather(idx.data(), eval.size(), inputs.data(), targets.data());
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  WriteRaw(f, inputs);
  WriteRaw(f, targets);
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status SaveTraceJson(const std::string& path, const v1::JobSpec& spec, long steps,
                           const worker::Datasets& data) {
  std::string spec_json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  if (!google::protobuf::util::MessageToJsonString(spec, &spec_json, options).ok()) {
    return absl::InternalError("cannot write the spec as JSON");
  }
  DAPPLE_ASSIGN_OR_RETURN(const std::vector<LayerInfo> infos, InferLayers(spec.model()));
  auto entry = [](const LayerInfo& info, const ParamInfo& p) {
    return absl::StrCat("{\"name\": \"", ParamName(info.index, p.name), "\", \"shape\": [",
                        absl::StrJoin(p.shape, ", "), "]}");
  };
  std::vector<std::string> params, buffers;
  for (const LayerInfo& info : infos) {
    for (const ParamInfo& p : info.params) {
      if (!p.tied_to.empty()) continue;  // one parameter in one process
      params.push_back(entry(info, p));
    }
    for (const ParamInfo& b : info.buffers) buffers.push_back(entry(info, b));
  }
  const v1::OptimizerSpec& o = spec.training().optimizer();
  const kernels::AdamWBetas adam = kernels::AdamWBetasOf(o);
  std::ofstream f(path, std::ios::trunc);
  f.precision(17);
  f << "{\"spec\": " << spec_json << ",\n \"steps\": " << steps
    << ",\n \"total_steps\": " << TotalSteps(spec)
    << ",\n \"global_batch\": " << spec.training().global_batch()
    << ",\n \"input_elements\": " << data.train->sample_elements()
    << ",\n \"targets_per_sample\": " << data.train->targets_per_sample()
    << ",\n \"eval_samples\": " << data.eval->size() << ",\n \"params\": ["
    << absl::StrJoin(params, ",\n  ") << "],\n \"buffers\": [" << absl::StrJoin(buffers, ",\n  ")
    << "],\n \"optimizer\": {\"type\": \"" << o.type() << "\", \"lr\": " << o.lr()
    << ", \"momentum\": " << o.momentum() << ", \"weight_decay\": " << o.weight_decay()
    << ", \"beta1\": " << adam.beta1 << ", \"beta2\": " << adam.beta2 << ", \"eps\": " << adam.eps
    << "}}\n";
  if (!f) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

absl::Status Run(const std::string& spec_path, long steps, const std::string& out, bool trace) {
  DAPPLE_ASSIGN_OR_RETURN(const v1::JobSpec spec, LoadSpec(spec_path));
  if (steps == 0) steps = TotalSteps(spec);
  DAPPLE_ASSIGN_OR_RETURN(const worker::Datasets data, worker::LoadDatasets(spec.data()));
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<worker::ReferenceTrainer> trainer,
                          worker::ReferenceTrainer::Create(spec, data.train.get()));
  std::ofstream batches;
  if (trace) {
    DAPPLE_RETURN_IF_ERROR(SaveTraceJson(out + "/trace.json", spec, steps, data));
    DAPPLE_RETURN_IF_ERROR(worker::SaveParams(out + "/initial.params", trainer->Params()));
    batches.open(out + "/batches.bin", std::ios::binary | std::ios::trunc);
  }
  std::ofstream losses(out + "/reference.losses");
  worker::ReferenceTrainer::StepTrace step_trace;
  double seconds = 0, cpu_seconds = 0;
  for (long s = 0; s < steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const double loss = trainer->Step(s, trace ? &step_trace : nullptr);
    cpu_seconds += static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g\n", loss);
    losses << buf;
    if (!trace) continue;
    WriteRaw(batches, step_trace.inputs);
    WriteRaw(batches, step_trace.targets);
    if (s == 0) {
      DAPPLE_RETURN_IF_ERROR(
          SaveNamed(out + "/gradients0.params", trainer->Params(), step_trace.gradients));
    }
  }
  if (!losses || (trace && !batches)) {
    return absl::UnavailableError(absl::StrCat("cannot write into ", out));
  }
  // One line for bench/: the single-device training throughput.
  std::printf("steps %ld seconds %.4f samples_per_second %.1f step_ms %.3f step_cpu_ms %.3f\n",
              steps, seconds, steps * spec.training().global_batch() / seconds,
              1e3 * seconds / steps, 1e3 * cpu_seconds / steps);
  DAPPLE_RETURN_IF_ERROR(worker::SaveParams(out + "/reference.params", trainer->Params()));
  if (!trainer->Buffers().empty()) {
    DAPPLE_RETURN_IF_ERROR(worker::SaveParams(out + "/reference.buffers", trainer->Buffers()));
  }
  if (!trace) return absl::OkStatus();
  DAPPLE_RETURN_IF_ERROR(SaveEvalSplit(out + "/eval.bin", *data.eval));
  double eval_loss = 0, eval_accuracy = 0;
  trainer->Evaluate(*data.eval, &eval_loss, &eval_accuracy);
  std::ofstream eval(out + "/reference.eval");
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g %.9g\n", eval_loss, eval_accuracy);
  eval << buf;
  if (!eval) return absl::UnavailableError(absl::StrCat("cannot write ", out, "/reference.eval"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace dapple

int main(int argc, char** argv) {
  dapple::worker::TuneAllocatorForTraining();
  const bool trace = argc == 5 && std::string(argv[4]) == "--trace";
  if (argc != 4 && !trace) {
    std::cerr << "usage: dapple-reference JOB.yaml STEPS OUT_DIR [--trace]\n";
    return 2;
  }
  dapple::kernels::SetComputeThreads(1);
  const absl::Status s = dapple::Run(argv[1], std::stol(argv[2]), argv[3], trace);
  if (!s.ok()) {
    std::cerr << "dapple-reference: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

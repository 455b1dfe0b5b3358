// dapple-reference: trains a job spec in ONE process without pipelining (the single-device
// reference of the parity harness) and writes what the harness compares:
//   <out>/reference.losses   one mean loss per step, "%.9g" per line
//   <out>/reference.params   all parameters (worker/runtime/param_io.h format)
// and prints "steps N seconds S samples_per_second X" (the single-device throughput).
// Usage: dapple-reference JOB.yaml STEPS OUT_DIR
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "common/job_spec.h"
#include "common/text_data.h"
#include "kernels/cpu/blas.h"
#include "worker/data/dataset.h"
#include "worker/runtime/param_io.h"
#include "worker/runtime/reference_trainer.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: dapple-reference JOB.yaml STEPS OUT_DIR\n";
    return 2;
  }
  dapple::kernels::SetComputeThreads(1);
  std::ifstream f(argv[1]);
  if (!f) {
    std::cerr << "dapple-reference: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  auto spec = dapple::ParseJobSpec(ss.str(), argv[1]);
  if (!spec.ok()) {
    std::cerr << "dapple-reference: " << spec.status().message() << "\n";
    return 1;
  }
  // As the coordinator does at submit: a text file's sample counts go into the spec, which the
  // step arithmetic (common/steps.h) reads.
  if (auto s = dapple::ResolveTextData(spec->mutable_data()); !s.ok()) {
    std::cerr << "dapple-reference: " << s.message() << "\n";
    return 1;
  }
  auto data = dapple::worker::LoadDatasets(spec->data());
  if (!data.ok()) {
    std::cerr << "dapple-reference: " << data.status().message() << "\n";
    return 1;
  }
  auto trainer = dapple::worker::ReferenceTrainer::Create(*spec, data->train.get());
  if (!trainer.ok()) {
    std::cerr << "dapple-reference: " << trainer.status().message() << "\n";
    return 1;
  }
  const long steps = std::stol(argv[2]);
  const std::string out = argv[3];
  std::ofstream losses(out + "/reference.losses");
  const auto t0 = std::chrono::steady_clock::now();
  for (long s = 0; s < steps; ++s) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.9g\n", (*trainer)->Step(s));
    losses << buf;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // One line for bench/: the single-device training throughput.
  std::printf("steps %ld seconds %.4f samples_per_second %.1f\n", steps, seconds,
              steps * spec->training().global_batch() / seconds);
  auto st = dapple::worker::SaveParams(out + "/reference.params", (*trainer)->Params());
  if (!st.ok()) {
    std::cerr << "dapple-reference: " << st.message() << "\n";
    return 1;
  }
  return 0;
}

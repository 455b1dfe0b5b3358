// Pipe-SGD's staleness-1 rule, checked on a linear model (one linear layer, softmax
// cross-entropy, plain SGD) through the CPU backend against a sequence computed here by hand in
// double precision from the same data: warm-up 0, 1 and 2, D = 1 and 2 (replicas as threads on
// an in-process collective).
#include "worker/runtime/pipesgd_updater.h"

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "common/status.h"
#include "gtest/gtest.h"
#include "worker/comm/testing/local_collective.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {
namespace {

using testing::LocalCollective;
using testing::LocalCollectiveGroup;

constexpr int kIn = 6, kOut = 3, kRows = 4;
constexpr double kLr = 0.5;

v1::JobSpec LinearSpec() {
  v1::JobSpec spec;
  spec.set_name("pipesgd-linear");
  spec.mutable_model()->add_input_shape(kIn);
  auto* layer = spec.mutable_model()->add_layers();
  layer->set_type("linear");
  layer->mutable_linear()->set_out(kOut);
  spec.mutable_model()->set_loss("softmax_cross_entropy");
  auto* t = spec.mutable_training();
  t->set_global_batch(kRows);
  t->set_micro_batch(kRows);
  t->set_epochs(1);
  t->set_seed(7);
  t->mutable_optimizer()->set_type("sgd");
  t->mutable_optimizer()->set_lr(kLr);
  t->mutable_optimizer()->set_momentum(0.0);
  return spec;
}

// Replica r's samples of step t: deterministic, different per (r, t).
float X(int r, int t, int row, int col) {
  return static_cast<float>(std::sin(1.3 * r + 0.7 * t + 0.37 * row + 1.1 * col) * 2.0);
}
int32_t Label(int r, int t, int row) { return (r + 2 * t + row) % kOut; }

// Weights as one vector in HostParams order: W [kOut, kIn] row-major, then b [kOut].
using Weights = std::vector<double>;

// The global-batch gradient at w for step t over D replicas, by hand: for each sample,
// p = softmax(W x + b), dW += (p - onehot) x^T / (D kRows), db += (p - onehot) / (D kRows).
Weights Gradient(const Weights& w, int t, int replicas) {
  Weights g(w.size(), 0.0);
  const double scale = 1.0 / (replicas * kRows);
  for (int r = 0; r < replicas; ++r) {
    for (int row = 0; row < kRows; ++row) {
      double logits[kOut], max = -1e300, sum = 0;
      for (int j = 0; j < kOut; ++j) {
        logits[j] = w[kOut * kIn + j];
        for (int i = 0; i < kIn; ++i) logits[j] += w[j * kIn + i] * X(r, t, row, i);
        max = std::max(max, logits[j]);
      }
      for (int j = 0; j < kOut; ++j) sum += std::exp(logits[j] - max);
      for (int j = 0; j < kOut; ++j) {
        const double d =
            (std::exp(logits[j] - max) / sum - (j == Label(r, t, row) ? 1 : 0)) * scale;
        for (int i = 0; i < kIn; ++i) g[j * kIn + i] += d * X(r, t, row, i);
        g[kOut * kIn + j] += d;
      }
    }
  }
  return g;
}

double Norm(const Weights& g) {
  double sq = 0;
  for (double v : g) sq += v * v;
  return std::sqrt(sq);
}

// w - lr g, with g first scaled to norm max_norm when longer (max_norm > 0: clipping, as
// torch.nn.utils.clip_grad_norm_ with its 1e-6).
Weights Step(const Weights& w, const Weights& g, double max_norm = 0) {
  const double n = Norm(g);
  const double scale = max_norm > 0 && n + 1e-6 > max_norm ? max_norm / (n + 1e-6) : 1.0;
  Weights out(w.size());
  for (size_t i = 0; i < w.size(); ++i) out[i] = w[i] - kLr * scale * g[i];
  return out;
}

// The documented sequence: after step t (t = 0 .. steps - 1), then after Finish; each applied
// gradient clipped to `max_norm` (> 0).
std::vector<Weights> Expected(const Weights& w0, int steps, int warmup, int replicas,
                              bool stale = true, double max_norm = 0) {
  std::vector<Weights> w = {w0};  // w[t] = weights step t computes with
  std::vector<Weights> after;
  for (int t = 0; t < steps; ++t) {
    if (!stale || t < warmup) {
      w.push_back(Step(w[t], Gradient(w[t], t, replicas), max_norm));
    } else if (t == warmup) {
      w.push_back(w[t]);  // pipeline fill: nothing applied
    } else {
      w.push_back(Step(w[t], Gradient(w[t - 1], t - 1, replicas), max_norm));
    }
    after.push_back(w.back());
  }
  // Finish applies the last step's gradient, computed at the weights that step used.
  if (stale && steps - 1 >= warmup) {
    after.push_back(Step(w[steps], Gradient(w[steps - 1], steps - 1, replicas), max_norm));
  } else {
    after.push_back(w.back());
  }
  return after;
}

Weights Read(StageBackend& backend) {
  Weights out;
  absl::StatusOr<std::vector<kernels::Param*>> params = backend.HostParams();
  EXPECT_TRUE(params.ok()) << params.status();
  if (!params.ok()) return out;
  for (kernels::Param* p : *params) {
    for (float v : p->value.data) out.push_back(v);
  }
  return out;
}

// One replica: per step its forward, loss (scaled by 1 / global batch), backward, then the
// updater's two calls; the weights after each OnOptimizerStep and after Finish.
void RunReplica(int r, int replicas, int steps, int warmup, Compression compression,
                double max_norm, LocalCollectiveGroup* group, std::vector<Weights>* trace,
                absl::Status* status) {
  auto run = [&]() -> absl::Status {
    absl::StatusOr<std::unique_ptr<StageBackend>> backend = MakeCpuStageBackend(LinearSpec(), 0, 0);
    if (!backend.ok()) return backend.status();
    LocalCollective collective(group, r);
    PipeSgdOptions options;
    options.warmup_steps = warmup;
    options.compression = compression;
    options.max_grad_norm = max_norm;
    absl::StatusOr<std::unique_ptr<PipeSgdUpdater>> updater =
        PipeSgdUpdater::Create(&collective, backend->get(), options);
    if (!updater.ok()) return updater.status();
    StageBackend& b = **backend;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> x(kRows * kIn);
      std::vector<int32_t> labels(kRows);
      for (int row = 0; row < kRows; ++row) {
        labels[row] = Label(r, t, row);
        for (int i = 0; i < kIn; ++i) x[row * kIn + i] = X(r, t, row, i);
      }
      if (absl::Status s = b.LoadInput(0, x.data(), kRows); !s.ok()) return s;
      if (absl::Status s = b.Forward(0, kRows, kernels::ForwardContext{}); !s.ok()) return s;
      absl::StatusOr<double> loss = b.Loss(
          0, labels.data(), kRows, 1.0f / static_cast<float>(replicas * kRows), true, nullptr);
      if (!loss.ok()) return loss.status();
      if (absl::Status s = b.Backward(0, 0, kRows, true, false); !s.ok()) return s;
      if (absl::Status s = (*updater)->OnGradients(t); !s.ok()) return s;
      if (absl::Status s = (*updater)->OnOptimizerStep(t); !s.ok()) return s;
      trace->push_back(Read(b));
    }
    if (absl::Status s = (*updater)->Finish(); !s.ok()) return s;
    trace->push_back(Read(b));
    if ((*updater)->allreduces_done() != steps) {
      return absl::InternalError(
          absl::StrCat((*updater)->allreduces_done(), " AllReduces for ", steps, " steps"));
    }
    return absl::OkStatus();
  };
  *status = run();
}

std::vector<std::vector<Weights>> Train(int replicas, int steps, int warmup,
                                        Compression compression = Compression::kNone,
                                        double max_norm = 0) {
  LocalCollectiveGroup group(replicas);
  std::vector<std::vector<Weights>> traces(replicas);
  std::vector<absl::Status> status(replicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back(RunReplica, r, replicas, steps, warmup, compression, max_norm, &group,
                         &traces[r], &status[r]);
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < replicas; ++r) EXPECT_TRUE(status[r].ok()) << "replica " << r << status[r];
  return traces;
}

Weights InitialWeights() {
  absl::StatusOr<std::unique_ptr<StageBackend>> backend = MakeCpuStageBackend(LinearSpec(), 0, 0);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return backend.ok() ? Read(**backend) : Weights();
}

double MaxDiff(const Weights& a, const Weights& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

struct Case {
  int replicas;
  int warmup;
};

class PipeSgdStalenessTest : public ::testing::TestWithParam<Case> {};

TEST_P(PipeSgdStalenessTest, FollowsTheStaleOneSequence) {
  const Case c = GetParam();
  const int kSteps = 6;
  const Weights w0 = InitialWeights();
  const std::vector<Weights> expected = Expected(w0, kSteps, c.warmup, c.replicas);
  const std::vector<Weights> sync = Expected(w0, kSteps, c.warmup, c.replicas, /*stale=*/false);
  const std::vector<std::vector<Weights>> traces = Train(c.replicas, kSteps, c.warmup);
  ASSERT_EQ(traces.size(), static_cast<size_t>(c.replicas));
  for (int r = 0; r < c.replicas; ++r) {
    ASSERT_EQ(traces[r].size(), expected.size());
    for (size_t t = 0; t < expected.size(); ++t) {
      // fp32 training against a double-precision hand computation: parity's 1e-5 relative.
      for (size_t i = 0; i < w0.size(); ++i) {
        ASSERT_NEAR(traces[r][t][i], expected[t][i],
                    1e-5 * std::max(1.0, std::fabs(expected[t][i])))
            << "replica " << r << " after step " << t << " weight " << i;
      }
      // Replicas stay bitwise identical.
      ASSERT_EQ(traces[r][t], traces[0][t]) << "replica " << r << " after step " << t;
    }
  }
  // The check discriminates: the synchronous sequence is far from the stale one after the
  // pipeline fill (step W), while the warm-up steps match it.
  for (int t = 0; t < c.warmup; ++t) EXPECT_LT(MaxDiff(expected[t], sync[t]), 1e-12);
  EXPECT_GT(MaxDiff(expected[c.warmup], sync[c.warmup]), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(WarmupAndReplicas, PipeSgdStalenessTest,
                         ::testing::Values(Case{1, 0}, Case{1, 1}, Case{1, 2}, Case{2, 0},
                                           Case{2, 1}, Case{2, 2}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return absl::StrCat("D", info.param.replicas, "W", info.param.warmup);
                         });

// With fp16 in the AllReduce the sequence is the stale one up to half precision, and the
// replicas still agree bit for bit.
TEST(PipeSgdUpdater, CompressedStaysCloseAndIdentical) {
  const Weights w0 = InitialWeights();
  const std::vector<Weights> expected = Expected(w0, 5, 1, 2);
  for (Compression c : {Compression::kFp16, Compression::kInt8}) {
    const std::vector<std::vector<Weights>> traces = Train(2, 5, 1, c);
    for (size_t t = 0; t < expected.size(); ++t) {
      EXPECT_EQ(traces[1][t], traces[0][t]) << CompressionName(c) << " step " << t;
      // Each applied gradient entry is off by at most ~2^-11 relative (fp16) or max|g| / 254
      // per replica (int8); over <= 5 updates at lr 0.5 that stays below 0.02.
      EXPECT_LT(MaxDiff(traces[0][t], expected[t]), 0.02) << CompressionName(c) << " step " << t;
    }
  }
}

// Batch norm's step statistics follow their gradient: applied by the update that applies that
// gradient (step t's by step t's update during warm-up, none at the fill step, step t - 1's by
// step t's update after it, the last step's by Finish), summed over the replicas, bitwise the
// same on every replica. Model: batchnorm2d over kIn channels of 1 x 1 (input X(r, t, row, c)),
// flatten, linear kOut; the running mean checked against the documented sequence in double.
TEST(PipeSgdUpdater, StepStatisticsFollowTheirGradient) {
  constexpr int kReplicas = 2, kWarmup = 1, kSteps = 4;
  constexpr double kMomentum = 0.1;  // batchnorm2d's default
  v1::JobSpec spec = LinearSpec();
  v1::ModelSpec* m = spec.mutable_model();
  m->clear_input_shape();
  for (int64_t d : {kIn, 1, 1}) m->add_input_shape(d);
  m->clear_layers();
  m->add_layers()->set_type("batchnorm2d");
  m->add_layers()->set_type("flatten");
  v1::LayerSpec* linear = m->add_layers();
  linear->set_type("linear");
  linear->mutable_linear()->set_out(kOut);
  spec.mutable_training()->set_global_batch(kReplicas * kRows);

  LocalCollectiveGroup group(kReplicas);
  // Per replica: layer0.running_mean after each step's update, then after Finish.
  std::vector<std::vector<std::vector<float>>> means(kReplicas);
  std::vector<absl::Status> status(kReplicas);
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    threads.emplace_back([&, r] {
      auto run = [&]() -> absl::Status {
        DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<StageBackend> b,
                                MakeCpuStageBackend(spec, 0, m->layers_size() - 1));
        LocalCollective collective(&group, r);
        PipeSgdOptions options;
        options.warmup_steps = kWarmup;
        DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<PipeSgdUpdater> updater,
                                PipeSgdUpdater::Create(&collective, b.get(), options));
        auto record = [&]() -> absl::Status {
          DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> buffers, b->HostBuffers());
          means[r].push_back(buffers.at(0)->value.data);
          return absl::OkStatus();
        };
        for (int t = 0; t < kSteps; ++t) {
          std::vector<float> x(kRows * kIn);
          std::vector<int32_t> labels(kRows);
          for (int row = 0; row < kRows; ++row) {
            labels[row] = Label(r, t, row);
            for (int c = 0; c < kIn; ++c) x[row * kIn + c] = X(r, t, row, c);
          }
          kernels::ForwardContext ctx;
          ctx.training = true;
          DAPPLE_RETURN_IF_ERROR(b->LoadInput(0, x.data(), kRows));
          DAPPLE_RETURN_IF_ERROR(b->Forward(0, kRows, ctx));
          DAPPLE_RETURN_IF_ERROR(
              b->Loss(0, labels.data(), kRows, 1.0f / (kReplicas * kRows), true, nullptr).status());
          DAPPLE_RETURN_IF_ERROR(b->Backward(0, 0, kRows, true, false));
          DAPPLE_RETURN_IF_ERROR(updater->OnGradients(t));
          DAPPLE_RETURN_IF_ERROR(updater->OnOptimizerStep(t));
          DAPPLE_RETURN_IF_ERROR(record());
        }
        DAPPLE_RETURN_IF_ERROR(updater->Finish());
        return record();
      };
      status[r] = run();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kReplicas; ++r) ASSERT_TRUE(status[r].ok()) << "replica " << r << status[r];

  // The mean of channel c over step t's global batch (every replica's rows).
  auto batch_mean = [](int t, int c) {
    double sum = 0;
    for (int r = 0; r < kReplicas; ++r) {
      for (int row = 0; row < kRows; ++row) sum += X(r, t, row, c);
    }
    return sum / (kReplicas * kRows);
  };
  // The step whose statistics each update applies: -1 for none (the fill step).
  const int applied[kSteps + 1] = {0, -1, 1, 2, 3};
  std::vector<double> want(kIn, 0.0);
  for (int k = 0; k <= kSteps; ++k) {
    if (applied[k] >= 0) {
      for (int c = 0; c < kIn; ++c) {
        want[c] = (1 - kMomentum) * want[c] + kMomentum * batch_mean(applied[k], c);
      }
    }
    for (int r = 0; r < kReplicas; ++r) {
      ASSERT_EQ(means[r][k], means[0][k]) << "replica " << r << " update " << k;
      for (int c = 0; c < kIn; ++c) {
        EXPECT_NEAR(means[r][k][c], want[c], 1e-6 * std::max(1.0, std::fabs(want[c])))
            << "update " << k << " channel " << c;
      }
    }
  }
}

// Clipping scales each applied gradient (the stale one in steady state) by ITS norm, computed
// by every replica alone from the identical reduced gradient.
TEST(PipeSgdUpdater, ClipsEachAppliedGradientByItsOwnNorm) {
  const Weights w0 = InitialWeights();
  const double kMaxNorm = 0.2;
  const std::vector<Weights> expected = Expected(w0, 6, 1, 2, /*stale=*/true, kMaxNorm);
  EXPECT_GT(Norm(Gradient(w0, 0, 2)), kMaxNorm) << "the check needs clipping to act";
  EXPECT_GT(MaxDiff(expected.back(), Expected(w0, 6, 1, 2).back()), 1e-3);
  const std::vector<std::vector<Weights>> traces = Train(2, 6, 1, Compression::kNone, kMaxNorm);
  for (size_t t = 0; t < expected.size(); ++t) {
    for (size_t i = 0; i < w0.size(); ++i) {
      ASSERT_NEAR(traces[0][t][i], expected[t][i], 1e-5 * std::max(1.0, std::fabs(expected[t][i])))
          << "after step " << t << " weight " << i;
    }
    EXPECT_EQ(traces[1][t], traces[0][t]) << "replicas differ after step " << t;
  }
}

TEST(PipeSgdUpdater, AllReduceErrorsSurfaceNamingTheStep) {
  LocalCollectiveGroup group(1);
  group.Break(absl::UnavailableError("stage 0 replica 1 is gone"));
  auto backend = MakeCpuStageBackend(LinearSpec(), 0, 0).value();
  LocalCollective collective(&group, 0);
  PipeSgdOptions options;
  options.warmup_steps = 1;
  auto updater = PipeSgdUpdater::Create(&collective, backend.get(), options, 10).value();
  absl::Status s = updater->OnGradients(10);  // synchronous: waits and fails
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "Pipe-SGD AllReduce of step 10: stage 0 replica 1 is gone");
  EXPECT_EQ(updater->OnOptimizerStep(10).message(), s.message());  // sticky
  EXPECT_EQ(updater->Finish().message(), s.message());
}

TEST(PipeSgdUpdater, StaleAllReduceErrorSurfacesAtTheNextCall) {
  LocalCollectiveGroup group(1);
  auto backend = MakeCpuStageBackend(LinearSpec(), 0, 0).value();
  LocalCollective collective(&group, 0);
  PipeSgdOptions options;
  options.warmup_steps = 0;
  auto updater = PipeSgdUpdater::Create(&collective, backend.get(), options).value();
  ASSERT_TRUE(updater->OnGradients(0).ok());
  ASSERT_TRUE(updater->OnOptimizerStep(0).ok());  // fill: does not wait for step 0
  group.Break(absl::UnavailableError("peer lost"));
  // Step 0's AllReduce may have finished before the break; step 1's cannot.
  absl::Status s = updater->OnGradients(1);
  if (s.ok()) s = updater->OnOptimizerStep(1);
  if (s.ok()) s = updater->Finish();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(s.message() == "Pipe-SGD AllReduce of step 0: peer lost" ||
              s.message() == "Pipe-SGD AllReduce of step 1: peer lost")
      << s;
}

TEST(PipeSgdUpdater, RefusesCallsOutOfOrderAndBadOptions) {
  LocalCollectiveGroup group(1);
  auto backend = MakeCpuStageBackend(LinearSpec(), 0, 0).value();
  LocalCollective collective(&group, 0);
  PipeSgdOptions options;
  options.warmup_steps = -1;
  EXPECT_EQ(PipeSgdUpdater::Create(&collective, backend.get(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.warmup_steps = 0;
  auto updater = PipeSgdUpdater::Create(&collective, backend.get(), options).value();
  absl::Status s = updater->OnOptimizerStep(0);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("expected OnGradients(0)"), std::string::npos) << s;
  EXPECT_EQ(updater->OnGradients(3).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(updater->OnGradients(0).ok());
  EXPECT_EQ(updater->Finish().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(updater->OnOptimizerStep(0).ok());
  ASSERT_TRUE(updater->Finish().ok());
  EXPECT_EQ(updater->OnGradients(1).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace dapple::worker

#include "worker/runtime/chunked_stage_backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace dapple::worker {
namespace {

absl::Status NotOnTheWhole(const char* call) {
  return absl::InternalError(absl::StrCat(
      call, " on a rank's chunked backend: slots belong to its chunks (StageBackend::chunk)"));
}

class ChunkedStageBackend final : public StageBackend {
 public:
  ChunkedStageBackend(std::vector<std::unique_ptr<StageBackend>> chunks,
                      std::vector<v1::StageRange> ranges)
      : chunks_(std::move(chunks)), ranges_(std::move(ranges)) {}

  // The parameter counts and sizes per chunk, for the positions of ReadGradientsOf.
  absl::Status Init() {
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, c->HostParams());
      params_per_chunk_.push_back(static_cast<int>(params.size()));
      for (const kernels::Param* p : params) param_floats_.push_back(p->value.numel());
    }
    return absl::OkStatus();
  }

  int num_chunks() const override { return static_cast<int>(chunks_.size()); }
  StageBackend* chunk(int c) override {
    return c >= 0 && c < num_chunks() ? chunks_[c].get() : nullptr;
  }

  std::string device() const override { return chunks_[0]->device(); }
  bool device_memory() const override { return chunks_[0]->device_memory(); }
  std::string device_name() const override { return chunks_[0]->device_name(); }
  absl::StatusOr<double> TakeComputeSeconds() override {
    double sum = 0;
    bool measured = true;
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(const double s, c->TakeComputeSeconds());
      measured = measured && s >= 0;
      sum += s;
    }
    return measured ? sum : -1.0;
  }

  absl::StatusOr<void*> Input(int, int64_t) override { return NotOnTheWhole("Input"); }
  absl::Status LoadInput(int, const float*, int64_t) override { return NotOnTheWhole("LoadInput"); }
  absl::Status Forward(int, int64_t, const kernels::ForwardContext&) override {
    return NotOnTheWhole("Forward");
  }
  absl::StatusOr<double> Loss(int, const int32_t*, int64_t, float, bool, int64_t*) override {
    return NotOnTheWhole("Loss");
  }
  absl::StatusOr<const void*> OutputForSend(int, int, int64_t) override {
    return NotOnTheWhole("OutputForSend");
  }
  absl::StatusOr<void*> GradInput(int, int64_t) override { return NotOnTheWhole("GradInput"); }
  absl::Status Backward(int, int, int64_t, bool, bool) override {
    return NotOnTheWhole("Backward");
  }
  const void* GradForSend(int) const override { return nullptr; }
  absl::Status ReadOutput(int, int64_t, int64_t, float*) override {
    return NotOnTheWhole("ReadOutput");
  }
  // Generation's small messages travel between ranks, not chunks: chunk 0's buffer.
  absl::StatusOr<void*> MessageBuffer(int64_t bytes) override {
    return chunks_[0]->MessageBuffer(bytes);
  }
  absl::Status WriteMessage(const void* host, int64_t bytes) override {
    return chunks_[0]->WriteMessage(host, bytes);
  }
  absl::Status ReadMessage(void* host, int64_t bytes) override {
    return chunks_[0]->ReadMessage(host, bytes);
  }

  absl::Status DropGradients() override {
    for (auto& c : chunks_) DAPPLE_RETURN_IF_ERROR(c->DropGradients());
    return absl::OkStatus();
  }
  absl::Status OptimizerStep() override {
    for (auto& c : chunks_) DAPPLE_RETURN_IF_ERROR(c->OptimizerStep());
    return absl::OkStatus();
  }
  int64_t OptimizerUpdates() const override { return chunks_[0]->OptimizerUpdates(); }
  absl::Status ScaleGradients(float factor) override {
    for (auto& c : chunks_) DAPPLE_RETURN_IF_ERROR(c->ScaleGradients(factor));
    return absl::OkStatus();
  }
  absl::StatusOr<double> GradientSquaredNorm() override {
    double sum = 0;
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(const double s, c->GradientSquaredNorm());
      if (s < 0) return -1.0;
      sum += s;
    }
    return sum;
  }

  int64_t GradientFloats() const override {
    int64_t n = 0;
    for (const auto& c : chunks_) n += c->GradientFloats();
    return n;
  }
  absl::Status ReadGradients(float* host) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->ReadGradients(host));
      host += c->GradientFloats();
    }
    return absl::OkStatus();
  }
  absl::Status WriteGradients(const float* host) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->WriteGradients(host));
      host += c->GradientFloats();
    }
    return absl::OkStatus();
  }
  absl::Status ReadGradientsOf(const std::vector<int>& params, float* host) override {
    return EachChunkOf(params, [&](StageBackend& c, const std::vector<int>& local, int64_t at) {
      return c.ReadGradientsOf(local, host + at);
    });
  }
  absl::Status WriteGradientsOf(const std::vector<int>& params, const float* host) override {
    return EachChunkOf(params, [&](StageBackend& c, const std::vector<int>& local, int64_t at) {
      return c.WriteGradientsOf(local, host + at);
    });
  }

  int64_t WeightFloats() const override {
    int64_t n = 0;
    for (const auto& c : chunks_) n += c->WeightFloats();
    return n;
  }
  absl::Status ReadWeights(float* host) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->ReadWeights(host));
      host += c->WeightFloats();
    }
    return absl::OkStatus();
  }
  absl::Status WriteWeights(const float* host) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->WriteWeights(host));
      host += c->WeightFloats();
    }
    return absl::OkStatus();
  }

  int64_t StepStatisticsSize() const override {
    int64_t n = 0;
    for (const auto& c : chunks_) n += c->StepStatisticsSize();
    return n;
  }
  absl::Status ReadStepStatistics(double* host) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->ReadStepStatistics(host));
      host += c->StepStatisticsSize();
    }
    return absl::OkStatus();
  }
  absl::Status ApplyStepStatistics(const double* summed) override {
    for (auto& c : chunks_) {
      DAPPLE_RETURN_IF_ERROR(c->ApplyStepStatistics(summed));
      summed += c->StepStatisticsSize();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<kernels::Param*>> HostBuffers() override {
    std::vector<kernels::Param*> all;
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> b, c->HostBuffers());
      all.insert(all.end(), b.begin(), b.end());
    }
    return all;
  }
  absl::StatusOr<std::vector<kernels::Param*>> HostParams() override {
    std::vector<kernels::Param*> all;
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> p, c->HostParams());
      all.insert(all.end(), p.begin(), p.end());
    }
    return all;
  }

  HeldBytes Held() const override {
    HeldBytes sum{0, 0};
    for (const auto& c : chunks_) {
      const HeldBytes h = c->Held();
      if (h.parameters < 0 || h.activations < 0) return {};
      sum.parameters += h.parameters;
      sum.activations += h.activations;
    }
    return sum;
  }
  absl::Status Synchronize() override {
    for (auto& c : chunks_) DAPPLE_RETURN_IF_ERROR(c->Synchronize());
    return absl::OkStatus();
  }

  absl::StatusOr<StageState> ExportState() override {
    StageState all;
    for (auto& c : chunks_) {
      DAPPLE_ASSIGN_OR_RETURN(StageState s, c->ExportState());
      auto append = [](std::vector<NamedTensor>* to, std::vector<NamedTensor>* from) {
        for (NamedTensor& t : *from) to->push_back(std::move(t));
      };
      append(&all.params, &s.params);
      append(&all.buffers, &s.buffers);
      append(&all.optimizer_state, &s.optimizer_state);
      all.optimizer_steps = s.optimizer_steps;
    }
    return all;
  }
  // Each tensor to the chunk whose range holds its layer; one of no chunk goes to chunk 0, whose
  // check then names it as a tensor of another stage.
  absl::Status ImportState(const StageState& state) override {
    std::vector<StageState> parts(chunks_.size());
    for (StageState& p : parts) p.optimizer_steps = state.optimizer_steps;
    auto split = [&](const std::vector<NamedTensor>& from,
                     std::vector<NamedTensor> StageState::*to) {
      for (const NamedTensor& t : from)
        (parts[ChunkOfLayer(LayerOfTensor(t.name))].*to).push_back(t);
    };
    split(state.params, &StageState::params);
    split(state.buffers, &StageState::buffers);
    split(state.optimizer_state, &StageState::optimizer_state);
    // Every chunk checks its part before any changes (a refused import leaves the rank as it was).
    for (size_t c = 0; c < chunks_.size(); ++c) {
      DAPPLE_RETURN_IF_ERROR(CheckImport(*chunks_[c], parts[c]));
    }
    for (size_t c = 0; c < chunks_.size(); ++c) {
      DAPPLE_RETURN_IF_ERROR(chunks_[c]->ImportState(parts[c]));
    }
    return absl::OkStatus();
  }

 private:
  int ChunkOfLayer(int layer) const {
    for (size_t c = 0; c < ranges_.size(); ++c) {
      if (layer >= ranges_[c].first_layer() && layer <= ranges_[c].last_layer()) {
        return static_cast<int>(c);
      }
    }
    return 0;
  }

  // What ImportState of `chunk` would refuse, without changing it: its parameter and buffer
  // names must all be in `part` (the tensors' shapes each chunk checks itself).
  static absl::Status CheckImport(StageBackend& chunk, const StageState& part) {
    DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, chunk.HostParams());
    for (const kernels::Param* p : params) {
      bool found = false;
      for (const NamedTensor& t : part.params) found = found || t.name == CheckpointName(*p);
      if (!found) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint has no tensor ", CheckpointName(*p)));
      }
    }
    return absl::OkStatus();
  }

  // Splits whole-rank positions (strictly increasing) into each chunk's local ones and calls
  // `f(chunk, local positions, float offset of their first value in the caller's vector)`.
  template <typename F>
  absl::Status EachChunkOf(const std::vector<int>& params, F f) {
    size_t i = 0;
    int first = 0;
    int64_t at = 0;
    for (size_t c = 0; c < chunks_.size(); ++c) {
      const int end = first + params_per_chunk_[c];
      std::vector<int> local;
      const int64_t start = at;
      for (; i < params.size() && params[i] < end; ++i) {
        if (params[i] < first) {
          return absl::InvalidArgumentError(
              absl::StrCat("parameter positions must increase, got ", params[i]));
        }
        local.push_back(params[i] - first);
        at += param_floats_[params[i]];
      }
      if (!local.empty()) DAPPLE_RETURN_IF_ERROR(f(*chunks_[c], local, start));
      first = end;
    }
    if (i < params.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter position ", params[i], " outside the rank's ", first));
    }
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<StageBackend>> chunks_;
  std::vector<v1::StageRange> ranges_;
  std::vector<int> params_per_chunk_;
  std::vector<int64_t> param_floats_;  // per whole-rank parameter position
};

}  // namespace

absl::StatusOr<std::unique_ptr<StageBackend>> MakeChunkedStageBackend(
    const std::vector<v1::StageRange>& ranges, const RangeBackendFactory& make) {
  if (ranges.empty()) return absl::InvalidArgumentError("a rank needs at least one layer range");
  std::vector<std::unique_ptr<StageBackend>> chunks;
  for (const v1::StageRange& r : ranges) {
    DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<StageBackend> b, make(r.first_layer(), r.last_layer()));
    chunks.push_back(std::move(b));
  }
  if (chunks.size() == 1) return std::move(chunks[0]);
  auto whole = std::make_unique<ChunkedStageBackend>(std::move(chunks), ranges);
  DAPPLE_RETURN_IF_ERROR(whole->Init());
  return whole;
}

}  // namespace dapple::worker

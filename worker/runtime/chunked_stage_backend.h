// The backend of a pipeline rank that holds v layer ranges (Megatron's interleaved 1F1B,
// Narayanan et al., SC 2021, section 2.2: "model chunks"; PlanStageSummary.chunks): one backend
// per range (chunk(c), range c = virtual stage c * P + r), and this one over all of them for
// what belongs to the rank as a whole, so the interpreter's gradient exchange, clipping,
// non-finite skip, update and checkpoints cover every chunk without knowing about chunks.
//
// The whole's parameter order (HostParams, and so the flat gradient / weight vectors, the
// positions of ReadGradientsOf) is chunk 0's, then chunk 1's, ...; statistics and buffers the
// same. Its update steps every chunk (each chunk's own optimizer and update count, which move
// together). ExportState concatenates the chunks' states (names carry global layer indices);
// ImportState gives each chunk the tensors of its layers (stage_state.h LayerOfTensor). The
// per-slot calls (Input .. GradForSend, ReadOutput) belong to the chunks: on the whole they
// return kInternal. Thread safety: one thread, as every backend.
#ifndef DAPPLE_WORKER_RUNTIME_CHUNKED_STAGE_BACKEND_H_
#define DAPPLE_WORKER_RUNTIME_CHUNKED_STAGE_BACKEND_H_

#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "dapple/v1/job.pb.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

// Makes the backend of one layer range [first_layer, last_layer].
using RangeBackendFactory =
    std::function<absl::StatusOr<std::unique_ptr<StageBackend>>(int first_layer, int last_layer)>;

// `make` for every range of `ranges` (schedule::StageChunks), in order: the one backend itself
// when there is one range, else the chunked backend over them. Errors: `make`'s;
// kInvalidArgument for no range.
absl::StatusOr<std::unique_ptr<StageBackend>> MakeChunkedStageBackend(
    const std::vector<v1::StageRange>& ranges, const RangeBackendFactory& make);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_RUNTIME_CHUNKED_STAGE_BACKEND_H_

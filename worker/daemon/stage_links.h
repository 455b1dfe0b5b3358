// Where a rank computes and how it reaches its neighbouring stages, decided from the plan.
//
// Each stage runs on the device the coordinator assigned (StageAssignment.device: "cpu" or
// "cuda:N"). Between two neighbouring stages the link is:
//   both on the CPU                          -> UCX (host memory)
//   one on a GPU, the other on the CPU       -> the GPU side stages through pinned host memory
//                                               over UCX; the CPU side uses UCX as usual
//   both on the same GPU of the same host    -> CUDA IPC (device memory; UCX for control)
//   both on GPUs, not the same one           -> NCCL point-to-point, one communicator per
//                                               direction; the lower stage makes the unique ids
//                                               and publishes them through the rendezvous
//   either stage has replicas (split-concat:  -> UCX with every rank of the neighbouring stage
//   rows go to several ranks)                   (a GPU side stages through host memory); never
//                                               IPC or NCCL
// Peers are addressed by their global rank index (common/schedule/ranks.h RankIndex).
// Thread safety: one thread (the job's).
#ifndef DAPPLE_WORKER_DAEMON_STAGE_LINKS_H_
#define DAPPLE_WORKER_DAEMON_STAGE_LINKS_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "dapple/v1/plan.pb.h"
#include "dapple/v1/worker.pb.h"
#include "worker/comm/routed_transport.h"
#include "worker/comm/ucx_transport.h"
#include "worker/runtime/stage_backend.h"

namespace dapple::worker {

enum class LinkKind { kUcx, kStaging, kCudaIpc, kNccl };
const char* LinkKindName(LinkKind kind);  // "ucx", "host staging", "CUDA IPC", "NCCL"

// The device of `stage` in `plan` ("cpu" when the plan names none).
std::string StageDevice(const v1::ParallelPlanSummary& plan, int stage);
// How stage `from` reaches stage `to` (pure function of the plan; see the table above).
LinkKind ChooseLink(const v1::ParallelPlanSummary& plan, int from, int to);

class StageLinks {
 public:
  // Opens the assignment's device and builds the stage's backend on it. kFailedPrecondition
  // naming the device when it is a GPU this build or machine cannot use ("cuda:0: no CUDA
  // device: ..."), kInvalidArgument for an unparsable device, kResourceExhausted when the
  // stage's weights do not fit. `abort` (the daemon's abort flag; not owned, must outlive the
  // backend; may be null) ends an emulated stage's waits early with kAborted
  // (emulated_stage_backend.h), so a cancelled or failed job frees its workers at once.
  static absl::StatusOr<std::unique_ptr<StageLinks>> Open(const v1::StageAssignment& assignment,
                                                          const std::atomic<bool>* abort = nullptr);
  ~StageLinks();

  const std::string& device() const { return device_; }
  // The backend for StageRuntime (once).
  std::unique_ptr<StageBackend> TakeBackend() { return std::move(backend_); }

  // Fills this rank's NCCL unique ids (link to stage + 1 over NCCL) into `pub`.
  absl::Status AddNcclIds(const v1::StageAssignment& assignment, v1::PublishEndpointRequest* pub);
  // After the rendezvous: the transports to each neighbouring rank, on top of `ucx` (connected
  // to every rank of both neighbouring stages already), in ascending stage order. Errors of
  // NCCL/IPC set-up name the peer.
  absl::Status Connect(const v1::StageAssignment& assignment, const v1::GetPeersResponse& peers,
                       UcxTransport* ucx, Transport::Options options);
  // What the runtime sends through (routes per neighbour).
  Transport* transport() { return &routed_; }
  // "stage 0 -> 1: CUDA IPC" for the log.
  const std::string& description() const { return description_; }

 private:
  struct Gpu;
  StageLinks() = default;
  std::string device_ = "cpu";
  std::unique_ptr<Gpu> gpu_;  // CUDA builds with a GPU stage only
  std::unique_ptr<StageBackend> backend_;
  RoutedTransport routed_;
  std::string description_;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_STAGE_LINKS_H_

#include "worker/daemon/stage_links.h"

#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "worker/device/device.h"
#include "worker/runtime/chunked_stage_backend.h"
#include "worker/runtime/emulated_stage_backend.h"

#if DAPPLE_HAVE_CUDA
#include "worker/comm/cuda/cuda_ipc_transport.h"
#include "worker/comm/cuda/nccl_communicator.h"
#include "worker/comm/cuda/nccl_transport.h"
#include "worker/comm/cuda/staging_transport.h"
#include "worker/device/cuda_device.h"
#include "worker/runtime/cuda/cuda_stage_backend.h"
#endif

namespace dapple::worker {

const char* LinkKindName(LinkKind kind) {
  switch (kind) {
    case LinkKind::kUcx:
      return "ucx";
    case LinkKind::kStaging:
      return "host staging over ucx";
    case LinkKind::kCudaIpc:
      return "CUDA IPC";
    case LinkKind::kNccl:
      return "NCCL";
  }
  return "?";
}

std::string StageDevice(const v1::ParallelPlanSummary& plan, int stage) {
  if (stage < 0 || stage >= plan.stages_size() || plan.stages(stage).devices().empty()) {
    return "cpu";
  }
  return plan.stages(stage).devices(0);
}

namespace {
std::string StageHost(const v1::ParallelPlanSummary& plan, int stage) {
  if (stage < 0 || stage >= plan.stages_size() || plan.stages(stage).hostnames().empty()) {
    return "";
  }
  return plan.stages(stage).hostnames(0);
}
bool IsCuda(const std::string& device) { return absl::StartsWith(device, "cuda:"); }
}  // namespace

LinkKind ChooseLink(const v1::ParallelPlanSummary& plan, int from, int to) {
  // Emulated stages keep their buffers in host memory whatever device their worker offers.
  if (plan.emulated()) return LinkKind::kUcx;
  const std::string a = StageDevice(plan, from), b = StageDevice(plan, to);
  if (!IsCuda(a)) return LinkKind::kUcx;
  // Split-concat exchanges rows with every rank of a replicated neighbour: UCX (the GPU side
  // staging through host memory), never the one-peer IPC / NCCL links.
  if (!IsCuda(b) || schedule::StageReplicas(plan, from) > 1 ||
      schedule::StageReplicas(plan, to) > 1) {
    return LinkKind::kStaging;
  }
  const std::string ha = StageHost(plan, from), hb = StageHost(plan, to);
  if (a == b && !ha.empty() && ha == hb) return LinkKind::kCudaIpc;
  return LinkKind::kNccl;
}

#if DAPPLE_HAVE_CUDA
struct StageLinks::Gpu {
  std::unique_ptr<CudaDevice> device;
  std::unique_ptr<StagingTransport> staging;
  std::unique_ptr<CudaIpcTransport> ipc;
  std::unique_ptr<NcclTransport> nccl;
  std::string nccl_forward_id, nccl_backward_id;  // of the link to stage + 1, when NCCL
};
#else
struct StageLinks::Gpu {};
#endif

StageLinks::~StageLinks() {
  // The runtime (holding the backend) is gone by now; transports go before the device they use.
#if DAPPLE_HAVE_CUDA
  if (gpu_ != nullptr) {
    gpu_->nccl.reset();
    gpu_->ipc.reset();
    gpu_->staging.reset();
    backend_.reset();
    gpu_->device.reset();
  }
#endif
}

absl::StatusOr<std::unique_ptr<StageLinks>> StageLinks::Open(const v1::StageAssignment& a,
                                                             const std::atomic<bool>* abort) {
  auto links = std::unique_ptr<StageLinks>(new StageLinks());
  links->device_ = a.device().empty() ? "cpu" : a.device();
  absl::StatusOr<DeviceId> id = ParseDevice(links->device_);
  if (!id.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("assigned device: ", id.status().message()));
  }
  const v1::PlanStageSummary& range = a.plan().stages(a.stage());
  // Interleaved 1F1B: one backend per layer range the rank holds (chunked_stage_backend.h).
  const std::vector<v1::StageRange> ranges = schedule::StageChunks(a.plan(), a.stage());
  if (a.has_emulated_profile()) {
    // device_type emulated: waits instead of compute, on any worker (no device is used); the
    // links stay UCX on host memory. The sleeper watches the abort flag: a wait may last
    // seconds (scaled profiles), and a cancelled job must not hold the worker that long.
    links->device_ = "emulated";
    DAPPLE_ASSIGN_OR_RETURN(
        links->backend_, MakeChunkedStageBackend(ranges, [&](int first, int last) {
          return MakeEmulatedStageBackend(a.spec(), first, last, a.emulated_profile(),
                                          std::make_unique<PreciseSleeper>(abort),
                                          range.recompute());
        }));
    return links;
  }
  if (!id->is_cuda()) {
    DAPPLE_ASSIGN_OR_RETURN(links->backend_,
                            MakeChunkedStageBackend(ranges, [&](int first, int last) {
                              return MakeCpuStageBackend(a.spec(), first, last, range.recompute());
                            }));
    return links;
  }
  if (ranges.size() > 1) {
    // The submit check refuses schedule interleaved with device_type cuda; a stage of an "any"
    // job that lands on a GPU is refused here.
    return absl::InvalidArgumentError(
        absl::StrCat(links->device_,
                     ": interleaved 1F1B (layer ranges per stage) runs on CPU and emulated "
                     "stages only, not on CUDA stages yet"));
  }
#if DAPPLE_HAVE_CUDA
  links->gpu_ = std::make_unique<Gpu>();
  absl::StatusOr<std::unique_ptr<CudaDevice>> dev = CudaDevice::Open(id->index);
  if (!dev.ok()) {
    // CudaDevice's messages already start with the device ("cuda:0: ...").
    if (dev.status().code() == absl::StatusCode::kUnavailable) {
      return absl::FailedPreconditionError(dev.status().message());
    }
    return dev.status();
  }
  links->gpu_->device = std::move(*dev);
  DAPPLE_ASSIGN_OR_RETURN(links->backend_,
                          MakeCudaStageBackend(a.spec(), range.first_layer(), range.last_layer(),
                                               links->gpu_->device.get(), range.recompute()));
  return links;
#else
  return absl::FailedPreconditionError(absl::StrCat(
      links->device_, ": this dapple-worker was built without CUDA (offer --devices cpu)"));
#endif
}

absl::Status StageLinks::AddNcclIds(const v1::StageAssignment& a, v1::PublishEndpointRequest* pub) {
  const int next = a.stage() + 1;
  if (next >= a.num_stages() || ChooseLink(a.plan(), a.stage(), next) != LinkKind::kNccl) {
    return absl::OkStatus();
  }
#if DAPPLE_HAVE_CUDA
  DAPPLE_ASSIGN_OR_RETURN(gpu_->nccl_forward_id, NcclCommunicator::NewUniqueId());
  DAPPLE_ASSIGN_OR_RETURN(gpu_->nccl_backward_id, NcclCommunicator::NewUniqueId());
  pub->set_nccl_id_forward(gpu_->nccl_forward_id);
  pub->set_nccl_id_backward(gpu_->nccl_backward_id);
  return absl::OkStatus();
#else
  return absl::InternalError("NCCL link in a build without CUDA");
#endif
}

absl::Status StageLinks::Connect(const v1::StageAssignment& a, const v1::GetPeersResponse& peers,
                                 UcxTransport* ucx, Transport::Options options) {
  const int stage = a.stage();
  // Ascending: NCCL links never wait in a cycle.
  for (int peer : schedule::NeighbourStages(a.plan(), stage)) {
    const LinkKind kind = ChooseLink(a.plan(), stage, peer);
    absl::StrAppend(&description_, description_.empty() ? "" : "; ", "stage ", stage, " <-> ", peer,
                    ": ", LinkKindName(kind));
    const int peer_replicas = schedule::StageReplicas(a.plan(), peer);
    if (peer_replicas > 1 || schedule::StageReplicas(a.plan(), stage) > 1) {
      // Every rank of the neighbouring stage, addressed by its global index: UCX, staged
      // through host memory when this replica computes on a GPU (its own device decides:
      // replicas of one stage may sit on different devices).
      Transport* route = ucx;
#if DAPPLE_HAVE_CUDA
      if (gpu_ != nullptr) {
        if (gpu_->staging == nullptr) {
          gpu_->staging = std::make_unique<StagingTransport>(ucx, gpu_->device.get());
        }
        route = gpu_->staging.get();
      }
#endif
      for (int r = 0; r < peer_replicas; ++r) {
        routed_.SetRoute(schedule::RankIndex(a.plan(), peer, r), route);
      }
      continue;
    }
    // One replica each side: the peer's global index (other stages may have replicas).
    const int peer_rank = schedule::RankIndex(a.plan(), peer, 0);
    const v1::PeerEndpoint* endpoint = nullptr;
    for (const v1::PeerEndpoint& p : peers.peers()) {
      if (p.stage() == peer) endpoint = &p;
    }
    const std::string label =
        absl::StrFormat("stage %d, worker %s", peer, endpoint ? endpoint->worker_id() : "?");
    if (kind == LinkKind::kUcx) {
      routed_.SetRoute(peer_rank, ucx);
      continue;
    }
#if DAPPLE_HAVE_CUDA
    CudaDevice* dev = gpu_->device.get();
    switch (kind) {
      case LinkKind::kUcx:
        break;
      case LinkKind::kStaging:
        if (gpu_->staging == nullptr) gpu_->staging = std::make_unique<StagingTransport>(ucx, dev);
        routed_.SetRoute(peer_rank, gpu_->staging.get());
        break;
      case LinkKind::kCudaIpc:
        if (gpu_->ipc == nullptr) gpu_->ipc = std::make_unique<CudaIpcTransport>(ucx, dev);
        routed_.SetRoute(peer_rank, gpu_->ipc.get());
        break;
      case LinkKind::kNccl: {
        if (gpu_->nccl == nullptr) {
          DAPPLE_ASSIGN_OR_RETURN(
              gpu_->nccl, NcclTransport::Create(schedule::RankIndex(a.plan(), stage, 0), dev,
                                                options, absl::StrFormat("stage %d", stage)));
        }
        // The lower stage of the pair made the ids: ours for stage + 1, the peer's for stage - 1.
        const bool lower = peer > stage;
        const std::string fwd =
            lower ? gpu_->nccl_forward_id : (endpoint ? endpoint->nccl_id_forward() : "");
        const std::string bwd =
            lower ? gpu_->nccl_backward_id : (endpoint ? endpoint->nccl_id_backward() : "");
        absl::Status s = gpu_->nccl->Connect(peer_rank, fwd, bwd, label);
        if (!s.ok()) {
          return absl::Status(s.code(), absl::StrCat("NCCL link to ", label, ": ", s.message()));
        }
        routed_.SetRoute(peer_rank, gpu_->nccl.get());
        break;
      }
    }
#else
    return absl::InternalError(absl::StrCat("GPU link to ", label, " in a build without CUDA"));
#endif
  }
  return absl::OkStatus();
}

}  // namespace dapple::worker

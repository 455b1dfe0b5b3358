// What the two halves of the worker daemon share (worker_daemon.cc: registration, heartbeats and
// the job's lifecycle; worker_job.cc: one job's data, links, collectives and training loop).
// Internal to worker/daemon: nothing outside includes it.
#ifndef DAPPLE_WORKER_DAEMON_WORKER_DAEMON_INTERNAL_H_
#define DAPPLE_WORKER_DAEMON_WORKER_DAEMON_INTERNAL_H_

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "worker/comm/delay_transport.h"
#include "worker/comm/gloo_collective.h"
#include "worker/comm/ucx_transport.h"
#include "worker/daemon/stage_links.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/runtime/stage_runtime.h"

namespace dapple::worker::daemon_internal {

// Deadline of each control RPC: they are small and the coordinator answers without waiting.
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(2);
// Deregistering from a coordinator that answers no heartbeat: one quick try.
inline constexpr absl::Duration kLastTryDeadline = absl::Milliseconds(300);

inline std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

inline std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace dapple::worker::daemon_internal

namespace dapple::worker {

// What a job holds while it runs. Members are destroyed in reverse order: the runtime (whose
// backend's device buffers go back to the GPU's allocator), then the links (whose GPU transports
// send through the UCX transport, and which own the CUDA device and its allocator), then the UCX
// transport. Release() frees them in that same order; never assign over a JobResources (`r =
// JobResources()` resets the members in declaration order: the device before the buffers of the
// runtime's backend, a use after free that crashed both GPU workers after every job).
struct WorkerDaemon::JobResources {
  JobResources() = default;
  JobResources(const JobResources&) = delete;
  JobResources& operator=(const JobResources&) = delete;
  JobResources& operator=(JobResources&&) = delete;

  void Release() {
    runtime.reset();
    delay.reset();
    job.reset();
    tied.reset();
    replicas.reset();
    links.reset();
    transport.reset();
  }

  std::unique_ptr<UcxTransport> transport;
  std::unique_ptr<StageLinks> links;
  std::unique_ptr<GlooCollective> replicas;  // the stage's replicas (when it has several)
  std::unique_ptr<GlooCollective> tied;      // the tied weights' group (a tied stage only)
  std::unique_ptr<GlooCollective> job;       // every rank (the job-wide check, clipping)
  std::unique_ptr<DelayTransport> delay;     // --comm-delay-max-ms: wraps links->transport()
  std::unique_ptr<StageRuntime> runtime;
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_WORKER_DAEMON_INTERNAL_H_

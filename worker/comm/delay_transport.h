// Fault injection: a Transport decorator that waits a random time before every Send and every
// Recv, then forwards the call to the wrapped transport (dapple-worker --comm-delay-max-ms,
// docs/worker.md). It makes neighbours' messages arrive late and out of step, so tests can show
// that a schedule neither deadlocks nor changes its numbers when communication is slow and
// jittery (issue 4, "Robustness").
//
// Delays: uniform in [0, max_delay] at microsecond resolution, drawn from a std::mt19937_64
// seeded with Options::seed (use RankSeed(job seed, rank) so every rank draws its own sequence
// and a run is reproducible on the same build). One draw per Send and per Recv, in call order;
// WaitSends is forwarded at once (it only waits for sends already posted). max_delay 0 forwards
// every call without waiting.
//
// Waiting sleeps (never spins), in slices of at most kAbortPollInterval, checking the abort flag
// between slices: once it is true the call returns kAborted ("aborted while delaying a send to
// rank 2") without forwarding, within about one slice. Errors of the wrapped transport are
// returned as they are; after the first error every Send / Recv / WaitSends returns that error
// at once, without waiting (transport.h: a failing transport is not waited on again).
//
// Blocking rules of the wrapped transport apply unchanged (the delay only comes first): a
// Send's `data` must stay valid until WaitSends() returns.
// Thread safety: one thread (transport.h). `inner` and the abort flag are not owned and must
// outlive this object.
#ifndef DAPPLE_WORKER_COMM_DELAY_TRANSPORT_H_
#define DAPPLE_WORKER_COMM_DELAY_TRANSPORT_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/comm/transport.h"

namespace dapple::worker {

class DelayTransport : public Transport {
 public:
  // The longest delay --comm-delay-max-ms accepts (10 s).
  static constexpr absl::Duration kMaxDelay = absl::Seconds(10);
  // How often a delay checks the abort flag.
  static constexpr absl::Duration kAbortPollInterval = absl::Milliseconds(10);

  struct Options {
    absl::Duration max_delay = absl::ZeroDuration();  // 0..kMaxDelay
    uint64_t seed = 0;
    const std::atomic<bool>* abort = nullptr;  // polled while waiting; may be null
    // Tests only: replaces the wait (and with it the abort polling). Null: sleep.
    std::function<void(absl::Duration)> sleep;
    // Which messages wait, by tag (the worker: training activations and gradients, so that an
    // evaluation's many small pieces and the closing handshake are not what a test measures).
    // Null: every one. A message it skips draws no delay.
    std::function<bool(uint64_t tag)> delays_tag;
  };

  // kInvalidArgument when `inner` is null or max_delay is outside 0..kMaxDelay.
  static absl::StatusOr<std::unique_ptr<DelayTransport>> Create(Transport* inner, Options options);

  // A per-rank seed: mixes the job's seed with the rank (SplitMix64), so ranks of one job draw
  // different delays and the same job and rank draw the same ones on every run.
  static uint64_t RankSeed(uint64_t job_seed, int rank);

  absl::Status Send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  absl::Status Recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  absl::Status WaitSends() override;
  // Forwarded at once, as WaitSends.
  bool WaitsForOneSend() const override { return inner_->WaitsForOneSend(); }
  absl::Status WaitSend(int peer, uint64_t tag) override;

  // Delays drawn so far (one per Send / Recv that reached the draw) and their sum.
  int64_t delays() const { return delays_; }
  absl::Duration total_delay() const { return total_delay_; }
  // The newest delay drawn (zero before the first).
  absl::Duration last_delay() const { return last_delay_; }

 private:
  DelayTransport(Transport* inner, Options options);
  // Draws the next delay and waits it out; kAborted (naming `what` and `peer`) when the abort
  // flag becomes true first.
  absl::Status Delay(const char* what, int peer);
  // Remembers the first error of the wrapped transport.
  absl::Status Track(absl::Status status);

  Transport* inner_;
  Options options_;
  int64_t max_delay_us_ = 0;
  std::mt19937_64 rng_;
  absl::Status error_;  // the wrapped transport's first error
  int64_t delays_ = 0;
  absl::Duration total_delay_ = absl::ZeroDuration();
  absl::Duration last_delay_ = absl::ZeroDuration();
};

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_COMM_DELAY_TRANSPORT_H_

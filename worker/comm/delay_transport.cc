#include "worker/comm/delay_transport.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_format.h"

namespace dapple::worker {

absl::StatusOr<std::unique_ptr<DelayTransport>> DelayTransport::Create(Transport* inner,
                                                                       Options options) {
  if (inner == nullptr) return absl::InvalidArgumentError("DelayTransport: no transport to wrap");
  if (options.max_delay < absl::ZeroDuration() || options.max_delay > kMaxDelay) {
    return absl::InvalidArgumentError(
        absl::StrFormat("DelayTransport: max_delay %s must be in 0..%s",
                        absl::FormatDuration(options.max_delay), absl::FormatDuration(kMaxDelay)));
  }
  return std::unique_ptr<DelayTransport>(new DelayTransport(inner, std::move(options)));
}

DelayTransport::DelayTransport(Transport* inner, Options options)
    : inner_(inner),
      options_(std::move(options)),
      max_delay_us_(absl::ToInt64Microseconds(options_.max_delay)),
      rng_(options_.seed) {}

uint64_t DelayTransport::RankSeed(uint64_t job_seed, int rank) {
  // SplitMix64's finaliser over the two inputs: nearby seeds and ranks give unrelated streams
  // (seeding mt19937_64 with job_seed + rank would give neighbouring ranks similar starts).
  uint64_t z = job_seed + 0x9e3779b97f4a7c15ULL * (static_cast<uint64_t>(rank) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

absl::Status DelayTransport::Delay(const char* what, int peer) {
  if (max_delay_us_ == 0) return absl::OkStatus();
  // mt19937_64's output is fixed by the standard, so a modulo keeps the sequence the same on
  // every standard library (std::uniform_int_distribution is not); the bias is below 1e-12.
  const absl::Duration d =
      absl::Microseconds(static_cast<int64_t>(rng_() % static_cast<uint64_t>(max_delay_us_ + 1)));
  ++delays_;
  total_delay_ += d;
  last_delay_ = d;
  if (options_.sleep) {
    options_.sleep(d);
    return absl::OkStatus();
  }
  const absl::Time end = absl::Now() + d;
  while (true) {
    if (options_.abort != nullptr && options_.abort->load()) {
      return absl::AbortedError(absl::StrFormat("aborted while delaying a %s rank %d", what, peer));
    }
    const absl::Duration left = end - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::OkStatus();
    absl::SleepFor(std::min(left, kAbortPollInterval));
  }
}

absl::Status DelayTransport::Track(absl::Status status) {
  if (!status.ok() && error_.ok()) error_ = status;
  return status;
}

absl::Status DelayTransport::Send(int peer, uint64_t tag, const void* data, size_t bytes) {
  if (!error_.ok()) return error_;
  if (!options_.delays_tag || options_.delays_tag(tag)) {
    if (absl::Status s = Delay("send to", peer); !s.ok()) return s;
  }
  return Track(inner_->Send(peer, tag, data, bytes));
}

absl::Status DelayTransport::Recv(int peer, uint64_t tag, void* data, size_t bytes) {
  if (!error_.ok()) return error_;
  if (!options_.delays_tag || options_.delays_tag(tag)) {
    if (absl::Status s = Delay("receive from", peer); !s.ok()) return s;
  }
  return Track(inner_->Recv(peer, tag, data, bytes));
}

absl::Status DelayTransport::WaitSends() {
  if (!error_.ok()) return error_;
  return Track(inner_->WaitSends());
}

absl::Status DelayTransport::WaitSend(int peer, uint64_t tag) {
  if (!error_.ok()) return error_;
  return Track(inner_->WaitSend(peer, tag));
}

}  // namespace dapple::worker

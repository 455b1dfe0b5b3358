#include "worker/comm/gloo_collective.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace dapple::worker {
namespace {

// Gloo reports every failure as an exception with a message; a wait that ran out of time says
// so in it ("Timed out waiting ...", "Wait timeout for key(s) ...", "Connect timeout ..."),
// which is the only way to tell a slow peer from a dead one.
absl::StatusCode CodeOf(const std::string& gloo_message) {
  const std::string lower = absl::AsciiStrToLower(gloo_message);
  if (absl::StrContains(lower, "timed out") || absl::StrContains(lower, "timeout")) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  return absl::StatusCode::kUnavailable;
}

// Gloo's messages carry source locations ("[../gloo/transport/tcp/pair.cc:589] ...", sometimes
// after a prefix); the reader wants what happened, so "[file:line] " is dropped wherever it is.
std::string WithoutLocation(std::string message) {
  size_t from = 0;
  while ((from = message.find('[', from)) != std::string::npos) {
    const size_t end = message.find("] ", from);
    if (end == std::string::npos) break;
    const std::string inside = message.substr(from + 1, end - from - 1);
    if (inside.find(' ') == std::string::npos && inside.find(".cc:") != std::string::npos) {
      message.erase(from, end + 2 - from);
    } else {
      ++from;
    }
  }
  return message;
}

std::chrono::milliseconds ToChrono(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

}  // namespace

GlooCollective::GlooCollective(int rank, int size, std::string label)
    : rank_(rank), size_(size), label_(std::move(label)) {}

GlooCollective::~GlooCollective() {
  // Closing the pairs may throw inside Gloo on a broken connection; a destructor must not.
  try {
    context_.reset();
  } catch (...) {
  }
}

absl::StatusOr<std::unique_ptr<GlooCollective>> GlooCollective::Create(
    int rank, int size, gloo::rendezvous::Store& store, const std::string& prefix,
    const std::string& hostname, absl::Duration timeout, const std::string& label) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s collective: rank %d outside a group of %d members", label, rank, size));
  }
  if (timeout < absl::Milliseconds(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        label, " collective: timeout ", absl::FormatDuration(timeout), " must be at least 1ms"));
  }
  if (hostname.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(label, " collective: empty hostname (the address to bind to)"));
  }
  auto c = std::unique_ptr<GlooCollective>(new GlooCollective(rank, size, label));
  if (size == 1) return c;

  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat(label, " replica ", rank,
                                                      ": Gloo cannot bind to host '", hostname,
                                                      "': ", WithoutLocation(e.what())));
  }
  try {
    gloo::rendezvous::PrefixStore prefixed(prefix, store);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // Gloo's initial connect of a pair waits five times the context's timeout (its tcp/pair.h
    // waitUntil), and a rank can do nothing else meanwhile, not even notice an abort: with
    // `timeout` itself, a member whose peer failed after publishing its address waited 10
    // minutes (a new user's worker stayed BUSY on a FAILED job). A fifth while the mesh
    // connects, then `timeout` for the collectives (their options' default).
    context->setTimeout(ToChrono(std::max(timeout / 5, absl::Milliseconds(1))));
    context->connectFullMesh(prefixed, device);
    context->setTimeout(ToChrono(timeout));
    c->context_ = std::move(context);
  } catch (const std::exception& e) {
    const std::string what = WithoutLocation(e.what());
    return absl::Status(
        CodeOf(what),
        absl::StrFormat("%s replica %d of %d: rendezvous '%s' failed within %s: %s", label, rank,
                        size, prefix, absl::FormatDuration(timeout), what));
  } catch (...) {
    return absl::UnavailableError(absl::StrFormat(
        "%s replica %d of %d: rendezvous '%s' failed (unknown error)", label, rank, size, prefix));
  }
  return c;
}

template <typename Op>
absl::Status GlooCollective::Guard(const char* what, Op op) {
  if (!failed_.ok()) return failed_;
  std::string message;
  try {
    op();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    message = WithoutLocation(e.what());
  } catch (...) {
    message = "unknown error";
  }
  // Gloo's pairs are unusable after an error: every later call fails the same way instead of
  // waiting on a broken mesh.
  failed_ = absl::Status(CodeOf(message), absl::StrFormat("%s replica %d of %d: %s: %s", label_,
                                                          rank_, size_, what, message));
  return failed_;
}

absl::Status GlooCollective::AllReduceSum(float* data, size_t count) {
  if (!failed_.ok()) return failed_;
  if (count == 0 || size_ == 1) return absl::OkStatus();
  const uint32_t tag = next_tag_++;
  return Guard("AllReduce", [&] {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    opts.setReduceFunction(
        static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    opts.setTag(tag);
    gloo::allreduce(opts);
  });
}

absl::Status GlooCollective::AllGather(const void* in, size_t bytes, void* out) {
  if (!failed_.ok()) return failed_;
  if (size_ == 1 || bytes == 0) {
    if (bytes > 0 && out != in) std::memmove(out, in, bytes);
    return absl::OkStatus();
  }
  const uint32_t tag = next_tag_++;
  return Guard("AllGather", [&] {
    gloo::AllgatherOptions opts(context_);
    // Gloo only reads the input, but its API takes a mutable pointer.
    opts.setInput(static_cast<uint8_t*>(const_cast<void*>(in)), bytes);
    opts.setOutput(static_cast<uint8_t*>(out), bytes * static_cast<size_t>(size_));
    opts.setTag(tag);
    gloo::allgather(opts);
  });
}

}  // namespace dapple::worker

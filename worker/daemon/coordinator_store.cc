#include "worker/daemon/coordinator_store.h"

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gloo/common/error.h"
#include "grpcpp/grpcpp.h"

namespace dapple::worker {
namespace {

std::chrono::system_clock::time_point DeadlineIn(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

absl::Status FromGrpc(const grpc::Status& s) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

}  // namespace

StoreCalls StoreCallsOver(v1::WorkerControl::StubInterface* stub, absl::Duration rpc_deadline,
                          const CallAuth* auth) {
  StoreCalls calls;
  calls.set = [stub, rpc_deadline, auth](const v1::StoreSetRequest& request) {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(rpc_deadline));
    if (auth != nullptr) auth->Attach(&ctx);
    v1::StoreSetResponse response;
    return FromGrpc(stub->StoreSet(&ctx, request, &response));
  };
  calls.get = [stub, rpc_deadline,
               auth](const v1::StoreGetRequest& request) -> absl::StatusOr<v1::StoreGetResponse> {
    grpc::ClientContext ctx;
    ctx.set_deadline(DeadlineIn(rpc_deadline));
    if (auth != nullptr) auth->Attach(&ctx);
    v1::StoreGetResponse response;
    if (absl::Status s = FromGrpc(stub->StoreGet(&ctx, request, &response)); !s.ok()) return s;
    return response;
  };
  return calls;
}

CoordinatorStore::CoordinatorStore(StoreCalls calls, Options options)
    : calls_(std::move(calls)), options_(std::move(options)) {}

void CoordinatorStore::set(const std::string& key, const std::vector<char>& data) {
  v1::StoreSetRequest request;
  request.set_job_id(options_.job_id);
  request.set_worker_id(options_.worker_id);
  request.set_key(key);
  request.set_value(std::string(data.begin(), data.end()));
  if (absl::Status s = calls_.set(request); !s.ok()) {
    throw gloo::IoException(absl::StrCat("coordinator store of job ", options_.job_id, ": set '",
                                         key, "': ", s.message()));
  }
}

std::vector<char> CoordinatorStore::get(const std::string& key) {
  const std::string value = Await({key}, options_.timeout).front();
  return std::vector<char>(value.begin(), value.end());
}

void CoordinatorStore::wait(const std::vector<std::string>& keys) { Await(keys, options_.timeout); }

void CoordinatorStore::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  // Gloo passes its own default (30 s) or its context's timeout, which GlooCollective lowers to a
  // fifth of the worker's transport timeout while it connects (Gloo's initial connect waits five
  // times it); the rendezvous keeps the store's own timeout, the worker's transport timeout.
  (void)timeout;
  Await(keys, options_.timeout);
}

std::vector<std::string> CoordinatorStore::Await(const std::vector<std::string>& keys,
                                                 absl::Duration timeout) {
  auto fail = [&](const std::string& why) {
    throw gloo::IoException(absl::StrCat("coordinator store of job ", options_.job_id, ": ", why));
  };
  const std::string named = absl::StrCat("keys [", absl::StrJoin(keys, ", "), "]");
  v1::StoreGetRequest request;
  request.set_job_id(options_.job_id);
  request.set_worker_id(options_.worker_id);
  for (const std::string& key : keys) request.add_keys(key);
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::OkStatus();
  while (true) {
    if (options_.abort != nullptr && options_.abort->load()) {
      fail(absl::StrCat("aborted while waiting for ", named));
    }
    absl::StatusOr<v1::StoreGetResponse> response = calls_.get(request);
    if (response.ok()) {
      if (response->job_ended()) fail(absl::StrCat("the job ended while waiting for ", named));
      if (response->ready()) {
        if (response->values_size() != static_cast<int>(keys.size())) {
          fail(absl::StrCat("asked for ", named, ", got ", response->values_size(), " values"));
        }
        return std::vector<std::string>(response->values().begin(), response->values().end());
      }
      // A refusal (this worker is not the job's, a bad key) will not change by waiting.
    } else if (response.status().code() == absl::StatusCode::kPermissionDenied ||
               response.status().code() == absl::StatusCode::kInvalidArgument ||
               response.status().code() == absl::StatusCode::kNotFound) {
      fail(absl::StrCat("get ", named, ": ", response.status().message()));
    } else {
      last = response.status();
    }
    if (absl::Now() >= deadline) {
      fail(absl::StrCat(named, " not set within ", absl::FormatDuration(timeout),
                        last.ok() ? "" : absl::StrCat(" (last error: ", last.message(), ")")));
    }
    std::this_thread::sleep_for(absl::ToChronoMilliseconds(
        std::min(options_.poll_interval, std::max(deadline - absl::Now(), absl::ZeroDuration()))));
  }
}

}  // namespace dapple::worker

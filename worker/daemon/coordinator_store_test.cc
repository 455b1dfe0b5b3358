#include "worker/daemon/coordinator_store.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gloo/common/error.h"
#include "gtest/gtest.h"

namespace dapple::worker {
namespace {

// One job's store in memory, answering like CoordinatorService::StoreSet / StoreGet.
struct FakeStore {
  absl::Mutex mu;
  std::map<std::string, std::string> values;
  bool ended = false;
  int gets = 0;

  StoreCalls Calls() {
    StoreCalls calls;
    calls.set = [this](const v1::StoreSetRequest& r) {
      absl::MutexLock l(&mu);
      if (r.worker_id() != "w-1" && r.worker_id() != "w-2") {
        return absl::PermissionDeniedError("worker " + r.worker_id() + " runs no rank");
      }
      values[r.key()] = r.value();
      return absl::OkStatus();
    };
    calls.get = [this](const v1::StoreGetRequest& r) -> absl::StatusOr<v1::StoreGetResponse> {
      absl::MutexLock l(&mu);
      ++gets;
      v1::StoreGetResponse response;
      if (ended) {
        response.set_job_ended(true);
        return response;
      }
      for (const std::string& k : r.keys()) {
        if (!values.contains(k)) return response;
      }
      response.set_ready(true);
      for (const std::string& k : r.keys()) response.add_values(values[k]);
      return response;
    };
    return calls;
  }
};

CoordinatorStore::Options Opts(const std::string& worker, absl::Duration timeout,
                               const std::atomic<bool>* abort = nullptr) {
  CoordinatorStore::Options o;
  o.job_id = "job-1";
  o.worker_id = worker;
  o.timeout = timeout;
  o.poll_interval = absl::Milliseconds(5);
  o.abort = abort;
  return o;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const gloo::IoException& e) {
    return e.what();
  }
  return "";
}

TEST(CoordinatorStoreTest, GetWaitsForAnotherMembersSet) {
  FakeStore fake;
  CoordinatorStore a(fake.Calls(), Opts("w-1", absl::Seconds(10)));
  CoordinatorStore b(fake.Calls(), Opts("w-2", absl::Seconds(10)));
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    b.set("stage-1/rank_1", {'x', '\0', 'y'});
  });
  const std::vector<char> got = a.get("stage-1/rank_1");
  setter.join();
  EXPECT_EQ(got, (std::vector<char>{'x', '\0', 'y'}));
  a.wait({"stage-1/rank_1"}, std::chrono::milliseconds(100));
  absl::MutexLock l(&fake.mu);
  EXPECT_GT(fake.gets, 2);  // it polled
}

TEST(CoordinatorStoreTest, TimeoutAbortAndJobEndThrowIoExceptionsNamingTheKeys) {
  FakeStore fake;
  CoordinatorStore store(fake.Calls(), Opts("w-1", absl::Milliseconds(60)));
  std::string e = ErrorOf([&] { store.wait({"a", "b"}); });
  EXPECT_NE(e.find("coordinator store of job job-1: keys [a, b] not set within 60ms"),
            std::string::npos)
      << e;
  // The store's own timeout bounds a wait, whatever Gloo passes (GlooCollective lowers its
  // context's timeout while it connects).
  e = ErrorOf([&] { store.wait({"a"}, std::chrono::milliseconds(5)); });
  EXPECT_NE(e.find("keys [a] not set within 60ms"), std::string::npos) << e;
  e = ErrorOf([&] { store.wait({"a"}, std::chrono::seconds(100)); });
  EXPECT_NE(e.find("keys [a] not set within 60ms"), std::string::npos) << e;

  std::atomic<bool> abort{true};
  CoordinatorStore aborted(fake.Calls(), Opts("w-1", absl::Seconds(100), &abort));
  e = ErrorOf([&] { aborted.get("a"); });
  EXPECT_NE(e.find("aborted while waiting for keys [a]"), std::string::npos) << e;

  {
    absl::MutexLock l(&fake.mu);
    fake.ended = true;
  }
  CoordinatorStore long_wait(fake.Calls(), Opts("w-1", absl::Seconds(100)));
  e = ErrorOf([&] { long_wait.get("a"); });
  EXPECT_NE(e.find("the job ended while waiting for keys [a]"), std::string::npos) << e;
}

TEST(CoordinatorStoreTest, RefusedSetThrows) {
  FakeStore fake;
  CoordinatorStore store(fake.Calls(), Opts("w-9", absl::Seconds(1)));
  const std::string e = ErrorOf([&] { store.set("k", {'v'}); });
  EXPECT_NE(e.find("coordinator store of job job-1: set 'k': worker w-9 runs no rank"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace dapple::worker

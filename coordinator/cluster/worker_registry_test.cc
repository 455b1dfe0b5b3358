#include "coordinator/cluster/worker_registry.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using ::testing::ElementsAre;

// Each request comes from another process (pid, instance key), as real workers do.
v1::RegisterWorkerRequest Request(const std::string& name = "") {
  static int next_pid = 42;
  v1::RegisterWorkerRequest r;
  r.set_hostname("host");
  r.set_instance_key(absl::StrCat("0123456789abcdef0123456789ab", next_pid));
  r.set_pid(next_pid++);
  r.add_devices("cpu");
  r.set_name(name);
  return r;
}

std::vector<std::string> Ids(const std::vector<WorkerRecord*>& workers) {
  std::vector<std::string> ids;
  for (const WorkerRecord* w : workers) ids.push_back(w->info.id());
  return ids;
}

TEST(WorkerRegistryTest, GeneratedAndRequestedIds) {
  WorkerRegistry registry;
  EXPECT_EQ(registry.Register(Request(), 0).info.id(), "w-1");
  EXPECT_EQ(registry.Register(Request("gpu-a"), 0).info.id(), "gpu-a");
  // A taken live name falls back to a generated id; a user name that looks generated is
  // skipped by the generator.
  EXPECT_EQ(registry.Register(Request("gpu-a"), 0).info.id(), "w-2");
  EXPECT_EQ(registry.Register(Request("w-3"), 0).info.id(), "w-3");
  EXPECT_EQ(registry.Register(Request(), 0).info.id(), "w-4");
  const WorkerRecord* w1 = registry.Find("w-1");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->info.state(), v1::WORKER_STATE_IDLE);
  EXPECT_EQ(w1->info.hostname(), "host");
  EXPECT_GE(w1->info.pid(), 42);
  EXPECT_THAT(w1->info.devices(), ElementsAre("cpu"));
  EXPECT_EQ(registry.Find("w-9"), nullptr);
}

TEST(WorkerRegistryTest, ARetriedRegistrationGetsTheSameWorker) {
  WorkerRegistry registry;
  v1::RegisterWorkerRequest named = Request("gpu-a");
  v1::RegisterWorkerRequest unnamed = Request();
  WorkerRecord& a = registry.Register(named, 0);
  WorkerRecord& b = registry.Register(unnamed, 0);
  // The same processes ask again (their replies were lost): same ids, nothing new.
  named.clear_devices();
  named.add_devices("cuda:0");
  EXPECT_EQ(&registry.Register(named, 500), &a);
  EXPECT_EQ(&registry.Register(unnamed, 500), &b);
  EXPECT_EQ(a.info.id(), "gpu-a");
  EXPECT_THAT(a.info.devices(), ElementsAre("cuda:0"));
  EXPECT_EQ(a.info.last_heartbeat_unix_ms(), 500);
  EXPECT_EQ(registry.List().size(), 2u);
  // Another process of the same host asking for the live name still gets another id, and so
  // does the same process asking for another name, or a BUSY worker's process.
  EXPECT_EQ(registry.Register(Request("gpu-a"), 0).info.id(), "w-2");
  v1::RegisterWorkerRequest renamed = unnamed;
  renamed.set_name("other");
  EXPECT_EQ(registry.Register(renamed, 0).info.id(), "other");
  ASSERT_TRUE(registry.Transition(a, v1::WORKER_STATE_BUSY, "test", "job-1", 0).ok());
  EXPECT_EQ(registry.Register(named, 0).info.id(), "w-3");
}

// Hostname and pid are public (`dapplectl workers`): only the process's secret instance key makes
// a registration a retry. Found by a security review: a tenant holding the join token registered
// with a live worker's host and pid, got its id and a credential, and forged its reports.
TEST(WorkerRegistryTest, ARetryMustCarryTheInstanceKey) {
  WorkerRegistry registry;
  const v1::RegisterWorkerRequest genuine = Request();
  WorkerRecord& w = registry.Register(genuine, 0);
  v1::RegisterWorkerRequest forged = genuine;
  forged.set_instance_key("ffffffffffffffffffffffffffffffff");
  EXPECT_NE(&registry.Register(forged, 1), &w);
  forged.clear_instance_key();
  EXPECT_NE(&registry.Register(forged, 2), &w);
  forged.set_instance_key(genuine.instance_key().substr(1));
  EXPECT_NE(&registry.Register(forged, 3), &w);
  EXPECT_EQ(&registry.Register(genuine, 4), &w);
  // A worker that sent no key is never matched by a retry.
  v1::RegisterWorkerRequest keyless = Request();
  keyless.clear_instance_key();
  WorkerRecord& k = registry.Register(keyless, 0);
  EXPECT_NE(&registry.Register(keyless, 1), &k);
  EXPECT_FALSE(SameInstanceKey("", ""));
  EXPECT_TRUE(SameInstanceKey("abc", "abc"));
  EXPECT_FALSE(SameInstanceKey("abc", "abd"));
}

TEST(WorkerRegistryTest, TransitionsFollowTheLifecycle) {
  WorkerRegistry registry;
  WorkerRecord& w = registry.Register(Request(), 0);
  EXPECT_EQ(registry.Transition(w, v1::WORKER_STATE_IDLE, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(registry.Transition(w, v1::WORKER_STATE_BUSY, "no job").ok());
  ASSERT_TRUE(registry.Transition(w, v1::WORKER_STATE_BUSY, "run", "job-1", 1).ok());
  EXPECT_EQ(w.info.job_id(), "job-1");
  EXPECT_EQ(w.info.stage(), 1);
  w.pending_assignment = v1::StageAssignment();
  ASSERT_TRUE(registry.Transition(w, v1::WORKER_STATE_IDLE, "done").ok());
  EXPECT_EQ(w.info.job_id(), "");
  EXPECT_FALSE(w.pending_assignment.has_value());
  ASSERT_TRUE(registry.Transition(w, v1::WORKER_STATE_DEAD, "silent").ok());
  absl::Status s = registry.Transition(w, v1::WORKER_STATE_BUSY, "x", "job-2");
  EXPECT_EQ(s.message(), "worker w-1 is DEAD: cannot go to BUSY");
}

TEST(WorkerRegistryTest, TimedOutAndSchedulable) {
  WorkerRegistry registry;
  WorkerRecord& a = registry.Register(Request(), 1000);
  WorkerRecord& b = registry.Register(Request(), 1000);
  WorkerRecord& c = registry.Register(Request(), 1000);
  b.info.set_last_heartbeat_unix_ms(3000);
  EXPECT_TRUE(registry.TimedOut(5999, 5000).empty());
  EXPECT_EQ(Ids(registry.TimedOut(6000, 5000)), (std::vector<std::string>{"w-1", "w-3"}));

  ASSERT_TRUE(registry.Transition(a, v1::WORKER_STATE_BUSY, "run", "job-1").ok());
  c.reported_job_id = "job-0";  // still reports an old job
  EXPECT_EQ(Ids(registry.Schedulable()), (std::vector<std::string>{"w-2"}));
  ASSERT_TRUE(registry.Transition(c, v1::WORKER_STATE_DEAD, "silent").ok());
  EXPECT_EQ(Ids(registry.TimedOut(100000, 5000)), (std::vector<std::string>{"w-1", "w-2"}));
}

TEST(WorkerRegistryTest, ADeadNameCanRegisterAgainAndBecomesTheNewest) {
  WorkerRegistry registry;
  WorkerRecord& a = registry.Register(Request("a"), 0);
  registry.Register(Request("b"), 0);
  ASSERT_TRUE(registry.Transition(a, v1::WORKER_STATE_DEAD, "silent").ok());
  WorkerRecord& again = registry.Register(Request("a"), 500);
  EXPECT_EQ(again.info.id(), "a");
  EXPECT_EQ(again.info.state(), v1::WORKER_STATE_IDLE);
  EXPECT_EQ(again.info.last_heartbeat_unix_ms(), 500);
  std::vector<std::string> order;
  for (const v1::WorkerInfo& info : registry.List()) order.push_back(info.id());
  EXPECT_THAT(order, ElementsAre("b", "a"));
  EXPECT_EQ(registry.Find("a"), &again);
}

}  // namespace
}  // namespace dapple::coordinator

namespace dapple::coordinator {
namespace {

TEST(WorkerRegistryTest, RemoveForgetsAWorkerInAnyState) {
  WorkerRegistry registry;
  WorkerRecord& w1 = registry.Register(Request(), 0);
  registry.Register(Request(), 0);
  ASSERT_TRUE(registry.Transition(w1, v1::WORKER_STATE_BUSY, "job", "job-1", 0).ok());
  EXPECT_EQ(registry.CountLive(), 2);
  ASSERT_TRUE(registry.Remove("w-1", "shutting down").ok());
  EXPECT_EQ(registry.Find("w-1"), nullptr);
  EXPECT_EQ(registry.CountLive(), 1);
  ASSERT_EQ(registry.List().size(), 1u);
  EXPECT_EQ(registry.List()[0].id(), "w-2");
  absl::Status again = registry.Remove("w-1", "x");
  EXPECT_EQ(again.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(again.message(), "unknown worker w-1");
  // A DEAD worker can be removed too, and a generated id is not handed out again.
  ASSERT_TRUE(registry.Transition(*registry.Find("w-2"), v1::WORKER_STATE_DEAD, "silent").ok());
  EXPECT_EQ(registry.CountLive(), 0);
  ASSERT_TRUE(registry.Remove("w-2", "shutting down").ok());
  EXPECT_EQ(registry.Register(Request(), 0).info.id(), "w-3");
}

}  // namespace
}  // namespace dapple::coordinator

namespace dapple::coordinator {
namespace {

TEST(WorkerRegistryTest, GeneratedIdsContinueFromASavedSequence) {
  WorkerRegistry registry;
  EXPECT_EQ(registry.next_generated_id(), 1);
  registry.ContinueGeneratedIdsFrom(5);
  registry.ContinueGeneratedIdsFrom(3);  // never lowers it
  EXPECT_EQ(registry.next_generated_id(), 5);
  EXPECT_EQ(registry.Register(Request(), 0).info.id(), "w-5");
  EXPECT_EQ(registry.next_generated_id(), 6);
  EXPECT_EQ(registry.Register(Request("named"), 0).info.id(), "named");
  EXPECT_EQ(registry.next_generated_id(), 6);  // a name uses no number

  EXPECT_EQ(WorkerRegistry::GeneratedIdNumber("w-1"), 1);
  EXPECT_EQ(WorkerRegistry::GeneratedIdNumber("w-42"), 42);
  for (const char* other :
       {"w-", "w-0", "w--1", "w-+3", "w- 3", "w-3a", "x-3", "named", "w-1234567890123456789", ""}) {
    EXPECT_EQ(WorkerRegistry::GeneratedIdNumber(other), -1) << other;
  }
}

}  // namespace
}  // namespace dapple::coordinator

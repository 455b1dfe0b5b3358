#include "coordinator/jobs/log_store.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/jobs/test_db.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

std::unique_ptr<LogStore> OpenStore(const std::string& path) {
  absl::StatusOr<std::unique_ptr<LogStore>> store = LogStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? *std::move(store) : nullptr;
}

std::vector<v1::JobLogLine> Lines(const std::vector<std::string>& texts, int64_t unix_ms = 1000) {
  std::vector<v1::JobLogLine> out;
  for (const std::string& t : texts) {
    v1::JobLogLine& line = out.emplace_back();
    line.set_unix_ms(unix_ms);
    line.set_level("info");
    line.set_text(t);
  }
  return out;
}

std::vector<std::string> Texts(const std::vector<v1::JobLogLine>& lines) {
  std::vector<std::string> out;
  for (const v1::JobLogLine& l : lines) out.push_back(l.text());
  return out;
}

TEST(LogStoreTest, KeepsEveryRanksLinesInArrivalOrderWithTheirRank) {
  auto store = OpenStore(FreshDbPath());
  ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines({"a0", "a1"})).ok());
  ASSERT_TRUE(store->Append("job-1", 1, 0, "w-2", Lines({"b0"})).ok());
  ASSERT_TRUE(store->Append("job-2", 0, 0, "w-3", Lines({"other"})).ok());
  ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines({"a2"})).ok());
  std::vector<v1::JobLogLine> all = *store->Get("job-1", {});
  EXPECT_EQ(Texts(all), (std::vector<std::string>{"a0", "a1", "b0", "a2"}));
  EXPECT_EQ(all[2].stage(), 1);
  EXPECT_EQ(all[2].worker_id(), "w-2");
  EXPECT_EQ(all[2].level(), "info");
  EXPECT_EQ(all[2].unix_ms(), 1000);
  EXPECT_LT(all[0].seq(), all[1].seq());
  EXPECT_TRUE(store->Get("job-9", {})->empty());
}

TEST(LogStoreTest, FiltersByRankAfterASeqAndTail) {
  auto store = OpenStore(FreshDbPath());
  ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines({"a0", "a1", "a2"})).ok());
  ASSERT_TRUE(store->Append("job-1", 0, 1, "w-2", Lines({"r0", "r1"})).ok());
  LogStore::Query rank;
  rank.rank = std::make_pair(0, 1);
  EXPECT_EQ(Texts(*store->Get("job-1", rank)), (std::vector<std::string>{"r0", "r1"}));
  LogStore::Query tail;
  tail.tail = 2;
  EXPECT_EQ(Texts(*store->Get("job-1", tail)), (std::vector<std::string>{"r0", "r1"}));
  const int64_t seq = (*store->Get("job-1", {}))[1].seq();  // a1
  LogStore::Query after;
  after.after_seq = seq;
  EXPECT_EQ(Texts(*store->Get("job-1", after)), (std::vector<std::string>{"a2", "r0", "r1"}));
  after.rank = std::make_pair(0, 0);
  after.tail = 5;
  EXPECT_EQ(Texts(*store->Get("job-1", after)), (std::vector<std::string>{"a2"}));
}

TEST(LogStoreTest, KeepsTheNewestLinesOfEachRank) {
  auto store = OpenStore(FreshDbPath());
  ASSERT_TRUE(store->Append("job-1", 1, 0, "w-2", Lines({"other rank"})).ok());
  std::vector<std::string> texts;
  for (int i = 0; i < LogStore::kLinesPerRank + 30; ++i) texts.push_back(absl::StrCat("line ", i));
  ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines(texts)).ok());
  ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines({"last"})).ok());
  LogStore::Query rank;
  rank.rank = std::make_pair(0, 0);
  std::vector<v1::JobLogLine> kept = *store->Get("job-1", rank);
  ASSERT_EQ(static_cast<int>(kept.size()), LogStore::kLinesPerRank);
  EXPECT_EQ(kept.front().text(), "line 31");
  EXPECT_EQ(kept.back().text(), "last");
  rank.rank = std::make_pair(1, 0);
  EXPECT_EQ(store->Get("job-1", rank)->size(), 1u);
}

TEST(LogStoreTest, LinesOutliveAReopen) {
  const std::string path = FreshDbPath();
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store->Append("job-1", 0, 0, "w-1", Lines({"kept"})).ok());
  }
  auto reopened = OpenStore(path);
  EXPECT_EQ(Texts(*reopened->Get("job-1", {})), (std::vector<std::string>{"kept"}));
  EXPECT_EQ(reopened->Append("", 0, 0, "w-1", Lines({"x"})).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dapple::coordinator

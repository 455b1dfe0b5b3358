#include "dapplectl/watch_printer.h"

#include <sstream>

#include "dapplectl/fake_coordinator_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using ::dapple::ctl::testing::Snapshot;
using ::testing::HasSubstr;
using ::testing::Not;

struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::function<absl::Time()> fn() {
    return [this] { return now; };
  }
};

TEST(WatchPrinterTest, TerminalRedrawsOneLineThenSummary) {
  std::ostringstream out;
  FakeClock clock;
  WatchPrinter printer(&out, {.terminal = true, .columns = 200, .now = clock.fn()});
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 5, 10)).ok());
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 6, 10)).ok());
  v1::Job done = Snapshot("job-3", v1::JOB_STATE_SUCCEEDED, 10, 10);
  ASSERT_TRUE(printer.OnSnapshot(done).ok());
  printer.Finish(&done);
  const std::string s = out.str();
  EXPECT_THAT(s, HasSubstr("\rjob-3 RUNNING [##########..........] step 5/10 "));
  EXPECT_THAT(s, HasSubstr("\rjob-3 RUNNING [############........] step 6/10 "));
  // The live line is erased and replaced by the summary; only one newline in all.
  EXPECT_THAT(s, HasSubstr("\r\033[Kjob-3 SUCCEEDED: 1000 samples/s, 10/10 steps in 0:01\n"));
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 1);
  EXPECT_THAT(s, Not(HasSubstr("job-3 SUCCEEDED [")));
}

TEST(WatchPrinterTest, TerminalLineIsCutToTheWidth) {
  std::ostringstream out;
  WatchPrinter printer(&out, {.terminal = true, .columns = 20});
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 5, 10)).ok());
  EXPECT_EQ(out.str(), "\rjob-3 RUNNING [####\033[K");
}

TEST(WatchPrinterTest, TerminalLineEndsBeforeAnError) {
  std::ostringstream out;
  WatchPrinter printer(&out, {.terminal = true});
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 5, 10)).ok());
  printer.Finish(nullptr);
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_THAT(out.str(), Not(HasSubstr("samples/s, ")));  // no summary
}

TEST(WatchPrinterTest, PlainOutputIsThrottledButShowsEveryStateChange) {
  std::ostringstream out;
  FakeClock clock;
  WatchPrinter printer(&out, {.terminal = false, .now = clock.fn()});
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_PENDING, 0, 0)).ok());
  clock.now += absl::Milliseconds(100);
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 1, 10)).ok());
  clock.now += absl::Milliseconds(100);
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 2, 10)).ok());  // no
  clock.now += absl::Seconds(2);
  ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 3, 10)).ok());
  clock.now += absl::Milliseconds(100);
  v1::Job failed = Snapshot("job-3", v1::JOB_STATE_FAILED, 3, 10);
  failed.set_message("worker w-2 lost");
  ASSERT_TRUE(printer.OnSnapshot(failed).ok());
  printer.Finish(&failed);
  EXPECT_EQ(out.str(),
            "job-3 PENDING\n"
            "job-3 RUNNING step 1/10 (10%) epoch 1/1 loss 1.0000 1000 samples/s ETA 0:01\n"
            "job-3 RUNNING step 3/10 (30%) epoch 1/1 loss 0.3333 1000 samples/s ETA 0:01\n"
            "job-3 FAILED (worker w-2 lost): 1000 samples/s, 3/10 steps in 0:00\n");
}

// A language model's job ends with its validation loss and the text it generated.
v1::Job TextJobDone() {
  v1::Job done = Snapshot("job-3", v1::JOB_STATE_SUCCEEDED, 10, 10);
  done.mutable_spec()->mutable_data()->set_dataset("text");
  v1::SampleSpec* sample = done.mutable_spec()->mutable_sample();
  sample->set_prompt("\n");
  sample->set_tokens(25);
  sample->set_temperature(0.8);
  done.mutable_metrics()->set_validation_loss(1.5);
  done.mutable_metrics()->set_validation_bits_per_byte(2.164);
  done.set_sample_text("In the beginning\nGod said");
  return done;
}

TEST(WatchPrinterTest, TextJobEndsWithItsSample) {
  for (bool terminal : {true, false}) {
    std::ostringstream out;
    WatchPrinter printer(&out, {.terminal = terminal, .columns = 200});
    ASSERT_TRUE(printer.OnSnapshot(Snapshot("job-3", v1::JOB_STATE_RUNNING, 5, 10)).ok());
    const v1::Job done = TextJobDone();
    ASSERT_TRUE(printer.OnSnapshot(done).ok());
    printer.Finish(&done);
    EXPECT_THAT(out.str(),
                HasSubstr("job-3 SUCCEEDED: validation loss 1.5000 (2.1640 bits/byte), 1000 "
                          "samples/s, 10/10 steps in 0:01\n"
                          "SAMPLE        25 bytes generated after sample.prompt \"\\n\", "
                          "temperature 0.8\n"
                          "  In the beginning\n"
                          "  God said\n"))
        << "terminal " << terminal;
  }
}

TEST(WatchPrinterTest, JsonCarriesTheSampleInTheJob) {
  std::ostringstream out;
  WatchPrinter printer(&out, {.json = true});
  const v1::Job done = TextJobDone();
  ASSERT_TRUE(printer.OnSnapshot(done).ok());
  printer.Finish(&done);
  EXPECT_THAT(out.str(), HasSubstr("\"sample_text\":\"In the beginning\\nGod said\""));
  EXPECT_THAT(out.str(), HasSubstr("\"validation_loss\":1.5"));
  EXPECT_THAT(out.str(), Not(HasSubstr("SAMPLE ")));
}

TEST(WatchPrinterTest, RepeatedSnapshotsArePrintedOnce) {
  std::ostringstream out;
  FakeClock clock;
  WatchPrinter printer(&out, {.json = true, .now = clock.fn()});
  const v1::Job job = Snapshot("job-3", v1::JOB_STATE_RUNNING, 1, 10);
  ASSERT_TRUE(printer.OnSnapshot(job).ok());
  ASSERT_TRUE(printer.OnSnapshot(job).ok());
  v1::Job done = Snapshot("job-3", v1::JOB_STATE_SUCCEEDED, 10, 10);
  ASSERT_TRUE(printer.OnSnapshot(done).ok());
  printer.Finish(&done);
  // JSON Lines: one compact object per distinct snapshot, the last one terminal, no summary.
  const std::string s = out.str();
  EXPECT_EQ(std::count(s.begin(), s.end(), '\n'), 2);
  EXPECT_THAT(s, HasSubstr("\"state\":\"RUNNING\""));
  EXPECT_THAT(s, HasSubstr("\"state\":\"SUCCEEDED\""));
  EXPECT_THAT(s, Not(HasSubstr("steps in")));
}

}  // namespace
}  // namespace dapple::ctl

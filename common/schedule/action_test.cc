#include "common/schedule/action.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dapple::schedule {
namespace {

using ::testing::HasSubstr;

TEST(ActionTest, MakeActionSetsFields) {
  const v1::Action a = MakeAction(2, v1::SEND_GRAD, 7);
  EXPECT_EQ(a.stage(), 2);
  EXPECT_EQ(a.kind(), v1::SEND_GRAD);
  EXPECT_EQ(a.micro_batch(), 7);
  EXPECT_EQ(MakeAction(0, v1::OPTIMIZER_STEP).micro_batch(), -1);
}

TEST(ActionTest, ToStringExamples) {
  EXPECT_EQ(ActionToString(MakeAction(1, v1::FORWARD, 3)), "1F3");
  EXPECT_EQ(ActionToString(MakeAction(0, v1::BACKWARD, 2)), "0B2");
  EXPECT_EQ(ActionToString(MakeAction(2, v1::SEND_ACT, 0)), "2SEND_ACT0");
  EXPECT_EQ(ActionToString(MakeAction(3, v1::RECV_ACT, 11)), "3RECV_ACT11");
  EXPECT_EQ(ActionToString(MakeAction(4, v1::SEND_GRAD, 1)), "4SEND_GRAD1");
  EXPECT_EQ(ActionToString(MakeAction(1, v1::RECV_GRAD, 5)), "1RECV_GRAD5");
  EXPECT_EQ(ActionToString(MakeAction(0, v1::ALLREDUCE)), "0ALLREDUCE");
  EXPECT_EQ(ActionToString(MakeAction(0, v1::OPTIMIZER_STEP)), "0STEP");
  EXPECT_EQ(ActionToString(MakeAction(3, v1::TIED_ALLREDUCE)), "3TIED_ALLREDUCE");
  EXPECT_EQ(ActionToString(MakeAction(1, v1::GLOBAL_NORM)), "1GLOBAL_NORM");
  EXPECT_EQ(ActionToString(MakeAction(12, v1::FORWARD, 100)), "12F100");
  EXPECT_EQ(ActionToString(MakeAction(1, v1::BACKWARD_INPUT, 3)), "1BI3");
  EXPECT_EQ(ActionToString(MakeAction(2, v1::BACKWARD_WEIGHT, 0)), "2BW0");
  // ALLREDUCE and STEP never print a micro-batch, even a stray one.
  EXPECT_EQ(ActionToString(MakeAction(0, v1::OPTIMIZER_STEP, 4)), "0STEP");
}

TEST(ActionTest, DescribeInWords) {
  EXPECT_EQ(DescribeAction(MakeAction(0, v1::RECV_GRAD, 5)),
            "receiving the gradients of micro-batch 5");
  EXPECT_EQ(DescribeAction(MakeAction(1, v1::FORWARD, 0)), "the forward of micro-batch 0");
  EXPECT_EQ(DescribeAction(MakeAction(1, v1::ALLREDUCE)),
            "the gradient AllReduce over the stage's replicas");
  EXPECT_EQ(DescribeAction(MakeAction(1, v1::OPTIMIZER_STEP)), "the optimizer step");
  EXPECT_EQ(DescribeAction(MakeAction(1, v1::BACKWARD_INPUT, 4)),
            "the input-gradient backward of micro-batch 4");
  EXPECT_EQ(DescribeAction(MakeAction(1, v1::BACKWARD_WEIGHT, 4)),
            "the weight-gradient backward of micro-batch 4");
  for (int k = v1::ActionKind_MIN + 1; k <= v1::ActionKind_MAX; ++k) {
    if (!v1::ActionKind_IsValid(k)) continue;
    const std::string words = DescribeAction(MakeAction(0, static_cast<v1::ActionKind>(k), 2));
    EXPECT_EQ(words.find("action "), std::string::npos) << "kind " << k << ": " << words;
  }
}

TEST(ActionTest, UnknownKindPrintsAndDoesNotParse) {
  const std::string text = ActionToString(MakeAction(1, v1::ACTION_KIND_UNSPECIFIED, 3));
  EXPECT_EQ(text, "1UNKNOWN(0)3");
  EXPECT_EQ(ParseAction(text).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ActionTest, RoundTripsEveryKind) {
  const std::vector<v1::ActionKind> kinds = {
      v1::FORWARD,     v1::BACKWARD,       v1::SEND_ACT,       v1::RECV_ACT,
      v1::SEND_GRAD,   v1::RECV_GRAD,      v1::ALLREDUCE,      v1::OPTIMIZER_STEP,
      v1::GLOBAL_NORM, v1::TIED_ALLREDUCE, v1::BACKWARD_INPUT, v1::BACKWARD_WEIGHT};
  int checked = 0;
  for (v1::ActionKind kind : kinds) {
    const bool has_mb = kind != v1::ALLREDUCE && kind != v1::OPTIMIZER_STEP &&
                        kind != v1::GLOBAL_NORM && kind != v1::TIED_ALLREDUCE;
    EXPECT_EQ(KindHasMicroBatch(kind), has_mb) << v1::ActionKind_Name(kind);
    for (int stage : {0, 1, 7, 10, 123}) {
      for (int mb : {0, 1, 9, 10, 4096}) {
        const v1::Action a = MakeAction(stage, kind, has_mb ? mb : -1);
        const std::string text = ActionToString(a);
        absl::StatusOr<v1::Action> parsed = ParseAction(text);
        ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
        EXPECT_EQ(parsed->stage(), stage) << text;
        EXPECT_EQ(parsed->kind(), kind) << text;
        EXPECT_EQ(parsed->micro_batch(), has_mb ? mb : -1) << text;
        EXPECT_EQ(ActionToString(*parsed), text);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 12 * 5 * 5);
}

TEST(ActionTest, RoundTripsWeightAndAsyncKinds) {
  for (v1::ActionKind kind :
       {v1::RESTORE_WEIGHTS, v1::STASH_WEIGHTS, v1::ALLREDUCE_ASYNC, v1::STALE_OPTIMIZER_STEP}) {
    EXPECT_FALSE(KindHasMicroBatch(kind));
    const std::string text = ActionToString(MakeAction(2, kind));
    absl::StatusOr<v1::Action> parsed = ParseAction(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(parsed->kind(), kind);
    EXPECT_EQ(ActionToString(*parsed), text);
  }
  EXPECT_EQ(ActionToString(MakeAction(0, v1::STALE_OPTIMIZER_STEP)), "0STALE_STEP");
  for (v1::ActionKind kind : {v1::USE_WEIGHTS, v1::DROP_WEIGHTS}) {
    EXPECT_FALSE(KindHasMicroBatch(kind));
    for (int version : {-3, 0, 2}) {
      v1::Action a = MakeAction(1, kind);
      a.set_weight_version(version);
      const std::string text = ActionToString(a);
      absl::StatusOr<v1::Action> parsed = ParseAction(text);
      ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
      EXPECT_EQ(parsed->kind(), kind);
      EXPECT_EQ(parsed->weight_version(), version);
      EXPECT_EQ(ActionToString(*parsed), text);
    }
  }
  v1::Action use = MakeAction(0, v1::USE_WEIGHTS);
  use.set_weight_version(-1);
  EXPECT_EQ(ActionToString(use), "0USE_WEIGHTS@-1");
  for (const char* bad :
       {"0USE_WEIGHTS", "0USE_WEIGHTS3", "0DROP_WEIGHTS@", "0USE_WEIGHTS@x", "0USE_WEIGHTS@+1"}) {
    EXPECT_EQ(ParseAction(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(KindHasMicroBatch(v1::ACTION_KIND_UNSPECIFIED));
}

TEST(ActionTest, ParseRejectsMalformedTextAndNamesIt) {
  for (const char* text :
       {"",          "F3",          "1",      "1X3",           "1F",
        "1F-1",      "-1F3",        "1f3",    "1 F3",          "1F3 ",
        " 1F3",      "1F3x",        "1F0x1",  "1STEP2",        "1ALLREDUCE0",
        "1SEND_ACT", "1SEND_ACTS0", "1SEND0", "99999999999F1", "1F99999999999",
        "1F+3",      "1F0x3",       "1B 2",   "1GLOBAL_NORM0", "1TIED_ALLREDUCE3",
        "1TIED",     "1BI",         "1BX3",   "1BW-1",         "1bi3"}) {
    absl::StatusOr<v1::Action> parsed = ParseAction(text);
    ASSERT_FALSE(parsed.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(std::string("\"") + text + "\""));
  }
}

TEST(ActionTest, ParseErrorsSayWhatIsWrong) {
  EXPECT_THAT(std::string(ParseAction("1X3").status().message()), HasSubstr("unknown code \"X\""));
  EXPECT_THAT(std::string(ParseAction("1F").status().message()), HasSubstr("missing micro-batch"));
  EXPECT_THAT(std::string(ParseAction("F1").status().message()), HasSubstr("no stage"));
  EXPECT_THAT(std::string(ParseAction("0STEP1").status().message()),
              HasSubstr("takes no micro-batch"));
}

TEST(ActionTest, ActionsToStringJoinsWithSingleSpaces) {
  EXPECT_EQ(ActionsToString({}), "");
  EXPECT_EQ(ActionsToString({MakeAction(0, v1::FORWARD, 0)}), "0F0");
  EXPECT_EQ(ActionsToString({MakeAction(1, v1::RECV_ACT, 0), MakeAction(1, v1::FORWARD, 0),
                             MakeAction(1, v1::OPTIMIZER_STEP)}),
            "1RECV_ACT0 1F0 1STEP");
}

TEST(ActionTest, ProgramToStringNamesStageAndReplica) {
  v1::RankProgram program;
  program.set_stage(1);
  program.set_replica(2);
  EXPECT_EQ(ProgramToString(program), "stage 1 replica 2:");
  *program.add_actions() = MakeAction(1, v1::RECV_ACT, 0);
  *program.add_actions() = MakeAction(1, v1::FORWARD, 0);
  EXPECT_EQ(ProgramToString(program), "stage 1 replica 2: 1RECV_ACT0 1F0");
}

}  // namespace
}  // namespace dapple::schedule

#include "dapplectl/trace_json.h"

#include <map>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace dapple::ctl {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int64_t kT0 = 1'700'000'000'000'000;  // us since the epoch

void AddEvent(v1::StepTrace* t, v1::ActionKind kind, int mb, int64_t start, int64_t end) {
  v1::TraceEvent* e = t->add_events();
  e->set_kind(kind);
  e->set_micro_batch(mb);
  e->set_start_us(kT0 + start);
  e->set_end_us(kT0 + end);
}

// Two stages of one step, M = 1, times in us after kT0:
//   stage 0: F0 [0,100] SEND_ACT0 [100,110] RECV_GRAD0 [110,400] B0 [400,600] OPT [650,700]
//   stage 1 starts at 105: RECV_ACT0 [105,120] F0 [120,250] B0 [250,380] SEND_GRAD0 [380,390]
//            OPT [390,420]
// Stage 0 idles [110,400] (the RECV) and [600,650]: 340 us; stage 1 [105,120]: 15 us.
v1::JobTrace TwoStages() {
  v1::JobTrace jt;
  jt.set_job_id("job-7");
  jt.set_num_stages(2);
  v1::StepTrace* s0 = jt.add_steps();
  s0->set_job_id("job-7");
  s0->set_stage(0);
  s0->set_worker_id("w-1");
  s0->set_device("cpu");
  s0->set_step(1);
  AddEvent(s0, v1::FORWARD, 0, 0, 100);
  AddEvent(s0, v1::SEND_ACT, 0, 100, 110);
  AddEvent(s0, v1::RECV_GRAD, 0, 110, 400);
  AddEvent(s0, v1::BACKWARD, 0, 400, 600);
  AddEvent(s0, v1::OPTIMIZER_STEP, -1, 650, 700);
  s0->set_start_us(kT0);
  s0->set_end_us(kT0 + 700);
  s0->mutable_stats()->set_step(1);
  s0->mutable_stats()->set_idle_seconds(340e-6);
  s0->mutable_stats()->set_step_seconds(700e-6);
  v1::StepTrace* s1 = jt.add_steps();
  s1->set_job_id("job-7");
  s1->set_stage(1);
  s1->set_worker_id("w-\"2\"");
  s1->set_device("cuda:0");
  s1->set_step(1);
  AddEvent(s1, v1::RECV_ACT, 0, 105, 120);
  AddEvent(s1, v1::FORWARD, 0, 120, 250);
  AddEvent(s1, v1::BACKWARD, 0, 250, 380);
  AddEvent(s1, v1::SEND_GRAD, 0, 380, 390);
  AddEvent(s1, v1::OPTIMIZER_STEP, -1, 390, 420);
  s1->set_start_us(kT0 + 105);
  s1->set_end_us(kT0 + 420);
  s1->mutable_stats()->set_step(1);
  s1->mutable_stats()->set_idle_seconds(15e-6);
  return jt;
}

Struct Parse(const std::string& json) {
  Struct out;
  auto status = google::protobuf::util::JsonStringToMessage(json, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return out;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value kNull;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kNull : it->second;
}

TEST(TraceJsonTest, NamesAndCategoriesOfActions) {
  v1::TraceEvent e;
  e.set_micro_batch(3);
  const std::vector<std::tuple<v1::ActionKind, std::string, std::string>> want = {
      {v1::FORWARD, "F3", "forward"},
      {v1::BACKWARD, "B3", "backward"},
      {v1::SEND_ACT, "SEND_ACT 3", "send"},
      {v1::RECV_ACT, "RECV_ACT 3", "recv"},
      {v1::SEND_GRAD, "SEND_GRAD 3", "send"},
      {v1::RECV_GRAD, "RECV_GRAD 3", "recv"},
      {v1::ALLREDUCE, "ALLREDUCE", "allreduce"},
      {v1::TIED_ALLREDUCE, "TIED_ALLREDUCE", "allreduce"},
      {v1::GLOBAL_NORM, "GLOBAL_NORM", "allreduce"},
      {v1::OPTIMIZER_STEP, "OPTIMIZER_STEP", "optimizer"}};
  for (const auto& [kind, name, cat] : want) {
    e.set_kind(kind);
    EXPECT_EQ(TraceEventName(e), name);
    EXPECT_EQ(TraceEventCategory(kind), cat);
  }
}

TEST(TraceJsonTest, JsonStringEscapes) {
  EXPECT_EQ(JsonString("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\n\\u0001\"");
  EXPECT_EQ(JsonString("stage 0"), "\"stage 0\"");
}

TEST(TraceJsonTest, AnEmptyTraceIsAValidObjectWithoutEvents) {
  v1::JobTrace jt;
  jt.set_job_id("job-1");
  Struct doc = Parse(TraceToChromeJson(jt));
  EXPECT_EQ(Field(doc, "traceEvents").list_value().values_size(), 0);
  EXPECT_EQ(Field(doc, "displayTimeUnit").string_value(), "ms");
  EXPECT_EQ(Field(Field(doc, "metadata").struct_value(), "job_id").string_value(), "job-1");
  TraceCounts c = CountTrace(jt);
  EXPECT_EQ(c.steps, 0);
  EXPECT_EQ(c.ranks, 0);
}

TEST(TraceJsonTest, OneProcessPerStageOneThreadPerReplicaAndEveryAction) {
  const v1::JobTrace jt = TwoStages();
  const TraceCounts c = CountTrace(jt);
  EXPECT_EQ(c.steps, 1);
  EXPECT_EQ(c.ranks, 2);
  Struct doc = Parse(TraceToChromeJson(jt));
  const auto& events = Field(doc, "traceEvents").list_value().values();
  std::map<std::string, std::string> process_names, thread_names;
  std::map<int, std::vector<const Struct*>> complete;  // by pid, in file order
  for (const Value& v : events) {
    const Struct& e = v.struct_value();
    const std::string ph = Field(e, "ph").string_value();
    const int pid = static_cast<int>(Field(e, "pid").number_value());
    const int tid = static_cast<int>(Field(e, "tid").number_value());
    const Struct& args = Field(e, "args").struct_value();
    if (ph == "M") {
      const std::string name = Field(e, "name").string_value();
      if (name == "process_name")
        process_names[std::to_string(pid)] = Field(args, "name").string_value();
      if (name == "thread_name") {
        thread_names[std::to_string(pid) + "/" + std::to_string(tid)] =
            Field(args, "name").string_value();
      }
      continue;
    }
    ASSERT_EQ(ph, "X");
    EXPECT_EQ(tid, 1);
    EXPECT_GE(Field(e, "ts").number_value(), 0);
    EXPECT_GE(Field(e, "dur").number_value(), 0);
    EXPECT_EQ(Field(args, "step").number_value(), 1);
    complete[pid].push_back(&e);
  }
  EXPECT_EQ(process_names["1"], "stage 0");
  EXPECT_EQ(process_names["2"], "stage 1");
  EXPECT_EQ(thread_names["1/1"], "replica 0 (w-1, cpu)");
  EXPECT_EQ(thread_names["2/1"], "replica 0 (w-\"2\", cuda:0)");

  // Stage 0 in file order: the step, then each idle event before what it contains.
  std::vector<std::string> names, cats;
  for (const Struct* e : complete[1]) {
    names.push_back(Field(*e, "name").string_value());
    cats.push_back(Field(*e, "cat").string_value());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"step 1", "F0", "SEND_ACT 0", "idle", "RECV_GRAD 0",
                                             "B0", "idle", "OPTIMIZER_STEP"}));
  EXPECT_EQ(cats, (std::vector<std::string>{"step", "forward", "send", "idle", "recv", "backward",
                                            "idle", "optimizer"}));
  // ts relative to the earliest event (stage 0's F0 at kT0).
  EXPECT_EQ(Field(*complete[1][1], "ts").number_value(), 0);
  EXPECT_EQ(Field(*complete[1][3], "ts").number_value(), 110);  // idle over the RECV
  EXPECT_EQ(Field(*complete[1][3], "dur").number_value(), 290);
  EXPECT_EQ(Field(*complete[1][6], "ts").number_value(), 600);
  EXPECT_EQ(Field(*complete[1][6], "dur").number_value(), 50);
  EXPECT_EQ(Field(Field(*complete[1][7], "args").struct_value(), "micro_batch").number_value(), -1);
  const Struct& step_args = Field(*complete[1][0], "args").struct_value();
  EXPECT_DOUBLE_EQ(Field(step_args, "idle_seconds").number_value(), 340e-6);
  EXPECT_EQ(Field(*complete[1][0], "dur").number_value(), 700);

  // Per rank, the idle events add up to the step's idle_seconds.
  for (int pid : {1, 2}) {
    double idle_us = 0, step_idle = -1;
    for (const Struct* e : complete[pid]) {
      if (Field(*e, "cat").string_value() == "idle") idle_us += Field(*e, "dur").number_value();
      if (Field(*e, "cat").string_value() == "step") {
        step_idle = Field(Field(*e, "args").struct_value(), "idle_seconds").number_value();
      }
    }
    EXPECT_NEAR(idle_us * 1e-6, step_idle, 1e-12) << "pid " << pid;
  }
  // Stage 1 starts with its RECV: the idle event starts with the step, at ts 105.
  EXPECT_EQ(Field(*complete[2][1], "name").string_value(), "idle");
  EXPECT_EQ(Field(*complete[2][1], "ts").number_value(), 105);
  EXPECT_EQ(Field(*complete[2][2], "name").string_value(), "RECV_ACT 0");
  const Struct& meta = Field(doc, "metadata").struct_value();
  EXPECT_EQ(Field(meta, "num_stages").number_value(), 2);
  EXPECT_EQ(Field(meta, "ranks").number_value(), 2);
  EXPECT_EQ(Field(meta, "traced_steps").list_value().values_size(), 1);
}

TEST(TraceJsonTest, StepsOfARankComeInStepOrder) {
  v1::JobTrace jt;
  jt.set_job_id("job-1");
  for (int64_t step : {50, 1, 100}) {
    v1::StepTrace* s = jt.add_steps();
    s->set_step(step);
    s->set_start_us(kT0 + step * 1000);
    s->set_end_us(kT0 + step * 1000 + 10);
    AddEvent(s, v1::FORWARD, 0, step * 1000, step * 1000 + 10);
  }
  Struct doc = Parse(TraceToChromeJson(jt));
  std::vector<std::string> steps;
  for (const Value& v : Field(doc, "traceEvents").list_value().values()) {
    const Struct& e = v.struct_value();
    if (Field(e, "cat").string_value() == "step") steps.push_back(Field(e, "name").string_value());
  }
  EXPECT_EQ(steps, (std::vector<std::string>{"step 1", "step 50", "step 100"}));
  EXPECT_EQ(CountTrace(jt).steps, 3);
  EXPECT_EQ(CountTrace(jt).ranks, 1);
}

// GLOBAL_NORM computes its squared norm before it waits (TraceEvent.busy_us): only the wait is
// idle, as the step's idle_seconds counts it.
TEST(TraceJsonTest, AWaitingActionsComputedStartIsNotIdle) {
  v1::JobTrace jt;
  jt.set_job_id("job-2");
  v1::StepTrace* s = jt.add_steps();
  s->set_step(1);
  s->set_start_us(kT0);
  s->set_end_us(kT0 + 500);
  AddEvent(s, v1::BACKWARD, 0, 0, 100);
  AddEvent(s, v1::GLOBAL_NORM, -1, 100, 400);  // 30 us of norm, then 270 us of waiting
  s->mutable_events(1)->set_busy_us(30);
  AddEvent(s, v1::OPTIMIZER_STEP, -1, 400, 500);
  s->mutable_stats()->set_idle_seconds(270e-6);
  Struct doc = Parse(TraceToChromeJson(jt));
  double idle_us = 0;
  for (const Value& v : Field(doc, "traceEvents").list_value().values()) {
    const Struct& e = v.struct_value();
    if (Field(e, "cat").string_value() != "idle") continue;
    EXPECT_EQ(Field(e, "ts").number_value(), 130);
    idle_us += Field(e, "dur").number_value();
  }
  EXPECT_EQ(idle_us, 270);
}

}  // namespace
}  // namespace dapple::ctl

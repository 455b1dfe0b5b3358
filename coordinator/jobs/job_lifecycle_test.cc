#include "coordinator/jobs/job_lifecycle.h"

#include <set>
#include <utility>

#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

using S = v1::JobState;

const S kAll[] = {v1::JOB_STATE_UNSPECIFIED, v1::JOB_STATE_PENDING,   v1::JOB_STATE_PLANNING,
                  v1::JOB_STATE_RUNNING,     v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED,
                  v1::JOB_STATE_CANCELLED};

TEST(JobLifecycleTest, ExactlyTheDiagramEdgesAreAllowed) {
  const std::set<std::pair<S, S>> edges = {
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_PLANNING},
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_PENDING, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_PLANNING, v1::JOB_STATE_RUNNING},
      {v1::JOB_STATE_PLANNING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_PLANNING, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLED},
      {v1::JOB_STATE_RUNNING, v1::JOB_STATE_PENDING},  // preempted
  };
  for (S from : kAll) {
    for (S to : kAll) {
      EXPECT_EQ(IsAllowedTransition(from, to), edges.contains({from, to}))
          << JobStateName(from) << " -> " << JobStateName(to);
    }
  }
}

TEST(JobLifecycleTest, TerminalStates) {
  std::set<S> terminal;
  for (S s : kAll) {
    if (IsTerminal(s)) terminal.insert(s);
  }
  EXPECT_EQ(terminal,
            (std::set<S>{v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED}));
}

TEST(JobLifecycleTest, Names) {
  EXPECT_EQ(JobStateName(v1::JOB_STATE_PENDING), "PENDING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_CANCELLED), "CANCELLED");
  EXPECT_EQ(JobStateName(static_cast<S>(42)), "STATE_42");
}

}  // namespace
}  // namespace dapple::coordinator

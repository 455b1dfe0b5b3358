// StragglerDetector: names the ranks of a running job that compute much more slowly than the
// other replicas of their stage (`dapplectl top`'s STRAGGLER column, the
// dapple_stage_straggler metric, a Straggler event).
//
// The rule. A rank's time is its compute per step: forward + backward + optimizer seconds of
// its StageStepStats (not the step time: in a synchronous pipeline every rank's step lasts as
// long as the slowest one's, the others wait in receives and AllReduce). Its level is the
// median of its last kWindow steps. A rank is judged once it and at least one other replica of
// its stage have kWindow steps; stages with one replica are never judged (no peer does the
// same work). A judged rank whose level exceeds kRatio x the median of the levels of its
// stage's other replicas is "slow" for that report; after kConsecutive slow reports in a row
// it becomes a straggler, and after kConsecutive reports in a row that are not slow it stops
// being one.
//
// Thread safety: thread-compatible (the coordinator service calls it under its mutex).
#ifndef DAPPLE_COORDINATOR_JOBS_STRAGGLER_DETECTOR_H_
#define DAPPLE_COORDINATOR_JOBS_STRAGGLER_DETECTOR_H_

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

class StragglerDetector {
 public:
  static constexpr int kWindow = 10;
  static constexpr double kRatio = 1.5;
  static constexpr int kConsecutive = 3;

  // A rank that became a straggler (straggler = true) or stopped being one.
  struct Change {
    int stage = 0;
    int replica = 0;
    bool straggler = false;
    double rank_seconds = 0;   // the rank's median compute per step
    double peers_seconds = 0;  // the median of its stage's other replicas' medians
  };

  // The step `stats` of rank (stage, replica). Returns the rank's change of status, if any.
  std::optional<Change> OnStep(int stage, int replica, const v1::StageStepStats& stats);

  // Whether the rank is a straggler now, and its level / its peers' level (0 while unjudged).
  bool IsStraggler(int stage, int replica) const;
  double Ratio(int stage, int replica) const;

  // "stage 1 replica 1 computes 2.10x its stage's other replicas: median 42.0 ms vs 20.0 ms
  // per step over the last 10 steps" / "... is no longer a straggler: ...".
  static std::string Describe(const Change& change);

 private:
  struct Rank {
    std::deque<double> seconds;  // the newest kWindow compute times
    int slow_run = 0;            // consecutive slow reports
    int normal_run = 0;          // consecutive reports that were not slow
    bool straggler = false;
    double ratio = 0;
  };

  std::map<std::pair<int, int>, Rank> ranks_;  // by (stage, replica)
};

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_JOBS_STRAGGLER_DETECTOR_H_

// dapplectl's text for checkpoints (docs/dapplectl.md): the lines `dapplectl get` adds for a
// job's published checkpoints and the checkpoint it resumed from, and `dapplectl checkpoint`'s
// one-line answer. Pure functions.
#ifndef DAPPLE_DAPPLECTL_CHECKPOINT_VIEWS_H_
#define DAPPLE_DAPPLECTL_CHECKPOINT_VIEWS_H_

#include <cstdint>
#include <string>

#include "dapple/v1/coordinator.pb.h"
#include "dapple/v1/job.pb.h"

namespace dapple::ctl {

// "RESUMED FROM  /ckpt/job-1/step-40\n" when the job resumed, then "CHECKPOINTS   none\n" or
// "CHECKPOINTS   2\n" and a table (STEP, PATH, SIZE, REASON, AGE), oldest first.
std::string RenderCheckpoints(const v1::Job& job, int64_t now_unix_ms);

// "job-3: checkpoint after step 120 requested\n".
std::string RenderCheckpointRequested(const v1::CheckpointJobResponse& response);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_CHECKPOINT_VIEWS_H_

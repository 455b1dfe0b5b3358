// Runs a coordinator's ProfileRequest (worker.proto) on this worker: opens the requested device,
// measures the model layer by layer (worker/runtime/layer_profiler.h) and builds the report.
#ifndef DAPPLE_WORKER_DAEMON_PROFILE_RUNNER_H_
#define DAPPLE_WORKER_DAEMON_PROFILE_RUNNER_H_

#include <string>

#include "dapple/v1/worker.pb.h"

namespace dapple::worker {

// Measures request.spec().model() on request.device() at request.batch_size() samples and
// returns the ReportProfileRequest to send: its profile on success, else `error` set to one line
// naming what failed (a bad device, a device this build cannot use, a layer's failure). Never
// crashes on a bad request. Blocks for the measurement (seconds for the built-in models), and on
// a cpu device first for the host's measurement lock (host_capacity.h HostMeasurementLock: no
// other worker of the host measures the host while the layers are timed); call it off the
// heartbeat thread. Thread-compatible.
v1::ReportProfileRequest RunProfileRequest(const std::string& worker_id,
                                           const v1::ProfileRequest& request);

}  // namespace dapple::worker

#endif  // DAPPLE_WORKER_DAEMON_PROFILE_RUNNER_H_

// The rule for a worker's name (dapple-worker --name, RegisterWorkerRequest.name), in one place:
// the worker checks its flag with it and the coordinator every registration, since a peer sets
// the field and every user sees it in `dapplectl workers` and in log lines.
#ifndef DAPPLE_COMMON_WORKER_NAME_H_
#define DAPPLE_COMMON_WORKER_NAME_H_

#include "absl/strings/string_view.h"

namespace dapple {

// The rule as messages state it.
inline constexpr char kWorkerNameRule[] =
    "1-63 characters of a-z 0-9 - _ ., starting with a letter or digit";

// Whether `name` obeys kWorkerNameRule. Pure; thread-safe.
bool ValidWorkerName(absl::string_view name);

}  // namespace dapple

#endif  // DAPPLE_COMMON_WORKER_NAME_H_

// Who may do what (issue 16, "Isolation"; docs/security.md has the RPC x caller table): the
// rules every handler applies to the verified caller, in one place.
//
//  - Coordinator service (dapplectl): users and admins; a user acts on and sees its tenant's
//    jobs only, an admin on all. Worker credentials and the join token: kPermissionDenied.
//  - Admin service: admins only ("admin only").
//  - WorkerControl: worker credentials, each only for its own worker id and the ranks assigned
//    to it; RegisterWorker also (and first) with the join token. Users and admins:
//    kPermissionDenied.
//
// Thread safety: pure functions.
#ifndef DAPPLE_COORDINATOR_AUTH_ACCESS_H_
#define DAPPLE_COORDINATOR_AUTH_ACCESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/auth/identity.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator::auth {

// The services of the coordinator's port, for CheckService.
enum class Service { kCoordinator, kAdmin, kWorkerControl };

// OK when `caller`'s role may call `service` at all (see above; RegisterWorker's join token is
// accepted by WorkerControl here, and refused by every other worker handler by CheckWorker).
// kPermissionDenied "admin only" (Admin), "workers may not call the Coordinator service",
// "only workers call the WorkerControl service" otherwise.
absl::Status CheckService(const Identity& caller, Service service);

// True when `caller` may see and act on `job`: an admin always, a user when the job is its
// tenant's. Workers and the join token never (they use WorkerControl).
bool CanAccessJob(const Identity& caller, const v1::Job& job);
// OK or kPermissionDenied "job job-3 belongs to another tenant".
absl::Status CheckJobAccess(const Identity& caller, const v1::Job& job);

// OK when `caller` is the worker credential of `worker_id`; kPermissionDenied "only workers
// call the WorkerControl service" for another role, "the credential of worker w-1 may not act
// for worker w-2" for another worker.
absl::Status CheckWorker(const Identity& caller, absl::string_view worker_id);

// The checkpoint folder of `caller`'s tenant under `root` (contract 9): <root>/<tenant>, or
// <root>/_admin for jobs of admins (tenant ""). A job's checkpoints go to
// <this>/<job id>/step-<N>/.
std::string TenantCheckpointDir(const std::string& root, const std::string& tenant);

}  // namespace dapple::coordinator::auth

#endif  // DAPPLE_COORDINATOR_AUTH_ACCESS_H_

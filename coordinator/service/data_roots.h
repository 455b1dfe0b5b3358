// The folders whose files a job may name (docs/security.md, "Files a job may read"). A job
// spec names files that the coordinator reads at submit and the workers read while the job
// runs: data.path (a dataset's folder or text file) and parallel.emulation.profile. On a shared
// cluster those names come from any tenant's user, so without a bound a user could name the
// coordinator's own tokens or database, or another tenant's checkpoints, and read them back
// through an error message, a sample of generated text or a trained model. Every such path is
// therefore checked against the data roots (coordinator flag --data-root) before any file is
// opened, stat-ed or read.
//
// The rule:
//   1. the path is absolute;
//   2. lexically (".." and "." resolved without touching the file system) it lies inside one of
//      the roots: otherwise it is refused with a message that depends on the path and the
//      roots only, never on the file system, so a refusal tells nothing about files outside;
//   3. if the path exists, its real path (symbolic links followed) lies inside one of the
//      roots' real paths, so a link inside a root cannot lead out of it.
// A path that passes may still be missing: its reader then says so, which tells only about
// files inside the roots. The roots must be writable by admins alone (a user who can create a
// link inside a root between this check and the read could lead the read elsewhere).
#ifndef DAPPLE_COORDINATOR_SERVICE_DATA_ROOTS_H_
#define DAPPLE_COORDINATOR_SERVICE_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/service/emulation.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// Where scripts/setup and the worker image put the datasets: Fashion-MNIST under
// /usr/share/datasets, the text corpus under /var/lib/dapple/datasets (the Helm chart's dataset
// volume).
std::vector<std::string> DefaultDataRoots();

class DataRoots {
 public:
  // `roots` as configured: each absolute and not "/" (kInvalidArgument naming --data-root, the
  // value and the rule). A missing root is allowed (a node whose dataset volume comes later).
  // Pure. An empty list refuses every path. Checks resolve the roots' real paths each time.
  static absl::StatusOr<DataRoots> Create(const std::vector<std::string>& roots);

  // OK when `path` may be read by a job (the rule above). kInvalidArgument, one line, naming
  // `field` (e.g. "data.path"), for a relative path ("data.path 'd/kjv.txt' must be an absolute
  // path ...") or one outside the roots ("data.path /etc/passwd is outside the coordinator's data
  // roots (/usr/share/datasets, /var/lib/dapple/datasets): a job may read files under them only;
  // put the file there or ask an admin to add its folder with --data-root"). The message is the
  // same for a path outside the roots whether or not it exists. Thread-safe (const).
  absl::Status Check(absl::string_view field, const std::string& path) const;

  // Whether `path` (absolute) lies inside a root, lexically: for the coordinator's own files at
  // start (its database, tokens and checkpoints must not be readable as data). Pure.
  bool Contains(const std::string& path) const;

  // The roots as configured, lexically normal (for messages and logs).
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  // The real paths of the roots that exist now.
  std::vector<std::string> RealRoots() const;

  std::vector<std::string> roots_;  // lexically normal, no trailing '/'
};

// The coordinator's own files (its database, tokens, checkpoint root), each as a flag and the
// path it names, relative to the working folder or absolute: kInvalidArgument for the first one
// inside a root ("--data-root /var/lib/dapple contains --db /var/lib/dapple/dapple.db: jobs
// could read the coordinator's database, tokens or other tenants' checkpoints as their data;
// give --data-root the folders that hold datasets only"). Checked once at start.
struct OwnFile {
  std::string flag;
  std::string path;
};
absl::Status CheckOwnFilesOutside(const DataRoots& roots, const std::vector<OwnFile>& files);

// Checks every file `spec` names (data.path; parallel.emulation.profile of an emulated job)
// with `roots.Check`; the first refusal, kInvalidArgument. With `text` (the spec's submitted
// YAML) the message starts with that field's location, as ParseJobSpec's do ("job.yaml:6:29:
// data.path ..."). Reads nothing but the paths' real paths. Thread-safe.
absl::Status CheckJobFiles(const v1::JobSpec& spec, const DataRoots& roots,
                           const SpecText* text = nullptr);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_DATA_ROOTS_H_

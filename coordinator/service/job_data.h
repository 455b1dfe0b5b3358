// The coordinator's part of a job's data (design.md, "Data and evaluation"): every worker reads
// the dataset itself from data.path, which exists on every node (in Kubernetes a volume), so
// the coordinator reads the same file when the job is submitted or planned: a missing or bad
// file is a clear error before anything runs, and the counts the step arithmetic needs
// (common/steps.h TrainSamples) are known from then on. Workers check at start that their copy
// has the size resolved here (data.file_bytes; worker/data/dataset.h CheckSubmittedData).
#ifndef DAPPLE_COORDINATOR_SERVICE_JOB_DATA_H_
#define DAPPLE_COORDINATOR_SERVICE_JOB_DATA_H_

#include "absl/status/status.h"
#include "coordinator/service/data_roots.h"
#include "coordinator/service/emulation.h"
#include "dapple/v1/job.pb.h"

namespace dapple::coordinator {

// Resolves `spec`'s data section. First every file the spec names is checked against `roots`
// (CheckJobFiles: data.path, parallel.emulation.profile; refused before any file is read, at
// the field's location with `text`: "job.yaml:9:9: data.path /etc/passwd is outside the
// coordinator's data roots (...)"). Then (common/text_data.h ResolveTextData): for data.dataset
// text, reads data.path and sets data.train_samples, data.eval_samples and data.file_bytes, then
// validates the spec again, since rules such as training.global_batch <= data.train_samples
// need the counts. Other datasets are left as the parser filled them. Errors are
// kInvalidArgument (whatever the reader's code: the user's file or spec is the input to fix),
// one line; with `text` (the spec's submitted YAML) located like ParseJobSpec's: a file error at
// data.path ("job.yaml:9:9: data.path /d/kjv.txt does not exist (scripts/setup writes ...)"),
// a violated rule at its field ("job.yaml:14:17: training.global_batch 4096 must be <= 1678,
// the number of training samples of data.path /d/kjv.txt with data.seq_len 128"). Reads the
// whole file (up to common/text_data.h kMaxTextFileBytes): call it outside locks. Thread-safe.
absl::Status ResolveJobData(v1::JobSpec* spec, const DataRoots& roots,
                            const SpecText* text = nullptr);

}  // namespace dapple::coordinator

#endif  // DAPPLE_COORDINATOR_SERVICE_JOB_DATA_H_

#include "coordinator/service/job_data.h"

#include "absl/strings/string_view.h"
#include "common/fashion_mnist_files.h"
#include "common/job_spec.h"
#include "common/job_spec_internal.h"
#include "common/text_data.h"

namespace dapple::coordinator {

absl::Status ResolveJobData(v1::JobSpec* spec, const DataRoots& roots, const SpecText* text) {
  // Before anything reads a file the spec names (data_roots.h): a refused path is answered
  // from the spec and the roots alone.
  if (absl::Status s = CheckJobFiles(*spec, roots, text); !s.ok()) return s;
  if (spec->data().dataset() == job_spec_internal::kFashionMnist) {
    // The workers read the files; a folder without them is refused here rather than failing
    // the job once it holds its workers.
    absl::Status s = CheckFashionMnistFolder(spec->data().path());
    if (s.ok() || text == nullptr) return s;
    return JobSpecFieldError(text->yaml, text->source, "data.path", s.message());
  }
  if (spec->data().dataset() != kTextDataset) return absl::OkStatus();
  // As for the emulation profile: the file is judged after the spec parsed, and its refusal
  // points at the line that names it.
  if (absl::Status s = ResolveTextData(spec->mutable_data()); !s.ok()) {
    if (text == nullptr) return absl::InvalidArgumentError(s.message());
    return JobSpecFieldError(text->yaml, text->source, "data.path", s.message());
  }
  if (text == nullptr) return ValidateJobSpec(*spec);
  return ValidateJobSpecAt(*spec, text->yaml, text->source);
}

}  // namespace dapple::coordinator

#include "common/schedule/action.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dapple::schedule {
namespace {

struct KindCode {
  v1::ActionKind kind;
  absl::string_view code;
  bool has_micro_batch;
  absl::string_view words;   // DescribeAction's, for messages users read
  bool has_version = false;  // "@<weight_version>" follows the code
};

// The one table both directions read, so printing and parsing cannot drift apart.
constexpr KindCode kKindCodes[] = {
    {v1::FORWARD, "F", true, "the forward of micro-batch"},
    {v1::BACKWARD, "B", true, "the backward of micro-batch"},
    {v1::SEND_ACT, "SEND_ACT", true, "sending the activations of micro-batch"},
    {v1::RECV_ACT, "RECV_ACT", true, "receiving the activations of micro-batch"},
    {v1::SEND_GRAD, "SEND_GRAD", true, "sending the gradients of micro-batch"},
    {v1::RECV_GRAD, "RECV_GRAD", true, "receiving the gradients of micro-batch"},
    {v1::ALLREDUCE, "ALLREDUCE", false, "the gradient AllReduce over the stage's replicas"},
    {v1::OPTIMIZER_STEP, "STEP", false, "the optimizer step"},
    {v1::TIED_ALLREDUCE, "TIED_ALLREDUCE", false, "the tied weights' gradient sum"},
    {v1::GLOBAL_NORM, "GLOBAL_NORM", false,
     "the step's job-wide check of the gradients (non-finite values; the norm for clipping)"},
    {v1::BACKWARD_INPUT, "BI", true, "the input-gradient backward of micro-batch"},
    {v1::BACKWARD_WEIGHT, "BW", true, "the weight-gradient backward of micro-batch"},
    {v1::USE_WEIGHTS, "USE_WEIGHTS", false, "swapping in the stashed weight version", true},
    {v1::RESTORE_WEIGHTS, "RESTORE_WEIGHTS", false, "restoring the live weights"},
    {v1::STASH_WEIGHTS, "STASH_WEIGHTS", false, "stashing the live weights before the update"},
    {v1::DROP_WEIGHTS, "DROP_WEIGHTS", false, "dropping the stashed weights older than version",
     true},
    {v1::ALLREDUCE_ASYNC, "ALLREDUCE_ASYNC", false,
     "starting the asynchronous gradient AllReduce over the stage's replicas"},
    {v1::STALE_OPTIMIZER_STEP, "STALE_STEP", false,
     "the optimizer step with the previous step's reduced gradient"},
    {v1::GLOBAL_NORM_ASYNC, "GLOBAL_NORM_ASYNC", false,
     "the step's job-wide non-finite check, awaited later (the decision of the step before)"},
};

const KindCode* FindByKind(v1::ActionKind kind) {
  for (const KindCode& k : kKindCodes) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

const KindCode* FindByCode(absl::string_view code) {
  for (const KindCode& k : kKindCodes) {
    if (k.code == code) return &k;
  }
  return nullptr;
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status BadText(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("action \"", text, "\": ", why,
                   " (expected <stage><code><micro_batch>, e.g. 1F3, 2SEND_ACT0, 0STEP)"));
}

}  // namespace

v1::Action MakeAction(int stage, v1::ActionKind kind, int micro_batch) {
  v1::Action a;
  a.set_stage(stage);
  a.set_kind(kind);
  a.set_micro_batch(micro_batch);
  return a;
}

bool KindHasMicroBatch(v1::ActionKind kind) {
  const KindCode* k = FindByKind(kind);
  return k != nullptr && k->has_micro_batch;
}

std::string ActionToString(const v1::Action& a) {
  const KindCode* k = FindByKind(a.kind());
  if (k == nullptr) {
    return absl::StrCat(a.stage(), "UNKNOWN(", static_cast<int>(a.kind()), ")", a.micro_batch());
  }
  if (k->has_version) return absl::StrCat(a.stage(), k->code, "@", a.weight_version());
  if (!k->has_micro_batch) return absl::StrCat(a.stage(), k->code);
  return absl::StrCat(a.stage(), k->code, a.micro_batch());
}

std::string DescribeAction(const v1::Action& a) {
  const KindCode* k = FindByKind(a.kind());
  if (k == nullptr) return absl::StrCat("action ", ActionToString(a));
  if (k->has_version) return absl::StrCat(k->words, " step + (", a.weight_version(), ")");
  if (!k->has_micro_batch) return std::string(k->words);
  return absl::StrCat(k->words, " ", a.micro_batch());
}

bool KindIsWait(v1::ActionKind kind) {
  return kind == v1::RECV_ACT || kind == v1::RECV_GRAD || kind == v1::GLOBAL_NORM;
}

absl::StatusOr<v1::Action> ParseAction(absl::string_view text) {
  size_t i = 0;
  while (i < text.size() && IsDigit(text[i])) ++i;
  if (i == 0) return BadText(text, "no stage number");
  int stage = 0;
  if (!absl::SimpleAtoi(text.substr(0, i), &stage)) return BadText(text, "stage out of range");

  const size_t code_begin = i;
  while (i < text.size() && ((text[i] >= 'A' && text[i] <= 'Z') || text[i] == '_')) {
    ++i;
  }
  const absl::string_view code = text.substr(code_begin, i - code_begin);
  const KindCode* k = FindByCode(code);
  if (k == nullptr) {
    return BadText(text,
                   absl::StrCat("unknown code \"", code,
                                "\" (known: F, B, BI, BW, SEND_ACT, RECV_ACT, SEND_GRAD, "
                                "RECV_GRAD, ALLREDUCE, TIED_ALLREDUCE, GLOBAL_NORM, STEP, "
                                "USE_WEIGHTS, RESTORE_WEIGHTS, STASH_WEIGHTS, "
                                "DROP_WEIGHTS, ALLREDUCE_ASYNC, STALE_STEP, GLOBAL_NORM_ASYNC)"));
  }

  const absl::string_view rest = text.substr(i);
  if (k->has_version) {
    // "@<version>", the version relative to the step, usually negative.
    int version = 0;
    if (rest.size() < 2 || rest[0] != '@' || !absl::SimpleAtoi(rest.substr(1), &version) ||
        rest[1] == '+') {
      return BadText(text, absl::StrCat("expected @<weight version> after ", code));
    }
    v1::Action a = MakeAction(stage, k->kind, -1);
    a.set_weight_version(version);
    return a;
  }
  if (!k->has_micro_batch) {
    if (!rest.empty()) {
      return BadText(text, absl::StrCat("unexpected \"", rest, "\" after ", code,
                                        " (it takes no micro-batch)"));
    }
    return MakeAction(stage, k->kind, -1);
  }
  if (rest.empty()) return BadText(text, absl::StrCat("missing micro-batch after ", code));
  for (char c : rest) {
    if (!IsDigit(c)) return BadText(text, absl::StrCat("bad micro-batch \"", rest, "\""));
  }
  int micro_batch = 0;
  if (!absl::SimpleAtoi(rest, &micro_batch)) return BadText(text, "micro-batch out of range");
  return MakeAction(stage, k->kind, micro_batch);
}

std::string ActionsToString(const std::vector<v1::Action>& actions) {
  return absl::StrJoin(
      actions, " ", [](std::string* out, const v1::Action& a) { out->append(ActionToString(a)); });
}

std::string ProgramToString(const v1::RankProgram& program) {
  std::string out = absl::StrCat("stage ", program.stage(), " replica ", program.replica(), ":");
  for (const v1::Action& a : program.actions()) absl::StrAppend(&out, " ", ActionToString(a));
  return out;
}

}  // namespace dapple::schedule

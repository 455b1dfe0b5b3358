#include "worker/runtime/gradient_exchange.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grad_clip.h"
#include "common/non_finite.h"
#include "common/schedule/ranks.h"
#include "common/status.h"
#include "worker/runtime/step_statistics.h"

namespace dapple::worker {
namespace {

static_assert(sizeof(NormRecord) == 16, "NormRecord travels as 16 bytes");

// Checks that `c` is member `rank` of `size`; `what` names the group in the message.
absl::Status CheckMember(const Collective* c, int size, int rank, int stage, int replica,
                         const char* what) {
  if (c->size() == size && c->rank() == rank) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "stage %d replica %d is member %d of %d of %s but was given a collective of member %d of %d",
      stage, replica, rank, size, what, c->rank(), c->size()));
}

// The order of FirstNonFinite: lower keys first.
std::tuple<int64_t, int, int> OrderKey(const NormRecord& r, int stage, int replica) {
  const int64_t mb = r.micro_batch >= 0 ? r.micro_batch : std::numeric_limits<int32_t>::max();
  return {mb, -stage, replica};
}

}  // namespace

std::string DescribeNonFinite(const NonFinite& where) {
  const char* kind = where.kind == NonFiniteKind::kLoss ? "loss" : "gradient";
  return absl::StrFormat(
      "%s (%s) at stage %d replica %d %s", kind, where.nan ? "NaN" : "Inf", where.stage,
      where.replica,
      where.micro_batch >= 0
          ? absl::StrFormat("micro-batch %d", where.micro_batch)
          : std::string("(micro-batch not tracked: the step's accumulated gradient)"));
}

NonFinite FirstNonFinite(const std::vector<NormRecord>& records,
                         const std::vector<std::pair<int, int>>& places) {
  NonFinite first;
  int best = -1;
  for (size_t i = 0; i < records.size() && i < places.size(); ++i) {
    const NormRecord& r = records[i];
    if (r.kind == static_cast<uint8_t>(NonFiniteKind::kNone)) continue;
    if (best >= 0 && !(OrderKey(r, places[i].first, places[i].second) <
                       OrderKey(records[best], places[best].first, places[best].second))) {
      continue;
    }
    best = static_cast<int>(i);
  }
  if (best < 0) return first;
  const NormRecord& r = records[best];
  first.kind = static_cast<NonFiniteKind>(r.kind);
  first.nan = r.nan != 0;
  first.stage = places[best].first;
  first.replica = places[best].second;
  first.micro_batch = r.micro_batch;
  return first;
}

absl::StatusOr<std::unique_ptr<GradientExchange>> GradientExchange::Create(
    const v1::StageAssignment& assignment, const schedule::LowerOptions& lower,
    const std::vector<schedule::TiedWeight>& split_tied, StageBackend* backend,
    const StageCollectives& collectives) {
  const v1::ParallelPlanSummary& plan = assignment.plan();
  const int stage = assignment.stage();
  const int replica = assignment.replica();
  const int d = schedule::StageReplicas(plan, stage);
  auto ex = std::unique_ptr<GradientExchange>(new GradientExchange());
  ex->backend_ = backend;
  ex->num_replicas_ = d;
  ex->counts_norm_ = replica == 0;
  ex->clipping_ = lower.global_norm;
  ex->max_grad_norm_ = assignment.spec().training().max_grad_norm();
  ex->max_consecutive_skips_ = assignment.spec().training().max_consecutive_skipped_steps();
  ex->stage_ = stage;
  ex->replica_ = replica;
  ex->one_place_ = {{stage, replica}};
  ex->places_.resize(static_cast<size_t>(schedule::NumRanks(plan)));
  for (int s = 0; s < plan.stages_size(); ++s) {
    for (int r = 0; r < schedule::StageReplicas(plan, s); ++r) {
      const int rank = schedule::RankIndex(plan, s, r);
      if (rank >= 0 && rank < static_cast<int>(ex->places_.size())) ex->places_[rank] = {s, r};
    }
  }

  if (d > 1 && collectives.replicas == nullptr) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d has %d replicas but no collective was given for their gradient AllReduce", stage,
        d));
  }
  if (collectives.replicas != nullptr &&
      (collectives.replicas->size() != d || collectives.replicas->rank() != replica)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stage %d replica %d of %d was given a collective of member %d of %d", stage, replica, d,
        collectives.replicas->rank(), collectives.replicas->size()));
  }
  ex->collectives_.replicas = d > 1 ? collectives.replicas : nullptr;

  const bool tied = stage < static_cast<int>(lower.tied_stages.size()) && lower.tied_stages[stage];
  if (tied) {
    const std::vector<int> group = schedule::TiedGroupRanks(lower.tied_stages, plan);
    const int me = schedule::RankIndex(plan, stage, replica);
    const int index = static_cast<int>(std::find(group.begin(), group.end(), me) - group.begin());
    if (collectives.tied == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "stage %d holds a tied weight whose other copy is on another stage, but no collective "
          "was given for the tied weights' AllReduce (%d ranks)",
          stage, group.size()));
    }
    DAPPLE_RETURN_IF_ERROR(CheckMember(collectives.tied, static_cast<int>(group.size()), index,
                                       stage, replica, "the tied weights' group"));
    ex->collectives_.tied = collectives.tied;
  }
  const int ranks = schedule::NumRanks(plan);
  if (lower.global_norm && ranks > 1) {
    if (collectives.job == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GLOBAL_NORM (the step's non-finite check and clipping norm) is taken over all %d "
          "ranks of the job, but stage %d replica %d was given no job-wide collective for it",
          ranks, stage, replica));
    }
    DAPPLE_RETURN_IF_ERROR(CheckMember(collectives.job, ranks,
                                       schedule::RankIndex(plan, stage, replica), stage, replica,
                                       "the job"));
    ex->collectives_.job = collectives.job;
  }

  // The buffer layouts: one slot per distinct owner of a split tied weight (its copies on other
  // stages share it), in the same order on every member of the group.
  DAPPLE_ASSIGN_OR_RETURN(std::vector<kernels::Param*> params, backend->HostParams());
  std::vector<bool> is_tied(params.size(), false);
  if (tied) {
    std::vector<std::string> owners;
    for (const schedule::TiedWeight& w : split_tied) {
      if (std::find(owners.begin(), owners.end(), w.owner) != owners.end()) continue;
      owners.push_back(w.owner);
      int64_t size = 1;
      for (int64_t dim : w.shape) size *= dim;
      int position = -1;
      for (size_t i = 0; i < params.size(); ++i) {
        const kernels::Param& p = *params[i];
        const bool holds = p.tied_to.empty() ? p.name == w.owner : p.tied_to == w.owner;
        if (!holds) continue;
        if (position >= 0) {
          return absl::InvalidArgumentError(absl::StrFormat(
              "stage %d holds %s twice (%s and %s): a stage may hold one copy of a tied weight",
              stage, w.owner, params[position]->name, p.name));
        }
        position = static_cast<int>(i);
        is_tied[i] = true;
      }
      ex->tied_positions_.push_back(position);
      ex->tied_sizes_.push_back(size);
      ex->tied_floats_ += size;
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (is_tied[i]) continue;
    ex->replica_positions_.push_back(static_cast<int>(i));
    ex->replica_floats_ += params[i]->value.numel();
  }
  ex->statistics_.resize(static_cast<size_t>(backend->StepStatisticsSize()));
  return ex;
}

// Before the gradients, on the same collective: the statistics are doubles (SumOverReplicas
// says why they do not ride in the fp32 AllReduce). One replica applies its own.
absl::Status GradientExchange::ApplyStepStatistics() {
  statistics_done_ = true;
  if (statistics_.empty()) return absl::OkStatus();
  DAPPLE_RETURN_IF_ERROR(backend_->ReadStepStatistics(statistics_.data()));
  if (collectives_.replicas != nullptr) {
    DAPPLE_RETURN_IF_ERROR(SumOverReplicas(*collectives_.replicas, &statistics_, &gathered_));
  }
  return backend_->ApplyStepStatistics(statistics_.data());
}

absl::Status GradientExchange::AllReduceTied() {
  if (tied_done_ || norm_done_) {
    return absl::InternalError("TIED_ALLREDUCE twice before an update, or after GLOBAL_NORM");
  }
  tied_done_ = true;
  if (collectives_.tied == nullptr) return absl::OkStatus();
  // A member without some owner's tensor contributes zeros for it.
  buffer_.assign(static_cast<size_t>(tied_floats_), 0.0f);
  int64_t offset = 0;
  for (size_t k = 0; k < tied_positions_.size(); ++k) {
    if (tied_positions_[k] >= 0) {
      DAPPLE_RETURN_IF_ERROR(backend_->ReadGradientsOf({tied_positions_[k]}, &buffer_[offset]));
    }
    offset += tied_sizes_[k];
  }
  ScanGradients(static_cast<int64_t>(buffer_.size()));  // this rank's own, before the sum
  DAPPLE_RETURN_IF_ERROR(collectives_.tied->AllReduceSum(buffer_.data(), buffer_.size()));
  offset = 0;
  for (size_t k = 0; k < tied_positions_.size(); ++k) {
    if (tied_positions_[k] >= 0) {
      DAPPLE_RETURN_IF_ERROR(backend_->WriteGradientsOf({tied_positions_[k]}, &buffer_[offset]));
    }
    offset += tied_sizes_[k];
  }
  return absl::OkStatus();
}

absl::Status GradientExchange::StartReplicas() {
  if (replicas_done_ || norm_done_) {
    return absl::InternalError(
        "a second ALLREDUCE in one step (one per OPTIMIZER_STEP), or one after GLOBAL_NORM");
  }
  replicas_done_ = true;
  return absl::OkStatus();
}

absl::Status GradientExchange::ReplicasReducedElsewhere() {
  DAPPLE_RETURN_IF_ERROR(StartReplicas());
  statistics_done_ = true;  // the updater sums and applies them with the gradients
  return absl::OkStatus();
}

// One AllReduce per step carries every gradient and, on the last stage, the replica's loss sum
// (as one more float), so the replicas step with identical gradients and report the same global
// loss; only a stage with step statistics makes a second call, their AllGather, before it.
absl::Status GradientExchange::AllReduceReplicas(double* loss_sum) {
  DAPPLE_RETURN_IF_ERROR(StartReplicas());
  DAPPLE_RETURN_IF_ERROR(ApplyStepStatistics());
  if (num_replicas_ == 1) return absl::OkStatus();  // nothing to sum
  const int64_t grads = replica_floats_;
  buffer_.resize(static_cast<size_t>(grads + (loss_sum != nullptr ? 1 : 0)));
  if (grads > 0)
    DAPPLE_RETURN_IF_ERROR(backend_->ReadGradientsOf(replica_positions_, buffer_.data()));
  ScanGradients(grads);  // this replica's own, before the sum
  if (loss_sum != nullptr) buffer_[grads] = static_cast<float>(*loss_sum);
  if (!buffer_.empty()) {
    DAPPLE_RETURN_IF_ERROR(collectives_.replicas->AllReduceSum(buffer_.data(), buffer_.size()));
  }
  if (grads > 0) {
    DAPPLE_RETURN_IF_ERROR(backend_->WriteGradientsOf(replica_positions_, buffer_.data()));
  }
  if (loss_sum != nullptr) *loss_sum = buffer_[grads];
  return absl::OkStatus();
}

void GradientExchange::ScanGradients(int64_t floats) {
  if (!AnyNonFinite(buffer_.data(), floats)) return;  // the common case, at memory speed
  bool nan = false, inf = false;
  for (int64_t i = 0; i < floats; ++i) {
    const float v = buffer_[static_cast<size_t>(i)];
    nan |= std::isnan(v);
    inf |= std::isinf(v);
  }
  if (!nan && !inf) return;
  if (found_.kind == static_cast<uint8_t>(NonFiniteKind::kNone)) {
    found_.kind = static_cast<uint8_t>(NonFiniteKind::kGradient);
    found_.micro_batch = -1;
  }
  if (found_.kind == static_cast<uint8_t>(NonFiniteKind::kGradient)) found_.nan |= nan;
}

void GradientExchange::NoteLoss(int micro_batch, double loss_sum) {
  if (std::isfinite(loss_sum) || found_.kind == static_cast<uint8_t>(NonFiniteKind::kLoss)) return;
  found_.kind = static_cast<uint8_t>(NonFiniteKind::kLoss);
  found_.micro_batch = micro_batch;
  found_.nan = std::isnan(loss_sum);
}

// The norm of the update's final gradients: after the replicas' and the tied weights' sums.
absl::StatusOr<NormRecord> GradientExchange::MeasureRecord() {
  if (norm_done_) return absl::InternalError("a second GLOBAL_NORM before an update");
  if ((num_replicas_ > 1 && !replicas_done_) || (tied_floats_ > 0 && !tied_done_)) {
    return absl::InternalError("GLOBAL_NORM before this step's ALLREDUCE or TIED_ALLREDUCE");
  }
  norm_done_ = true;
  const auto started = std::chrono::steady_clock::now();
  DAPPLE_ASSIGN_OR_RETURN(local_sq_norm_, backend_->GradientSquaredNorm());
  norm_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                  started)
                 .count();
  NormRecord mine;
  // Negative: not measured (counted as 0). A NaN stays NaN, as in PyTorch's total norm.
  mine.sq_norm = counts_norm_ && !(local_sq_norm_ < 0) ? local_sq_norm_ : 0.0;
  // Unreplicated, the norm is of this rank's own gradient (no sum mixed others' in but the
  // tied weights', which their own stages scanned): non-finite exactly when an element is.
  if (num_replicas_ == 1 && !std::isfinite(local_sq_norm_) &&
      found_.kind == static_cast<uint8_t>(NonFiniteKind::kNone)) {
    found_.kind = static_cast<uint8_t>(NonFiniteKind::kGradient);
    found_.micro_batch = -1;
    found_.nan = std::isnan(local_sq_norm_);
  }
  mine.kind = found_.kind;
  mine.micro_batch = found_.micro_batch;
  mine.nan = found_.nan;
  return mine;
}

int64_t GradientExchange::TakeNormNanos() { return std::exchange(norm_ns_, 0); }

const std::vector<std::pair<int, int>>& GradientExchange::Places() const {
  return collectives_.job == nullptr ? one_place_ : places_;
}

namespace {

// The failure of a non-finite step under training.max_consecutive_skipped_steps 0.
std::string DivergedAtZero(const std::string& at, const NonFinite& first) {
  return absl::StrFormat(
      "training diverged%s: non-finite %s; training.max_consecutive_skipped_steps is 0: a "
      "non-finite step fails the job (try a lower training.optimizer.lr, or set "
      "max_consecutive_skipped_steps > 0 to skip such steps)",
      at, DescribeNonFinite(first));
}

}  // namespace

absl::StatusOr<GlobalNormResult> GradientExchange::GlobalNorm() {
  DAPPLE_ASSIGN_OR_RETURN(const NormRecord mine, MeasureRecord());
  GlobalNormResult result;
  if (collectives_.job == nullptr) {
    records_.assign(1, mine);
    result.total_sq_norm = mine.sq_norm;
  } else {
    records_.resize(static_cast<size_t>(collectives_.job->size()));
    DAPPLE_RETURN_IF_ERROR(collectives_.job->AllGather(&mine, sizeof(NormRecord), records_.data()));
    // Rank order, in double, on every rank: bitwise the same total everywhere.
    for (const NormRecord& r : records_) result.total_sq_norm += r.sq_norm;
  }
  // The same records on every rank: the same decision, the same streak, the same message.
  result.first = FirstNonFinite(records_, Places());
  result.skip = result.first.kind != NonFiniteKind::kNone;
  if (result.skip) {
    ++consecutive_skips_;
    if (consecutive_skips_ > max_consecutive_skips_) {
      return absl::FailedPreconditionError(
          max_consecutive_skips_ == 0
              ? DivergedAtZero("", result.first)
              : absl::StrFormat("training diverged: non-finite %s; %d non-finite steps in a "
                                "row, training.max_consecutive_skipped_steps allows %d (try a "
                                "lower training.optimizer.lr)",
                                DescribeNonFinite(result.first), consecutive_skips_,
                                max_consecutive_skips_));
    }
    ++skipped_updates_;
  } else {
    consecutive_skips_ = 0;
  }
  skip_ = result.skip;
  clip_ = result.skip ? 1 : ClipCoefficient(max_grad_norm_, result.total_sq_norm);
  return result;
}

absl::Status GradientExchange::PostGlobalNorm(int64_t step, bool await_now) {
  if (!schedule::NonFiniteCheckOnlyFails(max_grad_norm_, max_consecutive_skips_)) {
    return absl::InternalError(
        "GLOBAL_NORM_ASYNC in a job whose decision may change the update (gradient clipping "
        "or skipped steps): its program needs GLOBAL_NORM");
  }
  // One AllGather at a time on the job collective (collective.h), in step order on every rank.
  DAPPLE_RETURN_IF_ERROR(AwaitGlobalNorm());
  DAPPLE_ASSIGN_OR_RETURN(const NormRecord mine, MeasureRecord());
  deferred_pending_ = true;
  deferred_step_ = step;
  if (collectives_.job == nullptr) {
    deferred_records_.assign(1, mine);
  } else {
    deferred_records_.resize(static_cast<size_t>(collectives_.job->size()));
    Collective* job = collectives_.job;
    NormRecord* out = deferred_records_.data();
    deferred_gather_ = std::async(std::launch::async, [job, mine, out] {
      return job->AllGather(&mine, sizeof(NormRecord), out);
    });
  }
  // Weights made of a non-finite gradient are never used: wait for the decision, which then
  // fails the job, before the update makes them.
  const bool non_finite = mine.kind != static_cast<uint8_t>(NonFiniteKind::kNone) ||
                          (!(local_sq_norm_ < 0) && !std::isfinite(local_sq_norm_));
  if (await_now || non_finite) return AwaitGlobalNorm();
  return absl::OkStatus();
}

absl::Status GradientExchange::AwaitGlobalNorm() {
  if (!deferred_pending_) return absl::OkStatus();
  deferred_pending_ = false;
  if (deferred_gather_.valid()) DAPPLE_RETURN_IF_ERROR(deferred_gather_.get());
  const NonFinite first = FirstNonFinite(deferred_records_, Places());
  if (first.kind == NonFiniteKind::kNone) return absl::OkStatus();
  ++consecutive_skips_;
  return absl::FailedPreconditionError(
      DivergedAtZero(absl::StrCat(" at step ", deferred_step_ + 1), first));
}

absl::StatusOr<UpdateDecision> GradientExchange::PrepareUpdate() {
  if (num_replicas_ > 1 && !replicas_done_) {
    return absl::InternalError(absl::StrFormat(
        "OPTIMIZER_STEP of a stage with %d replicas before their ALLREDUCE", num_replicas_));
  }
  if (tied_floats_ > 0 && !tied_done_) {
    return absl::InternalError("OPTIMIZER_STEP of a tied stage before its TIED_ALLREDUCE");
  }
  if (clipping_ && !norm_done_) {
    return absl::InternalError(
        "OPTIMIZER_STEP before its GLOBAL_NORM (the non-finite decision and clipping's norm)");
  }
  // One replica without an ALLREDUCE action applies its statistics here (D > 1 applied them at
  // the ALLREDUCE checked above).
  if (!statistics_done_) DAPPLE_RETURN_IF_ERROR(ApplyStepStatistics());
  double sq_norm = local_sq_norm_;
  if (!norm_done_) {
    DAPPLE_ASSIGN_OR_RETURN(sq_norm, backend_->GradientSquaredNorm());
  }
  // torch.nn.utils.clip_grad_norm_ scales before the update (1: nothing to do).
  if (clip_ < 1) DAPPLE_RETURN_IF_ERROR(backend_->ScaleGradients(static_cast<float>(clip_)));
  UpdateDecision decision;
  decision.sq_norm = sq_norm;
  decision.skip = skip_;
  tied_done_ = replicas_done_ = norm_done_ = statistics_done_ = skip_ = false;
  local_sq_norm_ = -1;
  clip_ = 1;
  found_ = NormRecord();
  return decision;
}

}  // namespace dapple::worker

#include "coordinator/cluster/profile_cache.h"

#include "common/profile/model_profile.h"
#include "gtest/gtest.h"

namespace dapple::coordinator {
namespace {

v1::JobSpec Spec(int64_t width) {
  v1::JobSpec spec;
  spec.mutable_model()->add_input_shape(8);
  v1::LayerSpec* l = spec.mutable_model()->add_layers();
  l->set_type("linear");
  l->mutable_linear()->set_out(width);
  return spec;
}

v1::ReportProfileRequest Answer(const v1::ProfileRequest& req, const std::string& worker) {
  v1::ReportProfileRequest r;
  r.set_worker_id(worker);
  r.set_request_id(req.request_id());
  r.mutable_profile()->set_model_fingerprint(profile::ModelFingerprint(req.spec().model()));
  r.mutable_profile()->set_device_kind(req.device());
  r.mutable_profile()->set_batch_size(req.batch_size());
  r.mutable_profile()->add_layers()->set_name("linear");
  return r;
}

TEST(ProfileCacheTest, RequestIsSentOnceAndItsReportIsCached) {
  ProfileCache cache;
  const ProfileCache::Key key = cache.Request("w-1", Spec(4), "cuda:1", 32, 1000);
  EXPECT_EQ(key.device_kind, "cuda");
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kPending);
  EXPECT_FALSE(cache.TakeFor("w-2").has_value());
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->device(), "cuda:1");
  EXPECT_EQ(req->batch_size(), 32);
  EXPECT_FALSE(cache.TakeFor("w-1").has_value());  // once
  // Asking again while pending does not queue a second measurement.
  cache.Request("w-2", Spec(4), "cuda:0", 32, 1000);
  EXPECT_FALSE(cache.TakeFor("w-2").has_value());

  ASSERT_TRUE(cache.Report(Answer(*req, "w-1")).ok());
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kReady);
  // Any cuda device of the same model and batch hits the same entry.
  std::optional<v1::ModelProfile> p = cache.Lookup(ProfileCache::KeyOf(Spec(4).model(), "cuda:3"));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->layers_size(), 1);
  EXPECT_FALSE(cache.Lookup(ProfileCache::KeyOf(Spec(5).model(), "cuda:0")).has_value());
  EXPECT_FALSE(cache.Lookup(ProfileCache::KeyOf(Spec(4).model(), "cpu")).has_value());
  // Insert replaces (a profile read back at start, or a newer measurement).
  v1::ModelProfile other = *p;
  other.set_batch_size(64);
  cache.Insert(other);
  EXPECT_EQ(cache.Lookup(key)->batch_size(), 64);
  // A second answer to the same request is refused.
  EXPECT_EQ(cache.Report(Answer(*req, "w-1")).code(), absl::StatusCode::kNotFound);
}

TEST(ProfileCacheTest, ReportsFromTheWrongWorkerOrForAnotherModelAreRefused) {
  ProfileCache cache;
  const ProfileCache::Key key = cache.Request("w-1", Spec(4), "cpu", 8, 1000);
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(cache.Report(Answer(*req, "w-9")).code(), absl::StatusCode::kPermissionDenied);
  v1::ReportProfileRequest wrong = Answer(*req, "w-1");
  wrong.mutable_profile()->set_batch_size(9);
  absl::Status s = cache.Report(wrong);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kFailed);
  EXPECT_NE(cache.Error(key).find("batch 9"), std::string::npos) << cache.Error(key);
}

// A busy answer (the worker measures another request) is no failure: the key is asked again,
// and the attempt does not count.
TEST(ProfileCacheTest, ABusyAnswerAsksAgain) {
  ProfileCache cache;
  const ProfileCache::Key key = cache.Request("w-1", Spec(4), "cpu", 8, 1000);
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  v1::ReportProfileRequest busy;
  busy.set_worker_id("w-1");
  busy.set_request_id(req->request_id());
  busy.set_busy_with_request_id("profile-x-1");
  busy.set_error("worker w-1 is measuring another model (request profile-x-1)");
  ASSERT_TRUE(cache.Report(busy).ok());
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kMissing);
  EXPECT_FALSE(cache.HasOutstanding("w-1"));
  EXPECT_EQ(cache.Error(key), "");
  cache.Request("w-2", Spec(4), "cpu", 8, 1000);
  req = cache.TakeFor("w-2");
  ASSERT_TRUE(req.has_value());
  ASSERT_TRUE(cache.Report(Answer(*req, "w-2")).ok());
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kReady);
}

// The answer to a request the cache never made (a previous coordinator's) is adopted for the
// keys jobs wait for, of any tenant, when it holds a profile of their model; a pending request
// of such a key is dropped.
TEST(ProfileCacheTest, AnAnswerToAnotherCoordinatorsRequestIsAdopted) {
  ProfileCache cache;
  const ProfileCache::Key key = cache.Request("w-2", Spec(4), "cpu", 8, 1000);
  const ProfileCache::Key team_a = ProfileCache::KeyOf(Spec(4).model(), "cpu", "team-a");
  const ProfileCache::Key other = ProfileCache::KeyOf(Spec(5).model(), "cpu", "team-a");
  std::optional<v1::ProfileRequest> pending = cache.TakeFor("w-2");
  ASSERT_TRUE(pending.has_value());
  v1::ProfileRequest old = *pending;
  old.set_request_id("profile-old-1");
  v1::ReportProfileRequest answer = Answer(old, "w-1");
  EXPECT_EQ(cache.Report(answer).code(), absl::StatusCode::kNotFound);
  v1::ReportProfileRequest failed = answer;
  failed.clear_profile();
  failed.set_error("out of memory");
  EXPECT_EQ(cache.Adopt(failed, {key}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.Adopt(answer, {other}).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<ProfileCache::Key>> filled = cache.Adopt(answer, {key, team_a, other});
  ASSERT_TRUE(filled.ok()) << filled.status();
  ASSERT_EQ(filled->size(), 2u);
  EXPECT_EQ(cache.StateOf(key), ProfileCache::State::kReady);
  EXPECT_EQ(cache.Lookup(team_a)->model_fingerprint(), team_a.fingerprint);
  EXPECT_EQ(cache.StateOf(other), ProfileCache::State::kMissing);
  EXPECT_FALSE(cache.HasOutstanding("w-2"));
  EXPECT_EQ(cache.Report(Answer(*pending, "w-2")).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cache.Adopt(answer, {key}).status().code(), absl::StatusCode::kNotFound);
}

// A tenant's measurement serves only its own jobs: the same model of another tenant (or of the
// operator) is measured for them on its own (a tenant's plan once showed that another tenant
// had trained the same model).
TEST(ProfileCacheTest, MeasurementsAreKeptPerTenant) {
  ProfileCache cache;
  const ProfileCache::Key a = cache.Request("w-1", Spec(4), "cpu", 8, 1000, "team-a");
  EXPECT_EQ(a.fingerprint, profile::ModelFingerprint(Spec(4).model()) + "@team-a");
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  ASSERT_TRUE(cache.Report(Answer(*req, "w-1")).ok());  // the worker names the model's own
  EXPECT_EQ(cache.StateOf(a), ProfileCache::State::kReady);
  EXPECT_EQ(ProfileCache::KeyOf(*cache.Lookup(a)).Tie(), a.Tie());
  EXPECT_EQ(cache.StateOf(ProfileCache::KeyOf(Spec(4).model(), "cpu", "team-b")),
            ProfileCache::State::kMissing);
  EXPECT_EQ(cache.StateOf(ProfileCache::KeyOf(Spec(4).model(), "cpu")),
            ProfileCache::State::kMissing);
}

TEST(ProfileCacheTest, WorkerErrorsDeathsAndDeadlinesFailTheRequestWhichCanBeAskedAgain) {
  ProfileCache cache;
  const ProfileCache::Key a = cache.Request("w-1", Spec(1), "cpu", 8, 1000);
  const ProfileCache::Key b = cache.Request("w-2", Spec(2), "cpu", 8, 1000);
  const ProfileCache::Key c = cache.Request("w-3", Spec(3), "cpu", 8, 5000);
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  v1::ReportProfileRequest err;
  err.set_worker_id("w-1");
  err.set_request_id(req->request_id());
  err.set_error("cuda:0: out of memory");
  ASSERT_TRUE(cache.Report(err).ok());
  EXPECT_EQ(cache.Error(a), "worker w-1 could not profile the model: cuda:0: out of memory");

  EXPECT_EQ(cache.Expire("w-2", 10), 1);
  EXPECT_EQ(cache.Error(b), "worker w-2 died before reporting the profile");
  EXPECT_EQ(cache.StateOf(c), ProfileCache::State::kPending);
  EXPECT_EQ(cache.Expire("", 5000), 1);
  EXPECT_EQ(cache.Error(c), "worker w-3 did not report the profile before its deadline");
  // Only a measurement lost with its worker is worth asking of another one, once.
  EXPECT_FALSE(cache.WorthAskingAgain(a));
  EXPECT_TRUE(cache.WorthAskingAgain(b));
  EXPECT_FALSE(cache.WorthAskingAgain(c));
  cache.Request("w-5", Spec(2), "cpu", 8, 9000);
  EXPECT_EQ(cache.FailWorker("w-5", "shut down"), 1);
  EXPECT_EQ(cache.Error(b), "worker w-5 shut down before reporting the profile");
  EXPECT_FALSE(cache.WorthAskingAgain(b));  // the second attempt in a row

  // A failed key is asked again, with a new request id.
  cache.Request("w-4", Spec(1), "cpu", 8, 9000);
  EXPECT_EQ(cache.StateOf(a), ProfileCache::State::kPending);
  std::optional<v1::ProfileRequest> again = cache.TakeFor("w-4");
  ASSERT_TRUE(again.has_value());
  EXPECT_NE(again->request_id(), req->request_id());
}

TEST(ProfileCacheTest, AWorkerHasAnOutstandingRequestUntilItAnswersOrFails) {
  ProfileCache cache;
  EXPECT_FALSE(cache.HasOutstanding("w-1"));
  const ProfileCache::Key a = cache.Request("w-1", Spec(1), "cpu", 8, 1000);
  EXPECT_TRUE(cache.HasOutstanding("w-1"));  // pending, not sent yet
  EXPECT_FALSE(cache.HasOutstanding("w-2"));
  std::optional<v1::ProfileRequest> req = cache.TakeFor("w-1");
  ASSERT_TRUE(req.has_value());
  EXPECT_TRUE(cache.HasOutstanding("w-1"));  // sent, unanswered
  ASSERT_TRUE(cache.Report(Answer(*req, "w-1")).ok());
  EXPECT_FALSE(cache.HasOutstanding("w-1"));
  EXPECT_EQ(cache.StateOf(a), ProfileCache::State::kReady);

  // FailWorker fails only that worker's pending requests, at once, saying why.
  const ProfileCache::Key b = cache.Request("w-1", Spec(2), "cpu", 8, 1000);
  const ProfileCache::Key c = cache.Request("w-2", Spec(3), "cpu", 8, 1000);
  EXPECT_EQ(cache.FailWorker("w-1", "shut down"), 1);
  EXPECT_EQ(cache.StateOf(b), ProfileCache::State::kFailed);
  EXPECT_EQ(cache.Error(b), "worker w-1 shut down before reporting the profile");
  EXPECT_FALSE(cache.HasOutstanding("w-1"));
  EXPECT_EQ(cache.StateOf(a), ProfileCache::State::kReady);  // answered ones stay
  EXPECT_EQ(cache.StateOf(c), ProfileCache::State::kPending);
  EXPECT_EQ(cache.FailWorker("w-1", "shut down"), 0);
}

TEST(ProfileCacheTest, JobsRefineTheProfileTheyWerePlannedOnByItsGeneration) {
  ProfileCache cache;
  v1::ModelProfile measured;
  measured.set_model_fingerprint(profile::ModelFingerprint(Spec(4).model()));
  measured.set_device_kind("cpu");
  measured.set_source("measured on cpu by worker w-1");
  measured.add_layers()->set_forward_ms(2.0);
  const ProfileCache::Key key = ProfileCache::KeyOf(Spec(4).model(), "cpu");
  StageMeasurement stage;
  stage.layers.push_back(v1::StageRange());  // layer 0
  stage.predicted_ms = 10;
  stage.measured_ms = 12;
  EXPECT_EQ(cache.Refine(key, 1, {stage}).status().code(), absl::StatusCode::kNotFound);

  EXPECT_EQ(cache.Generation(key), 0);
  cache.Insert(measured);
  int64_t planned = 0;
  ASSERT_TRUE(cache.Lookup(key, &planned).has_value());
  EXPECT_EQ(cache.Generation(key), planned);
  EXPECT_EQ(cache.Lookup(key)->layers(0).forward_ms(), 2.0);
  // Two jobs planned on the same generation: each is relative to the factors they planned on.
  absl::StatusOr<int> taken = cache.Refine(key, planned, {stage});
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 1);
  int64_t refined = 0;
  std::optional<v1::ModelProfile> p = cache.Lookup(key, &refined);
  EXPECT_NE(refined, planned);
  EXPECT_EQ(cache.Generation(key), refined);
  EXPECT_NEAR(p->layers(0).forward_ms(), 2.4, 1e-12);
  EXPECT_EQ(p->source(),
            "measured on cpu by worker w-1; layer times refined by the measured steps of 1 job "
            "(x1.20 to x1.20)");
  ASSERT_TRUE(cache.Refine(key, planned, {stage}).ok());
  EXPECT_NEAR(cache.Lookup(key)->layers(0).forward_ms(), 2.4, 1e-12);
  // A job whose stage was not taken makes no new generation.
  StageMeasurement straggler = stage;
  straggler.measured_ms = 40;
  int64_t before = 0;
  cache.Lookup(key, &before);
  EXPECT_EQ(*cache.Refine(key, before, {straggler}), 0);
  int64_t after = 0;
  cache.Lookup(key, &after);
  EXPECT_EQ(before, after);

  // Old generations are forgotten after kGenerationsKept refinements; a new measurement starts
  // afresh and forgets them all.
  for (int i = 0; i < ProfileCache::kGenerationsKept; ++i) {
    int64_t g = 0;
    cache.Lookup(key, &g);
    ASSERT_TRUE(cache.Refine(key, g, {stage}).ok());
  }
  EXPECT_EQ(cache.Refine(key, planned, {stage}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  int64_t latest = 0;
  cache.Lookup(key, &latest);
  cache.Insert(measured);
  EXPECT_EQ(cache.Refine(key, latest, {stage}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(cache.Lookup(key)->SerializeAsString(), measured.SerializeAsString());
}

TEST(ProfileCacheTest, ASavedProfileRestoresWithItsRefinement) {
  ProfileCache cache;
  v1::ModelProfile measured;
  measured.set_model_fingerprint(profile::ModelFingerprint(Spec(4).model()));
  measured.set_device_kind("cpu");
  measured.add_layers()->set_forward_ms(2.0);
  const ProfileCache::Key key = ProfileCache::KeyOf(Spec(4).model(), "cpu");
  EXPECT_FALSE(cache.Saved(key).has_value());
  cache.Insert(measured);
  StageMeasurement stage;
  stage.layers.push_back(v1::StageRange());
  stage.predicted_ms = 10;
  stage.measured_ms = 15;
  int64_t planned = 0;
  cache.Lookup(key, &planned);
  ASSERT_TRUE(cache.Refine(key, planned, {stage}).ok());
  std::optional<ProfileCache::SavedProfile> saved = cache.Saved(key);
  ASSERT_TRUE(saved.has_value());
  // The profile as measured, and the refinement beside it.
  EXPECT_EQ(saved->profile.SerializeAsString(), measured.SerializeAsString());
  EXPECT_EQ(saved->refinement.jobs(), 1);

  ProfileCache restarted;
  ASSERT_TRUE(restarted.Restore(*saved).ok());
  EXPECT_EQ(restarted.StateOf(key), ProfileCache::State::kReady);
  int64_t generation = 0;
  std::optional<v1::ModelProfile> p = restarted.Lookup(key, &generation);
  EXPECT_NEAR(p->layers(0).forward_ms(), 3.0, 1e-12);
  EXPECT_EQ(p->SerializeAsString(), cache.Lookup(key)->SerializeAsString());
  // Jobs planned on it go on refining it.
  EXPECT_EQ(*restarted.Refine(key, generation, {stage}), 1);

  ProfileCache::SavedProfile bad = *saved;
  bad.refinement.add_layers();  // two layers for a profile of one
  EXPECT_EQ(restarted.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = *saved;
  bad.profile.clear_layers();
  EXPECT_EQ(restarted.Restore(bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(restarted.StateOf(key), ProfileCache::State::kReady);
}

}  // namespace
}  // namespace dapple::coordinator

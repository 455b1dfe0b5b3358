// Tables of `dapplectl admin ...` and `dapplectl auth whoami` (-o table). Pure functions;
// `now_unix_ms` is passed in so that ages are testable. None of them prints a token's secret:
// only `admin token issue` and `admin join-token rotate` do, and not through these. Thread-safe.
#ifndef DAPPLE_DAPPLECTL_ADMIN_VIEWS_H_
#define DAPPLE_DAPPLECTL_ADMIN_VIEWS_H_

#include <cstdint>
#include <string>

#include "dapple/v1/admin.pb.h"
#include "dapple/v1/coordinator.pb.h"
#include "google/protobuf/repeated_field.h"

namespace dapple::ctl {

// `admin tenant list`: one row per tenant and device type (of its quota or its use): TENANT,
// COHORT, WEIGHT, DEVICE, NOMINAL, BORROW LIMIT, LEND LIMIT, IN USE, BORROWED, LENT, QUEUED,
// ADMITTED (jobs, the tenant's, on each of its rows). A limit the quota leaves unset is "-"
// outside a cohort, else BORROW LIMIT "none" / LEND LIMIT "all" when no type sets one, "0" when
// another type does (admin.proto DeviceQuota). A tenant without quota or use: one row, DEVICE
// "-". Then, when there are cohorts, a blank line and a COHORT / SHARED table ("cpu=4, cuda=8").
// No tenants: "no tenants\n" (then the cohorts). Then, when the response has notes, a blank line
// and "NOTE  <note>\n" for each.
std::string RenderTenants(const v1::ListTenantsResponse& response);

// "created tenant team-a\n" (or "set the quota of tenant team-a\n" when `created` is false),
// then the tenant's rows as RenderTenants shows them.
std::string RenderTenantChanged(const v1::Tenant& tenant, bool created);

// What `admin quota set` without --cohort says on stderr: the cohort it kept ("" : none), e.g.
// "cohort: research (kept: --cohort was not given; --cohort none takes the tenant out of it)".
std::string KeptCohortNote(const std::string& cohort);

// "set cohort research: shared cpu=4, cuda=2\n" ("shared nothing" without devices).
std::string RenderCohortSet(const v1::Cohort& cohort);

// "created user alice (tenant team-a)\n", or "created admin root\n".
std::string RenderUserCreated(const v1::User& user);

// NAME / TENANT ("-" for an admin) / ROLE / AGE. No users: "no users\n".
std::string RenderUsers(const google::protobuf::RepeatedPtrField<v1::User>& users,
                        int64_t now_unix_ms);

// When a token expires, seen at `now_unix_ms`: "never" (0), "in 23h", "expired 2h ago".
std::string ExpiryText(int64_t expires_unix_ms, int64_t now_unix_ms);

// ID / USER / AGE / EXPIRES (ExpiryText) / STATE (active, expired, revoked 5m ago). No tokens:
// "no tokens\n".
std::string RenderTokens(const google::protobuf::RepeatedPtrField<v1::TokenInfo>& tokens,
                         int64_t now_unix_ms);

// "revoked token 0123456789abcdef of alice\n".
std::string RenderTokenRevoked(const v1::TokenInfo& token);

// The note on stderr after `admin token issue` printed a token on stdout: "token
// 0123456789abcdef of alice (expires in 1d) is shown only this once: keep it secret, e.g.
// dapplectl admin token issue alice > alice.token".
std::string TokenIssuedNote(const v1::TokenInfo& token, int64_t now_unix_ms);

// The note on stderr after `admin join-token rotate`.
std::string JoinTokenRotatedNote();

// SEQ / TIME (UTC, "2026-12-02T19:30:01Z") / USER / TENANT / ROLE / ACTION / TARGET / RESULT /
// DETAIL, oldest first. No entries: "no audit entries\n".
std::string RenderAudit(const google::protobuf::RepeatedPtrField<v1::AuditEntry>& entries);

// `auth whoami`: USER, TENANT ("-" for admins and workers), ROLE, TOKEN (its id, "dpl_<id>"),
// EXPIRES (ExpiryText), one "KEY   value" line each.
std::string RenderWhoAmI(const v1::WhoAmIResponse& who, int64_t now_unix_ms);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_ADMIN_VIEWS_H_

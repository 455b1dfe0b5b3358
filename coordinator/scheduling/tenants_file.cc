#include "coordinator/scheduling/tenants_file.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec_internal.h"
#include "common/yaml_tags.h"
#include "coordinator/scheduling/quota_policy.h"
#include "coordinator/scheduling/quota_store.h"

namespace dapple::coordinator::scheduling {
namespace {

// The YAML reader: every message carries the position of the node it is about.
class Reader {
 public:
  explicit Reader(absl::string_view source) : source_(source) {}

  absl::Status Error(const YAML::Node& node, const std::string& message) const {
    const YAML::Mark mark = node.IsDefined() ? node.Mark() : YAML::Mark::null_mark();
    if (mark.is_null()) return absl::InvalidArgumentError(absl::StrCat(source_, ": ", message));
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d:%d: %s", source_, mark.line + 1, mark.column + 1, message));
  }

  static std::string Describe(const YAML::Node& node) {
    if (node.IsNull()) return "an empty value";
    if (node.IsMap()) return "a map";
    if (node.IsSequence()) return "a list";
    return absl::StrCat("'", node.Scalar().substr(0, 80), "'");
  }

  // The keys of map `node` (at `path`), each one of `known`; kInvalidArgument otherwise.
  absl::Status CheckKeys(const YAML::Node& node, const std::string& path,
                         const std::vector<std::string>& known) const {
    if (!node.IsMap()) {
      return Error(node, absl::StrCat(path, " must be a map, got ", Describe(node)));
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return Error(it->first,
                     absl::StrFormat("unknown field '%s' in %s; known: %s", key.substr(0, 80), path,
                                     absl::StrJoin(known, ", ")));
      }
      if (!seen.insert(key).second) {
        return Error(it->first, absl::StrFormat("duplicate field '%s' in %s", key, path));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Int(const YAML::Node& node, const std::string& path, int64_t min) const {
    int64_t value = 0;
    if (!node.IsScalar() || !ReadsAsValue(node) || !absl::SimpleAtoi(node.Scalar(), &value) ||
        value < min) {
      return Error(node,
                   absl::StrCat(path, " must be an integer >= ", min, ", got ", Describe(node)));
    }
    return value;
  }

  absl::StatusOr<std::string> Name(const YAML::Node& node, const std::string& path) const {
    const bool ok = node.IsScalar() && !node.Scalar().empty() && node.Scalar().size() <= 63 &&
                    absl::ascii_islower(node.Scalar()[0]) &&
                    std::all_of(node.Scalar().begin(), node.Scalar().end(), [](char c) {
                      return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '-';
                    });
    if (!ok) {
      return Error(node, absl::StrCat(path, " must be a name of 1-63 of a-z, 0-9 and '-', ",
                                      "starting with a letter, got ", Describe(node)));
    }
    return node.Scalar();
  }

  // A map of device type -> entry; `entry` reads one.
  absl::Status DeviceMap(
      const YAML::Node& node, const std::string& path,
      const std::function<absl::Status(const std::string& type, const YAML::Node& value,
                                       const std::string& at)>& entry) const {
    if (!node.IsMap()) {
      return Error(node, absl::StrCat(path, " must be a map of device type (",
                                      absl::StrJoin(job_spec_internal::kQuotaDeviceTypes, ", "),
                                      ") to its devices, got ", Describe(node)));
    }
    std::set<std::string> seen;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string type = it->first.IsScalar() ? it->first.Scalar() : "";
      if (type.empty()) {
        return Error(it->first, absl::StrCat("the keys of ", path, " must be device types"));
      }
      if (!absl::c_linear_search(job_spec_internal::kQuotaDeviceTypes, type)) {
        return Error(it->first,
                     absl::StrCat("the keys of ", path, " must be device types (",
                                  absl::StrJoin(job_spec_internal::kQuotaDeviceTypes, ", "),
                                  "), got '", type, "'"));
      }
      if (!seen.insert(type).second) {
        return Error(it->first, absl::StrCat(path, ".", type, " is given twice"));
      }
      if (absl::Status s = entry(type, it->second, absl::StrCat(path, ".", type)); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }

 private:
  std::string source_;
};

absl::StatusOr<v1::Cohort> ReadCohort(const Reader& r, const YAML::Node& node,
                                      const std::string& path) {
  if (absl::Status s = r.CheckKeys(node, path, {"name", "shared"}); !s.ok()) return s;
  v1::Cohort cohort;
  absl::StatusOr<std::string> name = r.Name(node["name"], path + ".name");
  if (!name.ok()) return name.status();
  cohort.set_name(*name);
  if (node["shared"]) {
    absl::Status s =
        r.DeviceMap(node["shared"], path + ".shared",
                    [&](const std::string& type, const YAML::Node& value, const std::string& at) {
                      absl::StatusOr<int64_t> n = r.Int(value, at, 0);
                      if (!n.ok()) return n.status();
                      v1::DeviceQuota* d = cohort.add_shared();
                      d->set_device_type(type);
                      d->set_nominal(*n);
                      return absl::OkStatus();
                    });
    if (!s.ok()) return s;
  }
  return cohort;
}

absl::Status ReadTenant(const Reader& r, const YAML::Node& node, const std::string& path,
                        std::string* name, v1::TenantQuota* quota) {
  if (absl::Status s =
          r.CheckKeys(node, path, {"name", "cohort", "weight", "max_queued_jobs", "quota"});
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::string> n = r.Name(node["name"], path + ".name");
  if (!n.ok()) return n.status();
  *name = *n;
  if (node["cohort"]) {
    absl::StatusOr<std::string> cohort = r.Name(node["cohort"], path + ".cohort");
    if (!cohort.ok()) return cohort.status();
    quota->set_cohort(*cohort);
  }
  if (const YAML::Node w = node["weight"]) {
    double weight = 0;
    if (!w.IsScalar() || !ReadsAsValue(w) || !absl::SimpleAtod(w.Scalar(), &weight) ||
        !(weight > 0) || weight > 1e6) {
      return r.Error(w, absl::StrCat(path, ".weight must be a number > 0 (and at most 1e6), got ",
                                     Reader::Describe(w)));
    }
    quota->set_weight(weight);
  }
  if (node["max_queued_jobs"]) {
    absl::StatusOr<int64_t> max = r.Int(node["max_queued_jobs"], path + ".max_queued_jobs", 1);
    if (max.ok() && *max > 1'000'000) {
      return r.Error(node["max_queued_jobs"],
                     absl::StrCat(path, ".max_queued_jobs must be at most 1000000, got ", *max));
    }
    if (!max.ok()) return max.status();
    quota->set_max_queued_jobs(static_cast<int32_t>(*max));
  }
  if (!node["quota"]) {
    return r.Error(node, absl::StrCat(path, " (", *name, ") has no quota: give ", path,
                                      ".quota.<device type>.nominal"));
  }
  return r.DeviceMap(
      node["quota"], path + ".quota",
      [&](const std::string& type, const YAML::Node& value, const std::string& at) {
        if (absl::Status s =
                r.CheckKeys(value, at, {"nominal", "borrowing_limit", "lending_limit"});
            !s.ok()) {
          return s;
        }
        v1::DeviceQuota* d = quota->add_devices();
        d->set_device_type(type);
        if (!value["nominal"]) {
          return r.Error(value, absl::StrCat(at, ".nominal is missing: the devices guaranteed"));
        }
        absl::StatusOr<int64_t> nominal = r.Int(value["nominal"], at + ".nominal", 0);
        if (!nominal.ok()) return nominal.status();
        d->set_nominal(*nominal);
        // dapplectl's --borrowing-limit / --lending-limit rule (admin_args.cc), at the key.
        for (const char* limit : {"borrowing_limit", "lending_limit"}) {
          if (value[limit] && quota->cohort().empty()) {
            return r.Error(value[limit],
                           absl::StrCat(at, ".", limit, " needs ", path,
                                        ".cohort: a tenant outside a cohort neither borrows nor "
                                        "lends"));
          }
        }
        if (value["borrowing_limit"]) {
          absl::StatusOr<int64_t> b = r.Int(value["borrowing_limit"], at + ".borrowing_limit", 0);
          if (!b.ok()) return b.status();
          d->set_borrowing_limit(*b);
        }
        if (value["lending_limit"]) {
          absl::StatusOr<int64_t> l = r.Int(value["lending_limit"], at + ".lending_limit", 0);
          if (!l.ok()) return l.status();
          if (*l > *nominal) {
            return r.Error(value["lending_limit"],
                           absl::StrCat(at, ".lending_limit must be at most ", at, ".nominal (",
                                        *nominal, "), got ", *l));
          }
          d->set_lending_limit(*l);
        }
        return absl::OkStatus();
      });
}

bool Same(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return a.SerializeAsString() == b.SerializeAsString();
}

}  // namespace

absl::StatusOr<TenantsFile> ParseTenantsFile(absl::string_view yaml, absl::string_view source) {
  if (yaml.size() > kMaxTenantsFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is ", yaml.size(),
                                                   " bytes; a tenants file may be at most ",
                                                   kMaxTenantsFileBytes, " bytes (1 MiB)"));
  }
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("%s:%d:%d: YAML syntax error: %s", source,
                                                      e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  const Reader r(source);
  TenantsFile file;
  if (root.IsNull()) return file;  // an empty file: nothing to apply
  if (absl::Status s = r.CheckKeys(root, "the tenants file", {"cohorts", "tenants"}); !s.ok()) {
    return s;
  }
  std::map<std::string, YAML::Node> where;  // "tenants[0]" -> its node, for policy errors
  std::map<std::string, std::string> path_of;
  for (const char* list : {"cohorts", "tenants"}) {
    const YAML::Node items = root[list];
    if (!items || items.IsNull()) continue;
    if (!items.IsSequence()) {
      return r.Error(items, absl::StrCat(list, " must be a list, got ", Reader::Describe(items)));
    }
    std::set<std::string> names;
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string path = absl::StrCat(list, "[", i, "]");
      std::string name;
      if (std::string(list) == "cohorts") {
        absl::StatusOr<v1::Cohort> cohort = ReadCohort(r, items[i], path);
        if (!cohort.ok()) return cohort.status();
        name = cohort->name();
        file.cohorts.push_back(*std::move(cohort));
      } else {
        v1::TenantQuota quota;
        if (absl::Status s = ReadTenant(r, items[i], path, &name, &quota); !s.ok()) return s;
        file.tenants.push_back(name);
        file.quotas[name] = std::move(quota);
      }
      if (!names.insert(name).second) {
        return r.Error(items[i]["name"], absl::StrCat(path, ".name '", name, "' is given twice"));
      }
      where[absl::StrCat(list, ":", name)] = items[i];
      path_of[absl::StrCat(list, ":", name)] = path;
    }
  }
  // The policy's rules on the file as a whole (cohort limits, weights), at the entry they name.
  SchedulingConfig config;
  for (const v1::Cohort& c : file.cohorts) {
    absl::StatusOr<CohortConfig> cohort = ToCohortConfig(c);
    const std::string key = absl::StrCat("cohorts:", c.name());
    if (!cohort.ok()) {
      return r.Error(where[key],
                     absl::StrCat(path_of[key], " (", c.name(), "): ", cohort.status().message()));
    }
    config.cohorts.push_back(*std::move(cohort));
  }
  for (const std::string& name : file.tenants) {
    absl::StatusOr<TenantConfig> tenant = ToTenantConfig(name, file.quotas[name]);
    const std::string key = absl::StrCat("tenants:", name);
    if (!tenant.ok()) {
      return r.Error(where[key],
                     absl::StrCat(path_of[key], " (", name, "): ", tenant.status().message()));
    }
    config.tenants.push_back(*std::move(tenant));
  }
  if (absl::StatusOr<QuotaPolicy> policy = QuotaPolicy::Create(config); !policy.ok()) {
    // Point at the first tenant or cohort the message names, else at the file.
    YAML::Node at;
    std::string path = "the tenants file";
    for (const auto& [key, node] : where) {
      const std::string name = key.substr(key.find(':') + 1);
      if (absl::StrContains(policy.status().message(), name)) {
        at = node;
        path = path_of[key];
        break;
      }
    }
    return r.Error(at, absl::StrCat(path, ": ", policy.status().message()));
  }
  return file;
}

absl::StatusOr<TenantsApplied> ApplyTenantsFile(const TenantsFile& file,
                                                const TenantsTarget& target) {
  TenantsApplied applied;
  absl::StatusOr<std::vector<std::string>> existing = target.list_tenants();
  if (!existing.ok()) return existing.status();
  const std::set<std::string> exists(existing->begin(), existing->end());
  auto fail = [](const std::string& what, const absl::Status& s) {
    return absl::Status(s.code(), absl::StrCat("tenants file: ", what, ": ", s.message()));
  };
  for (const std::string& name : file.tenants) {
    if (exists.contains(name)) continue;
    if (absl::Status s = target.create_tenant(name); !s.ok()) return fail("tenant " + name, s);
    ++applied.tenants_created;
  }
  absl::StatusOr<std::map<std::string, v1::Cohort>> cohorts = target.cohorts();
  if (!cohorts.ok()) return cohorts.status();
  for (const v1::Cohort& c : file.cohorts) {
    auto stored = cohorts->find(c.name());
    if (stored != cohorts->end() && Same(stored->second, c)) continue;
    if (absl::Status s = target.set_cohort(c); !s.ok()) return fail("cohort " + c.name(), s);
    ++applied.cohorts_set;
  }
  absl::StatusOr<std::map<std::string, v1::TenantQuota>> quotas = target.quotas();
  if (!quotas.ok()) return quotas.status();
  for (const std::string& name : file.tenants) {
    const v1::TenantQuota& quota = file.quotas.at(name);
    auto stored = quotas->find(name);
    // As read: a listing shows an unset weight and queue limit as their defaults.
    if (stored != quotas->end() && Same(WithDefaults(stored->second), WithDefaults(quota))) {
      continue;
    }
    if (absl::Status s = target.set_quota(name, quota); !s.ok()) return fail("tenant " + name, s);
    ++applied.quotas_set;
  }
  return applied;
}

}  // namespace dapple::coordinator::scheduling

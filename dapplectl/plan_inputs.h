// Reading the inputs of `dapplectl plan`: the --profile (PipeDream's graph.txt format,
// examples/profiles/README.md) and --cluster (examples/clusters/) files. dapplectl parses them
// itself, so a bad file is reported by name, line and field before anything is sent, and the
// coordinator needs no access to the user's files.
#ifndef DAPPLE_DAPPLECTL_PLAN_INPUTS_H_
#define DAPPLE_DAPPLECTL_PLAN_INPUTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "dapple/v1/profile.pb.h"

namespace dapple::ctl {

// profile::ReadProfileFile(path, batch_size) (batch_size 0: from the file name or an Input
// node), with invalid UTF-8 in its text fields escaped (protobuf strings must be UTF-8).
// Errors as ReadProfileFile's: kNotFound / kPermissionDenied naming the path,
// kInvalidArgument "<path>:<line>:<column>: <field>: <what is wrong>".
absl::StatusOr<v1::ModelProfile> ReadPlanProfile(const std::string& path, int64_t batch_size);

// profile::ReadClusterFile(path), names escaped likewise. Errors as ReadClusterFile's.
absl::StatusOr<v1::ClusterTopology> ReadPlanCluster(const std::string& path);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_PLAN_INPUTS_H_

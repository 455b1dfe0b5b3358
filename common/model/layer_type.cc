#include "common/model/layer_type.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace dapple {

std::string ParamName(int layer_index, absl::string_view name) {
  return absl::StrCat("layer", layer_index, ".", name);
}

absl::Status LayerError(const InferContext& ctx, absl::string_view suffix) {
  return absl::InvalidArgumentError(absl::StrCat(ctx.path, suffix));
}

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace dapple

// A plain-text table with left-aligned columns, as kubectl prints them. Not thread-safe.
#ifndef DAPPLE_DAPPLECTL_TEXT_TABLE_H_
#define DAPPLE_DAPPLECTL_TEXT_TABLE_H_

#include <string>
#include <vector>

namespace dapple::ctl {

class TextTable {
 public:
  // Columns are separated by kGap spaces.
  static constexpr int kGap = 3;

  explicit TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

  // Adds a row; missing cells are empty, cells beyond the headers are dropped.
  void AddRow(std::vector<std::string> cells);

  int rows() const { return static_cast<int>(rows_.size()); }

  // The header line then one line per row, each ending in "\n", without trailing spaces.
  // Widths count UTF-8 code points, so names with non-ASCII letters stay aligned. Every line
  // is prefixed with `indent`.
  std::string Render(const std::string& indent = "") const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// The number of UTF-8 code points in `s` (bytes that are not continuation bytes).
int DisplayWidth(const std::string& s);

}  // namespace dapple::ctl

#endif  // DAPPLE_DAPPLECTL_TEXT_TABLE_H_

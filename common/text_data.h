// Byte-level text datasets (data.dataset text; docs/job_spec.md, "Text data"): the split
// arithmetic and the checks of the file, shared by the coordinator, which resolves data.* when a
// job is submitted (ResolveTextData), and the workers, which read the file again
// (worker/data/text_dataset.h). One place, so both count the same samples.
//
// The file's bytes are the tokens (vocabulary kTextVocab = 256 byte values). With N bytes and
// data.validation_fraction f, the training split is the first floor(N * (1 - f)) bytes and the
// validation split the rest. Sample i of a split covers the split's bytes [i*T, i*T + T]
// (T = data.seq_len, T + 1 bytes): its inputs are the first T, its targets the T bytes after each
// input (next-byte prediction). Consecutive samples share one byte (sample i's last target is
// sample i + 1's first input), so a split of B bytes holds floor((B - 1) / T) samples; the bytes
// past the last sample are never read.
//
// A text file is one regular file of at most kMaxTextFileBytes bytes (1 GiB), not empty, of UTF-8
// text without NUL bytes.
#ifndef DAPPLE_COMMON_TEXT_DATA_H_
#define DAPPLE_COMMON_TEXT_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "dapple/v1/job.pb.h"

namespace dapple {

// data.dataset of a byte-level text file.
inline constexpr absl::string_view kTextDataset = "text";
// Tokens are byte values.
inline constexpr int64_t kTextVocab = 256;
// The largest text file a job may name: its bytes are mapped into every worker's memory.
inline constexpr int64_t kMaxTextFileBytes = int64_t{1} << 30;

// A contiguous range of the file's bytes and the samples it holds.
struct TextSplit {
  int64_t begin = 0;    // offset of the split's first byte in the file
  int64_t bytes = 0;    // bytes in the split
  int64_t samples = 0;  // floor((bytes - 1) / seq_len); 0 when bytes <= seq_len
};

struct TextLayout {
  TextSplit train;       // bytes [0, floor(N * (1 - f)))
  TextSplit validation;  // the rest
};

// The splits of a file of `file_bytes` bytes (see above). floor(N * (1 - f)) is taken on the
// decimal value: a product within 1e-6 of an integer counts as that integer, so 100 bytes at
// f = 0.05 give 95 training bytes although 100 * (1 - 0.05) is 94.99999999999999 in binary
// floating point. Pure. Requires file_bytes >= 0, seq_len >= 1, 0 <= f <= 1.
TextLayout LayoutText(int64_t file_bytes, int64_t seq_len, double validation_fraction);

// LayoutText for `data` (seq_len, validation_fraction, path for messages) when both splits hold
// at least one sample; else kInvalidArgument, one line naming data.path, the sizes and the rule:
// "data.path /d/tiny.txt has 100 bytes: with data.seq_len 64 and data.validation_fraction 0.05
// its training split has 95 bytes (1 sample) and its validation split 5 bytes (0 samples); each
// split needs at least data.seq_len + 1 = 65 bytes for one sample: use a longer file, a smaller
// data.seq_len or a larger data.validation_fraction". Pure.
absl::StatusOr<TextLayout> CheckedTextLayout(const v1::DataSpec& data, int64_t file_bytes);

// The offset of the first byte of `bytes` that is not text: a NUL byte, or the first byte of a
// malformed UTF-8 sequence (stray continuation byte, overlong form, surrogate, a code point above
// U+10FFFF, a sequence cut short by the end); -1 when every byte is text. Pure.
int64_t FirstNonTextByte(absl::string_view bytes);

// A text file mapped read-only into memory. Thread-safe after Open (read only).
class TextFile {
 public:
  // Opens and maps `path` after checking it is a text file (see above). Errors, one line each,
  // all naming data.path and the path:
  //   kNotFound: the file does not exist ("data.path /d/kjv.txt does not exist (scripts/setup
  //     writes the King James Bible to /var/lib/dapple/datasets/kjv.txt)");
  //   kInvalidArgument: it cannot be opened or read (the system's reason), is a directory or
  //     another non-regular file, is empty, has more than `max_bytes` bytes, or is not text
  //     ("data.path /d/x.bin is not text: byte offset 17 is a NUL byte"; "... byte offset 3 (0xff)
  //     does not start a valid UTF-8 sequence").
  // The bytes are read once (to check them); `max_bytes` is for tests.
  static absl::StatusOr<std::unique_ptr<const TextFile>> Open(
      const std::string& path, int64_t max_bytes = kMaxTextFileBytes);
  ~TextFile();
  TextFile(const TextFile&) = delete;
  TextFile& operator=(const TextFile&) = delete;

  const std::string& path() const { return path_; }
  // The whole file; valid for the object's lifetime.
  absl::string_view bytes() const { return absl::string_view(data_, size_); }
  int64_t size() const { return static_cast<int64_t>(size_); }

 private:
  TextFile(std::string path, const char* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const char* data_;
  size_t size_;
};

// For data.dataset text: opens data.path (TextFile::Open, then CheckedTextLayout) and sets
// data.train_samples, data.eval_samples (the validation split's samples) and data.file_bytes;
// returns their errors unchanged. Other datasets are left as they are (the parser sets
// fashion-mnist's counts). Reads the whole file: call it outside locks.
absl::Status ResolveTextData(v1::DataSpec* data);

}  // namespace dapple

#endif  // DAPPLE_COMMON_TEXT_DATA_H_

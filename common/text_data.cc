#include "common/text_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/spec_text.h"
#include "common/status.h"

namespace dapple {
namespace {

using job_spec_internal::Count;
using job_spec_internal::DecodeUtf8;
using job_spec_internal::FormatDouble;

// Where scripts/setup puts the example corpus; named when a file is missing.
constexpr char kSetupHint[] =
    "scripts/setup writes the King James Bible to /var/lib/dapple/datasets/kjv.txt";

// Closes a file descriptor on every path out of Open.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

TextSplit SplitOf(int64_t begin, int64_t bytes, int64_t seq_len) {
  return TextSplit{begin, bytes, bytes > seq_len ? (bytes - 1) / seq_len : 0};
}

// Messages quote the path, which the user wrote: kept on one line (spec_text.h OneLine).
absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(job_spec_internal::OneLine(message));
}

std::string SplitText(const TextSplit& split) {
  return absl::StrFormat("%s (%s)", Count(split.bytes, "byte", "bytes"),
                         Count(split.samples, "sample", "samples"));
}

}  // namespace

TextLayout LayoutText(int64_t file_bytes, int64_t seq_len, double validation_fraction) {
  const double exact = static_cast<double>(file_bytes) * (1.0 - validation_fraction);
  // The tolerance absorbs the binary rounding of the product (below 2^-52 relative: 2.4e-7 for
  // a 1 GiB file), far from the next integer's fraction of a byte.
  const int64_t train = std::clamp<int64_t>(static_cast<int64_t>(std::floor(exact + 1e-6)), 0,
                                            std::max<int64_t>(file_bytes, 0));
  TextLayout layout;
  layout.train = SplitOf(0, train, seq_len);
  layout.validation = SplitOf(train, std::max<int64_t>(file_bytes, 0) - train, seq_len);
  return layout;
}

absl::StatusOr<TextLayout> CheckedTextLayout(const v1::DataSpec& data, int64_t file_bytes) {
  const TextLayout layout = LayoutText(file_bytes, data.seq_len(), data.validation_fraction());
  if (layout.train.samples >= 1 && layout.validation.samples >= 1) return layout;
  return Invalid(absl::StrFormat(
      "data.path %s has %s: with data.seq_len %d and data.validation_fraction %s its training "
      "split has %s and its validation split %s; each split needs at least data.seq_len + 1 = "
      "%d bytes for one sample: use a longer file, a smaller data.seq_len or a larger "
      "data.validation_fraction",
      data.path(), Count(file_bytes, "byte", "bytes"), data.seq_len(),
      FormatDouble(data.validation_fraction()), SplitText(layout.train),
      SplitText(layout.validation), data.seq_len() + 1));
}

int64_t FirstNonTextByte(absl::string_view bytes) {
  const size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    // Plain ASCII, nearly all of an English text, skips the decoder.
    if (c != 0 && c < 0x80) {
      ++i;
      continue;
    }
    if (c == 0) return static_cast<int64_t>(i);
    const job_spec_internal::Utf8Char u = DecodeUtf8(bytes, i);
    if (u.code_point < 0) return static_cast<int64_t>(i);
    i += u.length;
  }
  return -1;
}

absl::StatusOr<std::unique_ptr<const TextFile>> TextFile::Open(const std::string& path,
                                                               int64_t max_bytes) {
  // O_NONBLOCK: a FIFO named by mistake must not block the open; it is refused below as not a
  // regular file. It changes nothing for regular files.
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) {
    const int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(job_spec_internal::OneLine(
          absl::StrFormat("data.path %s does not exist (%s)", path, kSetupHint)));
    }
    return Invalid(absl::StrFormat("data.path %s cannot be read: %s", path, std::strerror(error)));
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return Invalid(absl::StrFormat("data.path %s cannot be read: %s", path, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) {
    return Invalid(absl::StrFormat(
        "data.path %s is a directory; data.dataset text reads one text file", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return Invalid(absl::StrFormat(
        "data.path %s is not a regular file; data.dataset text reads one text file", path));
  }
  if (st.st_size == 0) {
    return Invalid(
        absl::StrFormat("data.path %s is empty; data.dataset text needs a text file", path));
  }
  if (st.st_size > max_bytes) {
    return Invalid(
        absl::StrFormat("data.path %s has %d bytes, more than the %d bytes a text dataset may "
                        "have",
                        path, static_cast<int64_t>(st.st_size), max_bytes));
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapped == MAP_FAILED) {
    return Invalid(absl::StrFormat("data.path %s cannot be read: %s", path, std::strerror(errno)));
  }
  // The mapping owns the bytes from here (it outlives the descriptor).
  std::unique_ptr<const TextFile> file(new TextFile(path, static_cast<const char*>(mapped), size));
  // Every byte is read now (the text check) and the training reads the file at random: read it
  // ahead in one go rather than fault page by page. A hint; its failure changes nothing.
  madvise(mapped, size, MADV_WILLNEED);
  const int64_t bad = FirstNonTextByte(file->bytes());
  if (bad >= 0) {
    const auto byte = static_cast<unsigned char>(file->bytes()[bad]);
    return Invalid(
        byte == 0 ? absl::StrFormat("data.path %s is not text: byte offset %d is a NUL byte; "
                                    "data.dataset text reads UTF-8 text",
                                    path, bad)
                  : absl::StrFormat("data.path %s is not text: byte offset %d (0x%02x) does not "
                                    "start a valid UTF-8 sequence; data.dataset text reads UTF-8 "
                                    "text",
                                    path, bad, byte));
  }
  return file;
}

TextFile::~TextFile() { munmap(const_cast<char*>(data_), size_); }

absl::Status ResolveTextData(v1::DataSpec* data) {
  if (data->dataset() != kTextDataset) return absl::OkStatus();
  DAPPLE_ASSIGN_OR_RETURN(std::unique_ptr<const TextFile> file, TextFile::Open(data->path()));
  DAPPLE_ASSIGN_OR_RETURN(const TextLayout layout, CheckedTextLayout(*data, file->size()));
  data->set_train_samples(layout.train.samples);
  data->set_eval_samples(layout.validation.samples);
  data->set_file_bytes(file->size());
  return absl::OkStatus();
}

}  // namespace dapple

#include "worker/data/fashion_mnist.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace dapple::worker {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // IDX: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // IDX: unsigned byte, 1 dimension
constexpr int64_t kRows = 28;
constexpr int64_t kCols = 28;
constexpr int32_t kClasses = 10;
// More samples than any IDX file of this dataset could hold; guards the allocation against a
// corrupt header before we read the payload.
constexpr int64_t kMaxSamples = 10'000'000;
// gzread takes an unsigned int length; read big payloads in chunks below that.
constexpr int64_t kReadChunk = 1 << 30;

// Owns a gzFile.
class GzReader {
 public:
  explicit GzReader(gzFile file) : file_(file) {}
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() {
    if (file_ != nullptr) gzclose(file_);
  }
  gzFile get() const { return file_; }

 private:
  gzFile file_;
};

std::string GzErrorText(gzFile file) {
  int code = Z_OK;
  const char* text = gzerror(file, &code);
  if (code == Z_ERRNO) return std::strerror(errno);
  return text != nullptr && *text != '\0' ? text : "unexpected end of file";
}

// Reads exactly `size` bytes; fails naming `what` (e.g. "the header") when the decompressed
// stream ends early or the gzip stream is corrupt.
absl::Status ReadExactly(gzFile file, const std::string& path, const std::string& what, void* out,
                         int64_t size) {
  auto* dst = static_cast<char*>(out);
  int64_t done = 0;
  while (done < size) {
    const auto want = static_cast<unsigned>(std::min(size - done, kReadChunk));
    const int got = gzread(file, dst + done, want);
    if (got < 0) {
      return absl::DataLossError(absl::StrFormat(
          "fashion-mnist: %s is corrupt while reading %s: %s", path, what, GzErrorText(file)));
    }
    if (got == 0) {
      // A truncated gzip stream can also surface here as a plain end of data.
      int code = Z_OK;
      gzerror(file, &code);
      const std::string why = code != Z_OK ? absl::StrCat(": ", GzErrorText(file)) : "";
      return absl::DataLossError(absl::StrFormat(
          "fashion-mnist: %s is truncated: %s needs %d bytes, the file ends after %d%s", path, what,
          size, done, why));
    }
    done += got;
  }
  return absl::OkStatus();
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Opens `dir/name` for reading as gzip. kNotFound if it does not exist, kDataLoss if it is not
// gzip data (zlib would otherwise read a plain file transparently).
absl::StatusOr<gzFile> OpenGz(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrFormat(
        "fashion-mnist: missing %s (install Debian's dataset-fashion-mnist or set data.path)",
        path));
  }
  if (st.st_size == 0) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s is empty (expected gzip'd IDX data)", path));
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int error = errno;
    const std::string message =
        absl::StrFormat("fashion-mnist: cannot open %s: %s", path, std::strerror(error));
    return error == EACCES ? absl::PermissionDeniedError(message) : absl::NotFoundError(message);
  }
  gzbuffer(file, 1 << 18);
  return file;
}

// After the first read, gzdirect tells whether zlib found a gzip header at all.
absl::Status CheckGzip(gzFile file, const std::string& path) {
  if (gzdirect(file) == 1) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s is not a gzip file (expected gzip'd IDX data)", path));
  }
  return absl::OkStatus();
}

absl::Status CheckEnd(gzFile file, const std::string& path) {
  char extra;
  const int got = gzread(file, &extra, 1);
  if (got < 0) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s is corrupt at its end: %s", path, GzErrorText(file)));
  }
  if (got > 0) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s has data after the samples its header declares", path));
  }
  return absl::OkStatus();
}

absl::Status ReadImages(const std::string& path, Dataset& data) {
  DAPPLE_ASSIGN_OR_RETURN(gzFile file, OpenGz(path));
  GzReader reader(file);
  std::array<unsigned char, 16> header;
  absl::Status read =
      ReadExactly(reader.get(), path, "the 16-byte IDX header", header.data(), header.size());
  DAPPLE_RETURN_IF_ERROR(CheckGzip(reader.get(), path));
  if (!read.ok()) return read;
  const uint32_t magic = BigEndian32(&header[0]);
  if (magic != kImagesMagic) {
    return absl::DataLossError(absl::StrFormat(
        "fashion-mnist: %s has magic number %d, expected %d (IDX unsigned-byte images)", path,
        magic, kImagesMagic));
  }
  const int64_t count = BigEndian32(&header[4]);
  const int64_t rows = BigEndian32(&header[8]);
  const int64_t cols = BigEndian32(&header[12]);
  if (rows != kRows || cols != kCols) {
    return absl::DataLossError(absl::StrFormat("fashion-mnist: %s has %dx%d images, expected %dx%d",
                                               path, rows, cols, kRows, kCols));
  }
  if (count < 1 || count > kMaxSamples) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s declares %d images, expected between 1 and %d", path,
                        count, kMaxSamples));
  }
  data.size = count;
  data.rows = rows;
  data.cols = cols;
  data.pixels.resize(count * rows * cols);
  DAPPLE_RETURN_IF_ERROR(ReadExactly(reader.get(), path, absl::StrFormat("%d images", count),
                                     data.pixels.data(), data.pixels.size()));
  return CheckEnd(reader.get(), path);
}

absl::Status ReadLabels(const std::string& path, Dataset& data) {
  DAPPLE_ASSIGN_OR_RETURN(gzFile file, OpenGz(path));
  GzReader reader(file);
  std::array<unsigned char, 8> header;
  absl::Status read =
      ReadExactly(reader.get(), path, "the 8-byte IDX header", header.data(), header.size());
  DAPPLE_RETURN_IF_ERROR(CheckGzip(reader.get(), path));
  if (!read.ok()) return read;
  const uint32_t magic = BigEndian32(&header[0]);
  if (magic != kLabelsMagic) {
    return absl::DataLossError(absl::StrFormat(
        "fashion-mnist: %s has magic number %d, expected %d (IDX unsigned-byte labels)", path,
        magic, kLabelsMagic));
  }
  const int64_t count = BigEndian32(&header[4]);
  if (count != data.size) {
    return absl::DataLossError(
        absl::StrFormat("fashion-mnist: %s has %d labels but its images file has %d images", path,
                        count, data.size));
  }
  std::vector<uint8_t> raw(count);
  DAPPLE_RETURN_IF_ERROR(
      ReadExactly(reader.get(), path, absl::StrFormat("%d labels", count), raw.data(), raw.size()));
  DAPPLE_RETURN_IF_ERROR(CheckEnd(reader.get(), path));
  data.labels.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    if (raw[i] >= kClasses) {
      return absl::DataLossError(
          absl::StrFormat("fashion-mnist: %s: label %d of sample %d is out of range [0, %d)", path,
                          raw[i], i, kClasses));
    }
    data.labels[i] = raw[i];
  }
  return absl::OkStatus();
}

// splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
// OOPSLA 2014; constants from Vigna's public-domain reference implementation).
uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound] without modulo bias (Lemire, "Fast random integer generation in an
// interval", TOMACS 2019), so the permutation is exactly uniform and identical everywhere.
uint64_t UniformUpTo(uint64_t& state, uint64_t bound) {
  const uint64_t range = bound + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(SplitMix64(state)) * range;
  auto low = static_cast<uint64_t>(m);
  if (low < range) {
    const uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(SplitMix64(state)) * range;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  std::string base = dir;
  if (!base.empty() && base.back() != '/') base += '/';
  const std::string images = base + prefix + "-images-idx3-ubyte.gz";
  const std::string labels = base + prefix + "-labels-idx1-ubyte.gz";
  Dataset data;
  DAPPLE_RETURN_IF_ERROR(ReadImages(images, data));
  DAPPLE_RETURN_IF_ERROR(ReadLabels(labels, data));
  return data;
}

std::vector<int64_t> EpochOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n > 0 ? n : 0);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  // Mix seed and epoch through splitmix64 separately so that (seed, epoch) pairs with equal
  // sums or xors still give unrelated streams.
  uint64_t seed_state = seed;
  uint64_t epoch_state = static_cast<uint64_t>(epoch) ^ 0xD1B54A32D192ED03ULL;
  uint64_t state = SplitMix64(seed_state) ^ SplitMix64(epoch_state);
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(UniformUpTo(state, static_cast<uint64_t>(i)));
    std::swap(order[i], order[j]);
  }
  return order;
}

void GatherBatch(const Dataset& data, const int64_t* indices, int64_t count, float* images,
                 int32_t* labels) {
  const int64_t sample = data.rows * data.cols;
  if (images != nullptr) {
    std::array<float, 256> table;
    for (int v = 0; v < 256; ++v) {
      table[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
    }
    for (int64_t b = 0; b < count; ++b) {
      const uint8_t* src = data.pixels.data() + indices[b] * sample;
      float* dst = images + b * sample;
      for (int64_t k = 0; k < sample; ++k) dst[k] = table[src[k]];
    }
  }
  if (labels != nullptr) {
    for (int64_t b = 0; b < count; ++b) labels[b] = data.labels[indices[b]];
  }
}

}  // namespace dapple::worker

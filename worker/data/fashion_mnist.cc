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
#include "common/fashion_mnist_files.h"
#include "common/status.h"

namespace dapple::worker {
namespace {

constexpr uint32_t kImagesMagic = 2051;  // IDX: unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 2049;  // IDX: unsigned byte, 1 dimension
constexpr int64_t kRows = FashionMnist::kRows;
constexpr int64_t kCols = FashionMnist::kCols;
constexpr int64_t kClasses = FashionMnist::kClasses;
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

// The images of `path`, [count, 28 * 28] raw pixels.
absl::StatusOr<std::vector<uint8_t>> ReadImages(const std::string& path) {
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
  std::vector<uint8_t> pixels(count * rows * cols);
  DAPPLE_RETURN_IF_ERROR(ReadExactly(reader.get(), path, absl::StrFormat("%d images", count),
                                     pixels.data(), pixels.size()));
  DAPPLE_RETURN_IF_ERROR(CheckEnd(reader.get(), path));
  return pixels;
}

// The labels of `path`, which must hold `images` of them.
absl::StatusOr<std::vector<int32_t>> ReadLabels(const std::string& path, int64_t images) {
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
  if (count != images) {
    return absl::DataLossError(absl::StrFormat(
        "fashion-mnist: %s has %d labels but its images file has %d images", path, count, images));
  }
  std::vector<uint8_t> raw(count);
  DAPPLE_RETURN_IF_ERROR(
      ReadExactly(reader.get(), path, absl::StrFormat("%d labels", count), raw.data(), raw.size()));
  DAPPLE_RETURN_IF_ERROR(CheckEnd(reader.get(), path));
  std::vector<int32_t> labels(count);
  for (int64_t i = 0; i < count; ++i) {
    if (raw[i] >= kClasses) {
      return absl::DataLossError(
          absl::StrFormat("fashion-mnist: %s: label %d of sample %d is out of range [0, %d)", path,
                          raw[i], i, kClasses));
    }
    labels[i] = raw[i];
  }
  return labels;
}

}  // namespace

absl::StatusOr<FashionMnist> LoadFashionMnist(const std::string& dir, Split split) {
  const bool train = split == Split::kTrain;
  DAPPLE_ASSIGN_OR_RETURN(std::vector<uint8_t> pixels,
                          ReadImages(FashionMnistFile(dir, train, /*images=*/true)));
  const auto images = static_cast<int64_t>(pixels.size()) / (kRows * kCols);
  DAPPLE_ASSIGN_OR_RETURN(std::vector<int32_t> labels,
                          ReadLabels(FashionMnistFile(dir, train, /*images=*/false), images));
  return FashionMnist(std::move(pixels), std::move(labels));
}

FashionMnist::FashionMnist(std::vector<uint8_t> pixels, std::vector<int32_t> labels)
    : pixels_(std::move(pixels)), labels_(std::move(labels)) {}

void FashionMnist::Gather(const int64_t* indices, int64_t count, float* inputs,
                          int32_t* targets) const {
  constexpr int64_t kSample = kRows * kCols;
  if (inputs != nullptr) {
    std::array<float, 256> table;
    for (int v = 0; v < 256; ++v) {
      table[v] = (static_cast<float>(v) / 255.0f - kFashionMnistMean) / kFashionMnistStd;
    }
    for (int64_t b = 0; b < count; ++b) {
      const uint8_t* src = pixels_.data() + indices[b] * kSample;
      float* dst = inputs + b * kSample;
      for (int64_t k = 0; k < kSample; ++k) dst[k] = table[src[k]];
    }
  }
  if (targets != nullptr) {
    for (int64_t b = 0; b < count; ++b) targets[b] = labels_[indices[b]];
  }
}

}  // namespace dapple::worker

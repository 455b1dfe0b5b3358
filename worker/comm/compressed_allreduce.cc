#include "worker/comm/compressed_allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dapple::worker {

absl::StatusOr<Compression> ParseCompression(absl::string_view name) {
  if (name.empty() || name == "none") return Compression::kNone;
  if (name == "fp16") return Compression::kFp16;
  if (name == "int8") return Compression::kInt8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compression \"", name, "\" (known: none, fp16, int8)"));
}

absl::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kNone:
      return "none";
    case Compression::kFp16:
      return "fp16";
    case Compression::kInt8:
      return "int8";
  }
  return "unknown";
}

// Bit manipulation instead of _Float16, which not every compiler we build with supports on x86.
uint16_t FloatToHalf(float x) {
  uint32_t f;
  std::memcpy(&f, &x, sizeof(f));
  const uint16_t sign = static_cast<uint16_t>((f >> 16) & 0x8000u);
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (NaN keeps a quiet payload bit)
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  // 65520 = the halfway point between 65504 (the largest half) and 2^16: rounds to inf.
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (abs < 0x38800000u) {
    // Below 2^-14: a half subnormal m * 2^-24. abs as a value: (1.mantissa) * 2^(e - 127).
    if (abs < 0x33000000u) return sign;  // < 2^-25 (half the smallest subnormal): rounds to 0
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // 24 bits, value mantissa * 2^(e-150)
    // m = mantissa * 2^(e - 150 + 24) = mantissa >> (126 - e), rounded to nearest even.
    const uint32_t shift = 126 - exponent;  // 14 .. 24
    uint32_t m = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rest > half || (rest == half && (m & 1u))) ++m;
    return static_cast<uint16_t>(sign | m);  // m == 0x400 is the smallest normal: still right
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 mantissa bits to 10, nearest even; a
  // carry out of the mantissa correctly bumps the exponent (up to inf).
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  uint32_t f;
  if (exponent == 0x1f) {
    f = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    f = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24 is exact in fp32.
    const float value = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -value : value;
  }
  float out;
  std::memcpy(&out, &f, sizeof(out));
  return out;
}

namespace {

absl::Status Fp16AllReduce(Collective& collective, float* data, size_t n) {
  const int members = collective.size();
  std::vector<uint16_t> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = FloatToHalf(data[i]);
  std::vector<uint16_t> all(n * static_cast<size_t>(members));
  if (absl::Status s = collective.AllGather(mine.data(), n * sizeof(uint16_t), all.data());
      !s.ok()) {
    return s;
  }
  // Rank order on every member: the same additions in the same order give the same bits.
  for (size_t i = 0; i < n; ++i) data[i] = HalfToFloat(all[i]);
  for (int r = 1; r < members; ++r) {
    const uint16_t* h = all.data() + static_cast<size_t>(r) * n;
    for (size_t i = 0; i < n; ++i) data[i] += HalfToFloat(h[i]);
  }
  return absl::OkStatus();
}

absl::Status Int8AllReduce(Collective& collective, float* data, size_t n) {
  const int members = collective.size();
  const size_t record = sizeof(float) + n;  // scale, then n int8 values
  std::vector<unsigned char> mine(record);
  float max_abs = 0;
  bool finite = true;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(data[i])) finite = false;
    max_abs = std::max(max_abs, std::fabs(data[i]));
  }
  float scale = finite ? max_abs / 127.0f : std::numeric_limits<float>::quiet_NaN();
  std::memcpy(mine.data(), &scale, sizeof(float));
  auto* q = reinterpret_cast<int8_t*>(mine.data() + sizeof(float));
  if (finite && scale > 0) {
    for (size_t i = 0; i < n; ++i) {
      // x / scale is within [-127, 127] up to one rounding of the division; clamp it there.
      const float v = std::clamp(std::round(data[i] / scale), -127.0f, 127.0f);
      q[i] = static_cast<int8_t>(v);
    }
  } else {
    std::fill(q, q + n, int8_t{0});
  }
  std::vector<unsigned char> all(record * static_cast<size_t>(members));
  if (absl::Status s = collective.AllGather(mine.data(), record, all.data()); !s.ok()) return s;
  for (int r = 0; r < members; ++r) {
    const unsigned char* rec = all.data() + static_cast<size_t>(r) * record;
    float s;
    std::memcpy(&s, rec, sizeof(float));
    const auto* qr = reinterpret_cast<const int8_t*>(rec + sizeof(float));
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(qr[i]) * s;
      data[i] = r == 0 ? v : data[i] + v;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CompressedAllReduce(Collective& collective, Compression compression, float* data,
                                 size_t n) {
  if (data == nullptr && n > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CompressedAllReduce of ", n, " values got a null buffer"));
  }
  switch (compression) {
    case Compression::kNone:
      return collective.AllReduceSum(data, n);
    case Compression::kFp16:
      return Fp16AllReduce(collective, data, n);
    case Compression::kInt8:
      return Int8AllReduce(collective, data, n);
  }
  return absl::InvalidArgumentError("unknown compression");
}

}  // namespace dapple::worker

// image/to_tensor: ToTensor + Normalize of one u8 channel plane into float32, exactly as
// torchvision computes them: x.float().div(255), then .sub_(mean).div_(std), each step rounded
// in float32. A 256-entry table holds the answer for every byte; on AVX2 + FMA, 8 bytes at a time
// are computed instead (a table lookup does not vectorise), with each division done as
// Markstein's correctly rounded multiply-and-correct. That path is used only when it reproduces
// the table for all 256 bytes, checked when the channel is set up.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace stoker {

class PlaneToFloat {
 public:
  PlaneToFloat() : PlaneToFloat(0.0f, 1.0f, false) {}
  // normalize false: ToTensor alone.
  PlaneToFloat(float mean, float std, bool normalize);

  const std::array<float, 256>& table() const { return table_; }
  bool vectorised() const { return vector_; }
  // out[i] = table()[in[i]] for i < n.
  void run(const std::uint8_t* in, std::size_t n, float* out) const;

 private:
  std::array<float, 256> table_{};
  float mean_ = 0.0f, std_ = 1.0f;
  bool vector_ = false;
};

}  // namespace stoker

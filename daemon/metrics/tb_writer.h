// TensorBoard event files: scalars that `tensorboard --logdir` plots, written with no
// TensorFlow or protobuf dependency.
//
//   auto tb = TbWriter::open("runs/tiny/tb");        // runs/tiny/tb/events.out.tfevents.<t>.<host>
//   (*tb)->scalar("train/loss", step, loss, wall_time_seconds);
//   (*tb)->flush();                                    // at the end of a step, or when logging
//
// The format (TensorFlow's TFRecord of tensorflow.Event protos):
//   record  = uint64 length (little-endian) | uint32 masked_crc(length bytes)
//           | data[length] | uint32 masked_crc(data)
//   masked_crc(x) = rotate_right(crc32c(x), 15) + 0xa282ead8   (mod 2^32)
//   Event   = { 1: double wall_time, 2: int64 step, 3: string file_version, 5: Summary }
//   Summary = { repeated 1: Value },  Value = { 1: string tag, 2: float simple_value }
// The first record is Event{wall_time, file_version: "brain.Event:2"}; each scalar is one
// Event with one Value.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "common/status.h"

namespace partrain::metrics {

class TbWriter {
 public:
  // Creates `dir` if needed and a new event file in it (see above). Errors name the path.
  static Result<std::unique_ptr<TbWriter>> open(const std::string& dir);
  ~TbWriter();  // flushes and closes
  TbWriter(const TbWriter&) = delete;
  TbWriter& operator=(const TbWriter&) = delete;

  // Appends one scalar; `wall_time` in seconds since the Unix epoch (fractions kept).
  Status scalar(const std::string& tag, int64_t step, float value, double wall_time);
  // Hands the buffered records to the operating system (TensorBoard reads them then).
  Status flush();
  const std::string& path() const { return path_; }

 private:
  TbWriter() = default;
  Status record(const std::string& data);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The record's checksum: masked CRC-32C as above (exposed for the tests).
uint32_t tb_masked_crc(const void* data, size_t size);

}  // namespace partrain::metrics

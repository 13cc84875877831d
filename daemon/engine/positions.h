// Which positions of each sequence a rank's rows hold. One rank holds the whole sequence:
// local row t is position t. Context parallelism (cp) cuts every sequence of T tokens into
// 2cp chunks of c = T / (2cp) and gives cp rank i chunks i and 2cp-1-i (Megatron-core's
// load balancing: causal attention over an early chunk is cheap, over a late one dear, so
// every rank gets one of each):
//
//   local row t < c   -> position i c + t
//   local row t >= c  -> position (2cp-1-i) c + (t - c)
//
// Worked example: T = 16, cp2 (c = 4): rank 0 holds positions 0-3 and 12-15, rank 1 holds
// 4-7 and 8-11. Rows keep this order, so positions rise with t on every rank (the
// attention kernels rely on it: the keys a query sees are a prefix of each block).
//
// Plain arithmetic, no dependencies: the CPU kernels and the model share it.
#pragma once

// Callable from CUDA kernels too (the cp attention and RoPE kernels take it by value).
#if defined(__CUDACC__)
#define PARTRAIN_POS_HD __host__ __device__
#else
#define PARTRAIN_POS_HD
#endif

namespace partrain::engine {

struct SeqPositions {
  int run = 0;            // rows per chunk; 0 = the whole sequence (row t is position t)
  int first[2] = {0, 0};  // position of each chunk's first row

  PARTRAIN_POS_HD bool whole() const { return run == 0; }
  PARTRAIN_POS_HD int at(int t) const { return run == 0 ? t : t < run ? first[0] + t : first[1] + (t - run); }
  // How many of the rows 0..rows-1 hold a position <= p (they form a prefix: positions rise).
  PARTRAIN_POS_HD int count_upto(int p, int rows) const {
    if (run == 0) return p < 0 ? 0 : p + 1 < rows ? p + 1 : rows;
    auto in_run = [&](int f) { return p < f ? 0 : p - f + 1 < run ? p - f + 1 : run; };
    const int n = in_run(first[0]) + (rows > run ? in_run(first[1]) : 0);
    return n < rows ? n : rows;
  }
};

// The positions cp rank `rank` of `size` holds of a sequence of T tokens (T % (2 size) == 0);
// the whole sequence when size is 1.
inline SeqPositions context_positions(int T, int rank, int size) {
  if (size <= 1) return {};
  const int c = T / (2 * size);
  SeqPositions p;
  p.run = c;
  p.first[0] = rank * c;
  p.first[1] = (2 * size - 1 - rank) * c;
  return p;
}

}  // namespace partrain::engine

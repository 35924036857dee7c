/* rng.h — counter-based random numbers for layout-independent initialisation.
 *
 * Every value is a pure function of (seed, tensor, element index): element i
 * of tensor "h.3.attn.c_attn.weight" is the same number whichever rank
 * computes it and whichever shard it falls in, so every parallel layout starts
 * from identical weights without any rank materialising a full tensor.
 *
 * The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers:
 * as easy as 1, 2, 3", SC11): key = the 64-bit seed, counter = (pair index,
 * tensor id), where the tensor id is the FNV-1a hash of the tensor's name and
 * the pair index is i / 2.  One Philox block gives two 53-bit uniforms u1, u2;
 * Box-Muller turns them into sqrt(-2 ln u1)·cos(2π u2) for the even element of
 * the pair and sqrt(-2 ln u1)·sin(2π u2) for the odd one.  Uniform values use
 * the tensor id xor RNG_UNIFORM_DOMAIN so they never repeat the normal stream.
 *
 * Element indices are row-major over the LOGICAL shape [rows, cols] (a vector
 * is [rows] with cols = 0): element (r, c) is index r·cols + c.  Padding rows
 * (the vocabulary padded for tp) are not part of the logical tensor; callers
 * zero them.
 */
#ifndef SHARDRT_RNG_H
#define SHARDRT_RNG_H

#include <stdint.h>

#define RNG_UNIFORM_DOMAIN 0x9E3779B97F4A7C15ull

/* One Philox4x32-10 block: ctr (4 words) encrypted under key (2 words), in place. */
void rng_philox(uint32_t ctr[4], const uint32_t key[2]);
/* The tensor id: 64-bit FNV-1a of the name. */
uint64_t rng_tensor_id(const char *name);
/* Element i of the standard normal stream of (seed, tensor id). */
double rng_normal_at(uint64_t seed, uint64_t tid, int64_t i);
/* Element i of the uniform [0, 1) stream of (seed, tensor id). */
double rng_uniform_at(uint64_t seed, uint64_t tid, int64_t i);

/* Fills out with the rectangle rows [r0, r1) x cols [c0, c1) of the logical
 * [rows, cols] tensor `tensor` drawn from N(mean, std²), row-major with row
 * stride c1 - c0.  For a vector (cols = 0) pass c0 = 0, c1 = 1: rows are then
 * its elements.  Each element equals the full tensor's element at (r, c). */
void rng_normal_fill(float *out, uint64_t seed, const char *tensor, int64_t cols,
                     int64_t r0, int64_t r1, int64_t c0, int64_t c1, float mean, float std);
/* The same for U[lo, hi). */
void rng_uniform_fill(float *out, uint64_t seed, const char *tensor, int64_t cols,
                      int64_t r0, int64_t r1, int64_t c0, int64_t c1, float lo, float hi);
/* Elements [e0, e1) of the flattened tensor from N(mean, std²): a ZeRO shard
 * of the flat parameter space covering part of a tensor. */
void rng_normal_fill_flat(float *out, uint64_t seed, const char *tensor, int64_t e0, int64_t e1,
                          float mean, float std);
/* The general shard, in ckpt_piece's geometry: elements [f0, f1) (f1 <= f0:
 * all) of the row-major rectangle [r0, r1) x [c0, c1) of the logical
 * [rows, cols] tensor (a vector: cols = 0, c0 = 0, c1 = 1), from N(mean, std²);
 * elements outside the logical shape (the padded vocabulary's rows) are 0.
 * A ZeRO shard of a tp shard that splits columns is such a piece. */
void rng_normal_fill_piece(float *out, uint64_t seed, const char *tensor, int64_t rows,
                           int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                           int64_t f0, int64_t f1, float mean, float std);

#endif

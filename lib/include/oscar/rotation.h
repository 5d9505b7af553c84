// OSCAR rotation algebra: Walsh-Hadamard, bit-reversal permutation, eigenvector signs, composition.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace oscar {

// Sylvester Walsh-Hadamard matrix of order d (a power of two), orthonormal (entries +-1/sqrt(d)),
// natural order, float64. Throws oscar::Error naming d otherwise.
torch::Tensor hadamard_matrix(std::int64_t d);

bool is_power_of_two(std::int64_t d);

// bitrev(i) for i in [0, d): reverses the log2(d) low bits (d = 8: 0 4 2 6 1 5 3 7).
std::vector<std::int64_t> bit_reversal_permutation(std::int64_t d);

// How R is built from the eigenvectors U (columns, eigh order), H and P_br; x_rot = x R.
enum class Composition {
  kRHPbr,  // r_h_pbr: R = U H P (the method's default)
  kR,      // r: R = U
  kRH,     // r_h: R = U H
  kH,      // h: R = H (data-oblivious, QuaRot-style; the eigenvalues are still recorded)
};
Composition parse_composition(const std::string& name);
const char* composition_name(Composition composition);

// Sign convention for eigenvectors (columns of `vectors`, [B, d, d]): each column is negated if
// needed so that its entry of largest magnitude (the first such entry on an exact tie) is positive.
// Eigenvectors are defined up to sign; fixing it makes reruns and backends agree.
torch::Tensor fix_eigenvector_signs(const torch::Tensor& vectors);

// P_br for one head: P = I[:, perm] with perm[bitrev(i)] = idx_desc[i], idx_desc the eigenvalue
// indices from largest to smallest (ties in index order). Returns perm.
std::vector<std::int64_t> bit_reversal_eigen_order(const torch::Tensor& eigenvalues);

// R for a batch of heads: `vectors` [B, d, d] (columns = eigenvectors, in the order of
// `eigenvalues` [B, d]), float64, any device. Result [B, d, d] float64 on the same device.
torch::Tensor compose_rotation(const torch::Tensor& vectors, const torch::Tensor& eigenvalues,
                               Composition composition);

}  // namespace oscar

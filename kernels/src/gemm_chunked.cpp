// The GEMM-based chunked form (src/gemm_chunked.h): LibTorch operations only, so one source runs
// on the CPU (BLAS) and on CUDA (cuBLAS). Names of launch.h: C = kChunk positions per chunk, T
// chunks, B = N T chunk rows, X = M (D + 1) numbers per chunk state.
#include "src/gemm_chunked.h"

#include "src/chunks.h"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>

namespace attnscope::kernels::gemm {
namespace {

using chunks::C;
using chunks::chunked;
using chunks::num_chunks;
using chunks::unchunked;
constexpr int64_t kScanGroup = 16;  // chunks per group of the blocked scan
constexpr double kInf = std::numeric_limits<double>::infinity();

// The GEMMs: operands in `op` (the input dtype; float32 for float16 on the CPU), products and
// everything else in `acc`.
struct Gemm {
  at::ScalarType op, acc;
  explicit Gemm(const at::Tensor& q) {
    const auto dt = q.scalar_type();
    acc = dt == at::kDouble ? at::kDouble : at::kFloat;
    op = (dt == at::kBFloat16 || (dt == at::kHalf && q.is_cuda())) ? dt : acc;
  }
  // x as an operand; an accumulator tensor going to a low-precision operand is divided by a power of
  // two per matrix (its largest magnitude rounded up; *scale gets it), so that float16 holds it.
  at::Tensor operand(const at::Tensor& x, at::Tensor* scale) const {
    if (x.scalar_type() == op || op == acc) return x.to(op);
    *scale = at::exp2(at::ceil(at::log2(x.abs().amax({-2, -1}, /*keepdim=*/true).clamp_min(1e-30))));
    return (x / *scale).to(op);
  }
  // a @ b in acc.
  at::Tensor operator()(const at::Tensor& a, const at::Tensor& b) const {
    at::Tensor sa, sb;
    at::Tensor r = at::matmul(operand(a, &sa), operand(b, &sb)).to(acc);
    if (sa.defined()) r.mul_(sa);
    if (sb.defined()) r.mul_(sb);
    return r;
  }
};

// [N, L] -> [N T, C].
at::Tensor chunked2(const at::Tensor& x, int64_t T, double pad) { return chunked(x.unsqueeze(-1), T, pad).squeeze(-1); }

at::Tensor unchunked2(const at::Tensor& x, int64_t N, int64_t L) { return unchunked(x.unsqueeze(-1), N, L).squeeze(-1); }

// The intra-chunk weights E_ij = exp(ls_j - c_i) for j <= i, 0 above the diagonal and for keys of
// log scale -inf. ls, c [B, C] -> [B, C, C].
at::Tensor intra_weights(const at::Tensor& ls, const at::Tensor& c) {
  const at::Tensor above = at::ones({C, C}, ls.options().dtype(at::kBool)).tril().logical_not();
  return at::exp((ls.unsqueeze(1) - c.unsqueeze(2)).masked_fill_(above | (ls == -kInf).unsqueeze(1), -kInf));
}

// The exclusive prefix over the second dimension, in the log domain: A [N, T, X], each relative
// to its log reference m [N, T] -> P_t = sum_{s<t} exp(m_s - cP_t) A_s relative to cP_t =
// max_{s<t} m_s (-inf for t = 0; P_0 = 0). Sources with m_s = -inf add nothing.
struct Scan {
  at::Tensor P, cP;  // [N, T, X], [N, T]
};
Scan scan_prefix(const at::Tensor& A, const at::Tensor& m) {
  const int64_t N = A.size(0), T = A.size(1), X = A.size(2);
  if (T <= kScanGroup) {
    // One masked weight matrix [T(t), T(s)], nonzero for s < t: a GEMM.
    const at::Tensor cP = at::cat({at::full({N, 1}, -kInf, m.options()), std::get<0>(at::cummax(m, 1)).narrow(1, 0, T - 1)}, 1);
    const at::Tensor not_before = at::ones({T, T}, m.options().dtype(at::kBool)).tril(-1).logical_not();
    const at::Tensor w = at::exp((m.unsqueeze(1) - cP.unsqueeze(2)).masked_fill_(not_before | (m == -kInf).unsqueeze(1), -kInf));
    return {at::matmul(w, A), cP};
  }
  // Groups of G: the prefix within each group, the prefix over the groups' totals (recursively),
  // then each state is the group's carried prefix plus its own, both rescaled to their max.
  const int64_t G = kScanGroup, ng = (T + G - 1) / G, Tp = ng * G;
  const at::Tensor Ap = Tp == T ? A : at::constant_pad_nd(A, {0, 0, 0, Tp - T}, 0);
  const at::Tensor mp = Tp == T ? m : at::constant_pad_nd(m, {0, Tp - T}, -kInf);
  const at::Tensor Ag = Ap.reshape({N * ng, G, X}), mg = mp.reshape({N * ng, G});
  const Scan local = scan_prefix(Ag, mg);
  const at::Tensor top = mg.amax(1, /*keepdim=*/true);                         // [N ng, 1]
  const at::Tensor total = at::matmul(chunks::exp_below(mg, top).unsqueeze(1), Ag);      // [N ng, 1, X]
  const Scan outer = scan_prefix(total.view({N, ng, X}), top.view({N, ng}));
  const at::Tensor cPg = outer.cP.reshape({N * ng, 1});
  const at::Tensor cP = at::maximum(local.cP, cPg);                           // [N ng, G]
  const at::Tensor P = chunks::exp_below(cPg, cP).unsqueeze(-1) * outer.P.reshape({N * ng, 1, X}) +
                       chunks::exp_below(local.cP, cP).unsqueeze(-1) * local.P;
  return {P.reshape({N, Tp, X}).narrow(1, 0, T), cP.reshape({N, Tp}).narrow(1, 0, T)};
}

// The inputs in chunks: q, k [B, C, M] and v1 = [v, 1] [B, C, D + 1] in the input dtype (the ones
// column makes the normalizer one more output column), ls [B, C] in acc. Padded keys have zero
// features and log scale -inf.
struct Chunks {
  int64_t N = 0, L = 0, T = 0, M = 0, D = 0;
  at::Tensor q, k, v1, ls;
};
Chunks chunk_inputs(const Gemm& mm, const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  Chunks x;
  x.N = q.size(0), x.L = q.size(1), x.M = q.size(2), x.D = v.size(2), x.T = num_chunks(x.L);
  x.q = chunked(q, x.T, 0);
  x.k = chunked(k, x.T, 0);
  x.v1 = chunked(at::cat({v, at::ones_like(v.narrow(-1, 0, 1))}, -1), x.T, 0);
  x.ls = chunked2(ls.to(mm.acc), x.T, -kInf);
  return x;
}

// The chunk states A_t = K_t^T diag(exp(ls - m_t)) [V, 1] (m_t the chunk's largest key scale) and
// their exclusive prefix: P [B, M, D+1] relative to cP [B].
Scan prefix_states(const Gemm& mm, const Chunks& x) {
  const at::Tensor m = x.ls.amax(-1, /*keepdim=*/true);                                    // [B, 1]
  const at::Tensor A = mm((x.k.to(mm.acc) * chunks::exp_below(x.ls, m).unsqueeze(-1)).transpose(1, 2), x.v1);  // [B, M, D+1]
  const int64_t X = x.M * (x.D + 1);
  const Scan s = scan_prefix(A.reshape({x.N, x.T, X}), m.reshape({x.N, x.T}));
  return {s.P.reshape({x.N * x.T, x.M, x.D + 1}), s.cP.reshape({x.N * x.T})};
}

}  // namespace

cpu::Forward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  const Gemm mm(q);
  const Chunks x = chunk_inputs(mm, q, k, ls, v);
  const int64_t D = x.D;
  const Scan pre = prefix_states(mm, x);
  // c_i: the carried max or a key of this chunk up to i.
  const at::Tensor c = at::maximum(std::get<0>(at::cummax(x.ls, -1)), pre.cP.unsqueeze(-1));  // [B, C]
  // num'_i = sum_{j in t, j<=i} (q_i.k_j) E_ij [v_j, 1] + exp(cP_t - c_i) P_t^T q_i.
  const at::Tensor w = mm(x.q, x.k.transpose(1, 2)).mul_(intra_weights(x.ls, c));
  const at::Tensor num = mm(w, x.v1).add_(chunks::exp_below(pre.cP.unsqueeze(-1), c).unsqueeze(-1) * mm(x.q, pre.P));
  const at::Tensor den = num.select(-1, D);
  // A row with no weight is 0/0: NaN (linear_attention.h).
  const at::Tensor none = (den == 0).unsqueeze(-1);
  const at::Tensor y = at::where(none, at::full({}, std::nan(""), num.options()),
                                 num.narrow(-1, 0, D) / at::where(none, at::ones_like(den).unsqueeze(-1), den.unsqueeze(-1)));
  return {unchunked(y.to(q.scalar_type()), x.N, x.L), unchunked2(den, x.N, x.L), unchunked2(c, x.N, x.L)};
}

cpu::Backward backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                       const cpu::Forward& saved, const at::Tensor& gy_in, const at::Tensor& glse) {
  const Gemm mm(q);
  const auto acc = mm.acc;
  // g'_i = [gy_i / den_i, (-(gy_i . y_i) + h_i [den_i > 0]) / den_i], 0 on rows with den_i = 0.
  const at::Tensor den = saved.den.to(acc).unsqueeze(-1), gy = gy_in.to(acc);
  const at::Tensor defined = den != 0;
  const at::Tensor inv = at::where(defined, 1 / at::where(defined, den, at::ones_like(den)), at::zeros_like(den));
  const at::Tensor y0 = at::where(defined, saved.y.to(acc), at::zeros({}, gy.options()));
  at::Tensor last = -(gy * y0).sum(-1, /*keepdim=*/true);  // [N, L, 1]
  if (glse.defined())  // where: a NaN or inf h of a -inf row stays out
    last = last + at::where(den > 0, glse.to(acc).unsqueeze(-1), at::zeros_like(last));
  const at::Tensor gp = at::cat({gy * inv, last * inv}, -1);  // [N, L, D+1]

  const Chunks x = chunk_inputs(mm, q, k, ls, v);
  const int64_t N = x.N, T = x.T, L = x.L, D = x.D, X = x.M * (D + 1);
  const at::Tensor g = chunked(gp, T, 0);                       // [B, C, D+1]
  // Padded queries read nothing (c = +inf: every weight 0; their g' is 0 as well).
  const at::Tensor c = chunked2(saved.c.to(acc), T, kInf);      // [B, C]
  const Scan pre = prefix_states(mm, x);
  const at::Tensor e = intra_weights(x.ls, c);
  const at::Tensor w = mm(x.q, x.k.transpose(1, 2)).mul_(e);    // w_ij
  const at::Tensor pm = mm(g, x.v1.transpose(1, 2)).mul_(e);    // dL/dw_ij E_ij
  // Queries: the intra block plus the state before the chunk.
  const at::Tensor dq = mm(pm, x.k).add_(chunks::exp_below(pre.cP.unsqueeze(-1), c).unsqueeze(-1) * mm(g, pre.P.transpose(1, 2)));

  // Keys: the suffix over later chunks. B_u = sum_{i in u} exp(a_u - c_i) q_i g'_i^T relative to
  // a_u = c at u's first query; R_t = sum_{u>t} exp(r_t - a_u) B_u relative to r_t = a_{t+1}
  // (for the last chunk, whose R is 0, c at the last position). In reversed chunk order R is an
  // exclusive prefix with log references -a_u (a_u = -inf: B_u = 0, no source).
  const at::Tensor a = c.select(-1, 0).reshape({N, T});  // [N, T]
  const at::Tensor Bu = mm((x.q.to(acc) * chunks::exp_below(a.reshape({N * T, 1}), c).unsqueeze(-1)).transpose(1, 2), g);
  const at::Tensor r = at::cat({a.narrow(1, 1, T - 1), saved.c.to(acc).narrow(1, L - 1, 1)}, 1);  // [N, T]
  const Scan rev = scan_prefix(Bu.reshape({N, T, X}).flip(1), (-a).masked_fill_(a == -kInf, -kInf).flip(1));
  // R_t = exp(r_t + cP'_t) R'_t, cP'_t = max_{u>t} -a_u <= -r_t.
  const at::Tensor R = (chunks::exp_below(r, -rev.cP.flip(1)).unsqueeze(-1) * rev.P.flip(1)).reshape({N * T, x.M, D + 1});
  const at::Tensor key_scale = chunks::exp_below(x.ls, r.reshape({N * T, 1})).unsqueeze(-1);  // exp(ls_j - r_t) [B, C, 1]
  const at::Tensor dk = mm(pm.transpose(1, 2), x.q).add_(key_scale * mm(x.v1, R.transpose(1, 2)));
  const at::Tensor dv = mm(w.transpose(1, 2), g.narrow(-1, 0, D)).add_(key_scale * mm(x.k, R.narrow(-1, 0, D)));

  cpu::Backward out;
  const auto dt = q.scalar_type();
  const at::Tensor dk_acc = unchunked(dk, N, L);
  out.dq = unchunked(dq, N, L).to(dt);
  out.dk = dk_acc.to(dt);
  out.dv = unchunked(dv, N, L).to(dt);
  out.dls = (k.to(acc) * dk_acc).sum(-1).to(dt);  // dL/dls_j = sum_i dL/dw_ij w_ij = k_j . dk_j
  return out;
}

}  // namespace attnscope::kernels::gemm

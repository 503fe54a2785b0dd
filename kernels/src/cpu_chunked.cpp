// CPU kernels of causal linear attention in the chunked form (cuda/launch.h has the equations).
//
// The four products of every chunk (Q K^T, W [V, 1], Q P_t, K^T [V, 1]; and their mirrors in the
// backward pass) run as batched GEMMs over blocks of chunks (at::bmm: BLAS), the blocks in parallel
// over batch x heads x chunks. What is not a product is a plain loop: the scans over chunks
// (parallel over batch x heads, sequential over chunks) and the causal, log-scaled weights of the
// intra-chunk block. Memory: the chunk states, (L / C) M (D + 1) per head, and a few C x C blocks
// per chunk of a block in flight, never the [L, M, D] prefix states of a cumsum.
#include "src/cpu_chunked.h"

#include "src/chunks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnscope::kernels::cpu {
namespace {

using chunks::C;
using chunks::chunked;
using chunks::exp_below;
using chunks::num_chunks;
using chunks::unchunked;

// Calls f(first, count) over [0, chunks) in blocks of kBlock chunks, the blocks in parallel: a
// block's temporaries (three C x C blocks per chunk) stay in a core's cache, where one pass over
// all chunks at once would stream them through memory at long L.
constexpr int64_t kBlock = 16;
template <typename F>
void for_blocks(int64_t chunks, const F& f) {
  at::parallel_for(0, (chunks + kBlock - 1) / kBlock, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) f(b * kBlock, std::min(kBlock, chunks - b * kBlock));
  });
}

// The inputs in chunks, B = N T rows of C positions: q, k [B, C, M], v1 = [v, 1] [B, C, D + 1] (the
// ones column turns the normalizer into one more output column), ls [B, C]. Padded keys have zero
// features and log scale -inf: they weigh exp(-inf) = 0.
struct Chunks {
  int64_t N = 0, T = 0, L = 0;
  at::Tensor q, k, v1, ls;
};
Chunks chunk_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  Chunks x;
  x.N = q.size(0), x.L = q.size(1), x.T = num_chunks(x.L);
  x.q = chunked(q, x.T, 0);
  x.k = chunked(k, x.T, 0);
  x.v1 = chunked(at::cat({v, at::ones_like(v.narrow(-1, 0, 1))}, -1), x.T, 0);
  x.ls = chunked(ls.unsqueeze(-1), x.T, -std::numeric_limits<double>::infinity()).squeeze(-1);
  return x;
}

// chunks::exp_below for the scalar loops below.
template <typename T>
T exp_below(T a, T b) {
  return a == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(a - b);
}

// The intra-chunk weights E_ij = exp(ls_j - c_i) for j <= i, 0 above the diagonal. ls, c [B, C]
// -> [B, C, C]. Every exponent is <= 0 (c_i is the max over j <= i). The exponents are written
// in one pass (-inf above the diagonal), then exponentiated in place by LibTorch's vectorized exp.
template <typename T>
void intra_exponents(const T* ls, const T* c, T* e, int64_t blocks) {
  at::parallel_for(0, blocks, 16, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const T* l = ls + b * C;
      for (int64_t i = 0; i < C; ++i) {
        T* row = e + (b * C + i) * C;
        const T ci = c[b * C + i];
        for (int64_t j = 0; j <= i; ++j) row[j] = l[j] == -std::numeric_limits<T>::infinity() ? l[j] : l[j] - ci;
        for (int64_t j = i + 1; j < C; ++j) row[j] = -std::numeric_limits<T>::infinity();
      }
    }
  });
}

at::Tensor intra_weights(const at::Tensor& ls, const at::Tensor& c) {
  at::Tensor e = at::empty({ls.size(0), C, C}, ls.options());
  AT_DISPATCH_FLOATING_TYPES(ls.scalar_type(), "intra_weights", [&] {
    intra_exponents<scalar_t>(ls.data_ptr<scalar_t>(), c.data_ptr<scalar_t>(), e.data_ptr<scalar_t>(), ls.numel() / C);
  });
  return e.exp_();
}

// In place over the chunk states a [N, T, X] (chunk t's relative to its own max m_t [N, T]): each
// becomes P_t, the sum over the chunks before t, relative to cP_t (written to cp [N, T]; -inf for
// t = 0), the running max, rescaled as it grows (online softmax's rule).
template <typename T>
void exclusive_prefix(T* a, const T* m, T* cp, int64_t N, int64_t nT, int64_t X) {
  at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<T> run(X);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(run.begin(), run.end(), T(0));
      T c = -std::numeric_limits<T>::infinity();
      for (int64_t t = 0; t < nT; ++t) {
        T* at_t = a + (n * nT + t) * X;
        const T mt = m[n * nT + t], cn = std::max(c, mt);
        const T keep = exp_below(c, cn), add = exp_below(mt, cn);  // keep = 0 before the first chunk
        for (int64_t x = 0; x < X; ++x) {
          const T own = at_t[x];
          at_t[x] = run[x];
          run[x] = keep * run[x] + add * own;
        }
        cp[n * nT + t] = c;
        c = cn;
      }
    }
  });
}

// The mirror image for the key gradients: in place over b [N, T, X] (chunk u's B_u relative to r
// of the chunk before, r_{u-1}), each becomes R_t = the sum over the chunks after t, relative to
// r_t [N, T] (+inf for the last chunk, whose R is 0).
template <typename T>
void exclusive_suffix(T* b, const T* r, int64_t N, int64_t nT, int64_t X) {
  at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<T> run(X);
    for (int64_t n = n0; n < n1; ++n) {
      std::fill(run.begin(), run.end(), T(0));
      for (int64_t t = nT - 1; t >= 0; --t) {
        T* at_t = b + (n * nT + t) * X;
        // R_{t-1} = exp(r_{t-1} - r_t) R_t + B_t; for the last chunk exp(r_{t-1} - inf) = 0.
        const T keep = t > 0 ? exp_below(r[n * nT + t - 1], r[n * nT + t]) : T(0);
        for (int64_t x = 0; x < X; ++x) {
          const T own = at_t[x];
          at_t[x] = run[x];
          run[x] = keep * run[x] + own;
        }
      }
    }
  });
}

// Chunk states and their exclusive prefix: P [B, M, D+1], cP [B].
struct Prefix {
  at::Tensor P, cP;
};
Prefix prefix_states(const Chunks& x) {
  const at::Tensor m = std::get<0>(x.ls.max(-1)).contiguous();  // [B]
  const at::Tensor scale = exp_below(x.ls, m.unsqueeze(-1)).unsqueeze(-1);  // exp(ls_j - m_t) <= 1
  const int64_t B = x.N * x.T;
  Prefix p{at::empty({B, x.k.size(2), x.v1.size(2)}, x.k.options()), at::empty_like(m)};
  for_blocks(B, [&](int64_t b, int64_t len) {
    at::Tensor out = p.P.narrow(0, b, len);
    at::bmm_out(out, (x.k.narrow(0, b, len) * scale.narrow(0, b, len)).transpose(1, 2), x.v1.narrow(0, b, len));
  });
  AT_DISPATCH_FLOATING_TYPES(x.k.scalar_type(), "exclusive_prefix", [&] {
    exclusive_prefix<scalar_t>(p.P.data_ptr<scalar_t>(), m.data_ptr<scalar_t>(), p.cP.data_ptr<scalar_t>(), x.N,
                               x.T, p.P.size(1) * p.P.size(2));
  });
  return p;
}

// exp(cP_t - c_i) <= 1 [B, C, 1]: how query i of chunk t reads the state before its chunk.
at::Tensor carried_scale(const Prefix& p, const at::Tensor& c) {
  return exp_below(p.cP.unsqueeze(-1), c).unsqueeze(-1);
}

}  // namespace

Forward forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v) {
  const Chunks x = chunk_inputs(q, k, ls, v);
  const int64_t B = x.N * x.T, D = v.size(2);
  const Prefix p = prefix_states(x);
  // c_i: the carried max or a key of this chunk up to i.
  const at::Tensor c = at::maximum(std::get<0>(at::cummax(x.ls, -1)), p.cP.unsqueeze(-1)).contiguous();
  const at::Tensor carried = carried_scale(p, c);
  // The outputs, a block of chunks at a time so that each block's C x C weights stay in cache: each
  // block writes its rows of y and den, num' = W [V, 1] + diag(exp(cP_t - c)) Q P_t lives only per
  // block. A row with no weight is 0/0: NaN, as linear_attention.h says (not a division by 0 of a
  // nonzero).
  at::Tensor y = at::empty({B, C, D}, q.options()), den = at::empty({B, C}, q.options());
  const at::Tensor nan = at::full({}, std::nan(""), q.options());
  for_blocks(B, [&](int64_t b, int64_t len) {
    auto at_block = [&](const at::Tensor& t) { return t.narrow(0, b, len); };
    const at::Tensor w = at::bmm(at_block(x.q), at_block(x.k).transpose(1, 2)).mul_(intra_weights(at_block(x.ls), at_block(c)));
    const at::Tensor num = at::bmm(w, at_block(x.v1)).add_(at::bmm(at_block(x.q) * at_block(carried), at_block(p.P)));
    const at::Tensor dn = num.select(-1, D);
    at_block(den).copy_(dn);
    const at::Tensor none = (dn == 0).unsqueeze(-1);
    at_block(y).copy_(at::where(none, nan, num.narrow(-1, 0, D) / at::where(none, at::ones_like(dn).unsqueeze(-1), dn.unsqueeze(-1))));
  });
  Forward f;
  f.y = unchunked(y, x.N, x.L);
  f.den = unchunked(den.unsqueeze(-1), x.N, x.L).squeeze(-1);
  f.c = unchunked(c.unsqueeze(-1), x.N, x.L).squeeze(-1);
  return f;
}

Backward backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls, const at::Tensor& v,
                  const Forward& saved, const at::Tensor& gy, const at::Tensor& glse) {
  const int64_t M = q.size(2), D = v.size(2), D1 = D + 1;
  const double inf = std::numeric_limits<double>::infinity();
  // g'_i = [gy_i / den_i, (-(gy_i . y_i) + h_i) / den_i]: dL/dw_ij = g'_i . [v_j, 1], with h_i the
  // gradient of lse_i (dlse_i/dw_ij = 1/den_i), counted only where den_i > 0 (lse_i = -inf
  // elsewhere). Undefined rows (den_i = 0): 0.
  const at::Tensor defined = (saved.den != 0).unsqueeze(-1);
  const at::Tensor inv = at::where(defined, 1 / at::where(defined, saved.den.unsqueeze(-1), at::ones_like(saved.den).unsqueeze(-1)),
                                   at::zeros_like(saved.den).unsqueeze(-1));
  const at::Tensor y0 = at::where(defined, saved.y, at::zeros_like(saved.y));
  at::Tensor last = -(gy * y0).sum(-1, /*keepdim=*/true);  // [N, L, 1]
  if (glse.defined()) {
    const at::Tensor positive = (saved.den > 0).unsqueeze(-1);
    last = last + at::where(positive, glse.unsqueeze(-1), at::zeros_like(last));  // where: a NaN or inf h of a -inf row stays out
  }
  const at::Tensor gp = at::cat({gy * inv, last * inv}, -1);  // [N, L, D+1]

  const Chunks x = chunk_inputs(q, k, ls, v);
  const int64_t N = x.N, T = x.T, B = N * T;
  const at::Tensor g = chunked(gp, T, 0);  // [B, C, D+1]
  // Padded queries read nothing (c = +inf: every weight exp(ls - inf) = 0; their g' is 0 anyway).
  const at::Tensor c = chunked(saved.c.unsqueeze(-1), T, inf).squeeze(-1).contiguous();  // [B, C]
  const Prefix p = prefix_states(x);
  // Keys and values read the suffix over later chunks, R_t relative to r_t = c at the first query
  // after chunk t: the chunk sums B_u first, then the scan.
  const at::Tensor cfirst = c.select(-1, 0);  // [B]
  at::Tensor R = at::bmm((x.q * exp_below(cfirst.unsqueeze(-1), c).unsqueeze(-1)).transpose(1, 2), g).contiguous();
  const at::Tensor r = at::cat({cfirst.view({N, T}).narrow(1, 1, T - 1), at::full({N, 1}, inf, c.options())}, 1).contiguous();
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "exclusive_suffix", [&] {
    exclusive_suffix<scalar_t>(R.data_ptr<scalar_t>(), r.data_ptr<scalar_t>(), N, T, M * D1);
  });

  // Then each block of chunks: its C x C blocks W = (Q K^T) E and Pm = (G' [V, 1]^T) E (dL/dw_ij
  // E_ij) live only while the block writes its rows of dq, dk and dv.
  const at::Tensor carried = carried_scale(p, c);
  const at::Tensor key_scale = exp_below(x.ls, r.view({B, 1})).unsqueeze(-1);  // exp(ls_j - r_t) <= 1
  at::Tensor dq = at::empty({B, C, M}, q.options()), dk = at::empty({B, C, M}, q.options());
  at::Tensor dv = at::empty({B, C, D}, q.options());
  for_blocks(B, [&](int64_t b, int64_t len) {
    auto at_block = [&](const at::Tensor& t) { return t.narrow(0, b, len); };
    const at::Tensor e = intra_weights(at_block(x.ls), at_block(c));
    const at::Tensor w = at::bmm(at_block(x.q), at_block(x.k).transpose(1, 2)).mul_(e);
    const at::Tensor pm = at::bmm(at_block(g), at_block(x.v1).transpose(1, 2)).mul_(e);
    // Queries: the intra block plus the state before the chunk.
    at::Tensor dqb = at_block(dq), dkb = at_block(dk), dvb = at_block(dv);
    at::bmm_out(dqb, pm, at_block(x.k));
    dqb.add_(at::bmm(at_block(g) * at_block(carried), at_block(p.P).transpose(1, 2)));
    // Keys and values: the intra block plus the suffix.
    at::bmm_out(dkb, pm.transpose(1, 2), at_block(x.q));
    dkb.add_(at::bmm(at_block(x.v1) * at_block(key_scale), at_block(R).transpose(1, 2)));
    at::bmm_out(dvb, w.transpose(1, 2), at_block(g).narrow(-1, 0, D));
    dvb.add_(at::bmm(at_block(x.k) * at_block(key_scale), at_block(R).narrow(-1, 0, D)));
  });
  Backward out;
  out.dq = unchunked(dq, N, x.L);
  out.dk = unchunked(dk, N, x.L);
  out.dv = unchunked(dv, N, x.L);
  out.dls = (k * out.dk).sum(-1);  // dL/dls_j = sum_i dL/dw_ij w_ij = k_j . dk_j
  return out;
}

namespace {

// One head's running sums S [M, D], z [M] relative to c = the largest key log scale so far: adds key
// k [M] of log scale ls with value v [D] (c' = max(c, ls), the old sums scaled by exp(c - c')).
template <typename T>
void add_key(T* S, T* z, T& c, const T* k, T ls, const T* v, int64_t M, int64_t D) {
  const T cn = std::max(c, ls);
  const T keep = exp_below(c, cn), add = exp_below(ls, cn);
  c = cn;
  for (int64_t m = 0; m < M; ++m) {
    const T km = add * k[m];
    T* row = S + m * D;
    for (int64_t d = 0; d < D; ++d) row[d] = keep * row[d] + km * v[d];
    z[m] = keep * z[m] + km;
  }
}

// The sums read through query q [M]: num = q^T S [D], returns den = q . z.
template <typename T>
T read_sums(const T* S, const T* z, const T* q, int64_t M, int64_t D, std::vector<T>& num) {
  std::fill(num.begin(), num.end(), T(0));
  T den = 0;
  for (int64_t m = 0; m < M; ++m) {
    den += q[m] * z[m];
    const T* row = S + m * D;
    for (int64_t d = 0; d < D; ++d) num[size_t(d)] += q[m] * row[d];
  }
  return den;
}

}  // namespace

at::Tensor recurrent_step(RecurrentState& st, const at::Tensor& q, const at::Tensor& k, const at::Tensor& ls,
                          const at::Tensor& v, at::Tensor* lse) {
  const int64_t N = q.size(0), M = q.size(1), D = v.size(1);
  at::Tensor y = at::empty({N, D}, q.options());
  if (lse) *lse = at::empty({N}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "recurrent_step", [&] {
    scalar_t *S = st.S.data_ptr<scalar_t>(), *z = st.z.data_ptr<scalar_t>(), *c = st.c.data_ptr<scalar_t>();
    const scalar_t *qp = q.data_ptr<scalar_t>(), *kp = k.data_ptr<scalar_t>(), *lp = ls.data_ptr<scalar_t>(),
                   *vp = v.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    scalar_t* lsep = lse ? lse->data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<scalar_t> num(static_cast<size_t>(D));
      for (int64_t n = n0; n < n1; ++n) {
        add_key(S + n * M * D, z + n * M, c[n], kp + n * M, lp[n], vp + n * D, M, D);
        const scalar_t den = read_sums(S + n * M * D, z + n * M, qp + n * M, M, D, num);
        for (int64_t d = 0; d < D; ++d) yp[n * D + d] = den == 0 ? scalar_t(NAN) : num[size_t(d)] / den;
        if (lsep) lsep[n] = den > 0 ? c[n] + std::log(den) : -std::numeric_limits<scalar_t>::infinity();
      }
    });
  });
  return y;
}

void hybrid_step(HybridState& st, int64_t W, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                 const at::Tensor& features, const at::Tensor& log_scales, const at::Tensor& gamma, const at::Tensor& lambda,
                 at::Tensor& y) {
  const int64_t D = q.size(-1), N = q.numel() / D, M = features.size(-1), pos = st.n;
  const int64_t slot = pos % W, held = std::min(pos + 1, W);  // after this token: slots 0 .. held - 1
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "hybrid_step", [&] {
    using T = scalar_t;
    constexpr T ninf = -std::numeric_limits<T>::infinity();
    T *S = st.sums.S.data_ptr<T>(), *z = st.sums.z.data_ptr<T>(), *c = st.sums.c.data_ptr<T>();
    T *rk = st.k.data_ptr<T>(), *rv = st.v.data_ptr<T>(), *rf = st.fk.data_ptr<T>(), *rl = st.ls.data_ptr<T>();
    const T *qp = q.data_ptr<T>(), *kp = k.data_ptr<T>(), *vp = v.data_ptr<T>(), *fp = features.data_ptr<T>(),
            *lsp = log_scales.data_ptr<T>(), *gp = gamma.data_ptr<T>();
    const T* lamp = lambda.defined() ? lambda.data_ptr<T>() : nullptr;
    T* yp = y.data_ptr<T>();
    const T scale = T(1) / std::sqrt(T(D));
    // log sigmoid(x) = min(x, 0) - log1p(exp(-|x|)): no overflow at either end.
    const auto log_sigmoid = [](T x) { return std::min(x, T(0)) - std::log1p(std::exp(-std::abs(x))); };
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      std::vector<T> num(static_cast<size_t>(D)), win(static_cast<size_t>(D)), s(static_cast<size_t>(W));
      for (int64_t n = n0; n < n1; ++n) {
        T* Sn = S + n * M * D;
        T* zn = z + n * M;
        T *kr = rk + n * W * D, *vr = rv + n * W * D, *fr = rf + n * W * M, *lr = rl + n * W;
        // 1. The token at pos - W leaves the ring (slot pos % W) into the sums.
        if (pos >= W) add_key(Sn, zn, c[n], fr + slot * M, lr[slot], vr + slot * D, M, D);
        // 2. This token takes the slot (its key's log scale less Lambda_n).
        const T lam = lamp ? lamp[n] : T(0);
        std::copy(kp + n * D, kp + (n + 1) * D, kr + slot * D);
        std::copy(vp + n * D, vp + (n + 1) * D, vr + slot * D);
        std::copy(fp + (2 * n + 1) * M, fp + (2 * n + 2) * M, fr + slot * M);
        lr[slot] = lsp[2 * n + 1] - lam;
        // 3. The linear part: the sums read through the query's features.
        const T den = read_sums(Sn, zn, fp + 2 * n * M, M, D, num);
        const T lse_l = den > 0 ? c[n] + std::log(den) + lsp[2 * n] + lam : ninf;
        // 4. The window part: softmax over the held slots (order does not matter to softmax).
        const T* qn = qp + n * D;
        T mx = ninf;
        for (int64_t j = 0; j < held; ++j) {
          T dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qn[d] * kr[j * D + d];
          s[size_t(j)] = dot * scale;
          mx = std::max(mx, s[size_t(j)]);
        }
        std::fill(win.begin(), win.end(), T(0));
        T Z = 0;
        for (int64_t j = 0; j < held; ++j) {
          const T e = std::exp(s[size_t(j)] - mx);
          Z += e;
          for (int64_t d = 0; d < D; ++d) win[size_t(d)] += e * vr[j * D + d];
        }
        const T lse_w = mx + std::log(Z);
        // 5. One normalizer over both parts, balance sigmoid(gamma).
        const T a = lse_l + log_sigmoid(-gp[n]), b = lse_w + log_sigmoid(gp[n]);
        const T top = std::max(a, b);
        const T ea = a == ninf ? T(0) : std::exp(a - top), eb = std::exp(b - top);
        for (int64_t d = 0; d < D; ++d) {
          const T lin = ea == 0 ? T(0) : ea * num[size_t(d)] / den;
          yp[n * D + d] = (lin + eb * win[size_t(d)] / Z) / (ea + eb);
        }
      }
    });
  });
  ++st.n;
}

}  // namespace attnscope::kernels::cpu

#include "model/ops.hpp"

#include <Eigen/Core>
#include <tbb/parallel_for.h>
#include <algorithm>
#include <cmath>
#include <vector>

namespace het::model {

namespace {
template <class T>
using Mat = Eigen::Map<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <class T>
using CMat = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
constexpr double kEps = 1e-5;

// GEMMs run as independent tasks over fixed blocks of output rows (oneTBB); the blocks do
// not depend on the number of threads, so neither do the results.
constexpr int kRowBlock = 64;
template <class F>
void for_row_blocks(int rows, std::int64_t work, F&& f) {
  if (work < (std::int64_t(1) << 18) || rows <= kRowBlock) return f(0, rows);  // too small to be worth a task
  tbb::parallel_for(0, (rows + kRowBlock - 1) / kRowBlock, [&](int blk) { f(blk * kRowBlock, std::min(rows, (blk + 1) * kRowBlock)); });
}
}  // namespace

template <class T>
void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC) {
  for_row_blocks(N, std::int64_t(N) * C * OC, [&](int lo, int hi) {
    Mat<T> o(out + std::int64_t(lo) * OC, hi - lo, OC);
    o.noalias() = CMat<T>(inp + std::int64_t(lo) * C, hi - lo, C) * CMat<T>(w, OC, C).transpose();
    if (b) o.rowwise() += Eigen::Map<const Eigen::Matrix<T, 1, Eigen::Dynamic>>(b, OC);
  });
}

template <class T>
void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C, int OC) {
  CMat<T> d(dout, N, OC);
  const std::int64_t work = std::int64_t(N) * C * OC;
  if (dinp)
    for_row_blocks(N, work, [&](int lo, int hi) {
      Mat<T>(dinp + std::int64_t(lo) * C, hi - lo, C).noalias() +=
          CMat<T>(dout + std::int64_t(lo) * OC, hi - lo, OC) * CMat<T>(w, OC, C);
    });
  if (dw)
    for_row_blocks(OC, work, [&](int lo, int hi) {
      Mat<T>(dw + std::int64_t(lo) * C, hi - lo, C).noalias() += d.middleCols(lo, hi - lo).transpose() * CMat<T>(inp, N, C);
    });
  if (db) Eigen::Map<Eigen::Matrix<T, 1, Eigen::Dynamic>>(db, OC) += d.colwise().sum();
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::int64_t(n) * C;
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const double s = 1 / std::sqrt(v + kEps);
    T* o = out + std::int64_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = T((x[c] - m) * s * w[c] + b[c]);
    mean[n] = T(m), rstd[n] = T(s);
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean, const T* rstd,
                        int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::int64_t(n) * C;
    const T* d = dout + std::int64_t(n) * C;
    T* dx = dinp + std::int64_t(n) * C;
    double dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int c = 0; c < C; ++c) {
      const double norm = (x[c] - mean[n]) * rstd[n];
      const double dnorm = double(w[c]) * d[c];
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= C, dnorm_norm_mean /= C;
    for (int c = 0; c < C; ++c) {
      const double norm = (x[c] - mean[n]) * rstd[n];
      const double dnorm = double(w[c]) * d[c];
      db[c] += d[c];
      dw[c] += T(norm * d[c]);
      dx[c] += T((dnorm - dnorm_mean - norm * dnorm_norm_mean) * rstd[n]);
    }
  }
}

template <class T>
void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::int64_t(n) * C;
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += double(x[c]) * x[c];
    const double s = 1 / std::sqrt(ss / C + kEps);
    T* o = out + std::int64_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = T(x[c] * s * w[c]);
    rstd[n] = T(s);
  }
}

template <class T>
void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::int64_t(n) * C;
    const T* d = dout + std::int64_t(n) * C;
    T* dx = dinp + std::int64_t(n) * C;
    const double s = rstd[n];
    double dot = 0;  // Σ_c d_c w_c x_c
    for (int c = 0; c < C; ++c) dot += double(d[c]) * w[c] * x[c];
    for (int c = 0; c < C; ++c) {
      dw[c] += T(d[c] * x[c] * s);
      dx[c] += T(s * (double(d[c]) * w[c] - x[c] * s * s * dot / C));
    }
  }
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2/pi)
}

template <class T>
void gelu_forward(T* out, const T* inp, int n) {
  for (int i = 0; i < n; ++i) {
    const double x = inp[i];
    out[i] = T(0.5 * x * (1 + std::tanh(kGeluScale * (x + 0.044715 * x * x * x))));
  }
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, int n) {
  for (int i = 0; i < n; ++i) {
    const double x = inp[i];
    const double u = kGeluScale * (x + 0.044715 * x * x * x);
    const double th = std::tanh(u);
    const double sech2 = 1 - th * th;
    const double grad = 0.5 * (1 + th) + 0.5 * x * sech2 * kGeluScale * (1 + 3 * 0.044715 * x * x);
    dinp[i] += T(grad * dout[i]);
  }
}

template <class T>
void swiglu_forward(T* out, const T* gate, const T* up, int n) {
  for (int i = 0; i < n; ++i) {
    const double g = gate[i], sig = 1 / (1 + std::exp(-g));
    out[i] = T(g * sig * up[i]);
  }
}

template <class T>
void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int n) {
  for (int i = 0; i < n; ++i) {
    const double g = gate[i], sig = 1 / (1 + std::exp(-g));
    dup[i] += T(g * sig * dout[i]);
    dgate[i] += T(double(up[i]) * dout[i] * sig * (1 + g * (1 - sig)));
  }
}

namespace {
template <class T>
void rope_rotate(T* x, int B, int Tn, int H, int D, int pos0, double sign) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int h = 0; h < H; ++h) {
        T* v = x + ((std::int64_t(b) * Tn + t) * H + h) * D;
        for (int i = 0; i < D / 2; ++i) {
          const double angle = sign * (pos0 + t) * std::pow(10000.0, -2.0 * i / D);
          const double c = std::cos(angle), s = std::sin(angle);
          const double a = v[2 * i], bb = v[2 * i + 1];
          v[2 * i] = T(a * c - bb * s);
          v[2 * i + 1] = T(a * s + bb * c);
        }
      }
}
}  // namespace

template <class T>
void rope_forward(T* x, int B, int Tn, int H, int D, int pos0) {
  rope_rotate(x, B, Tn, H, D, pos0, 1);
}
template <class T>
void rope_backward(T* dx, int B, int Tn, int H, int D, int pos0) {
  rope_rotate(dx, B, Tn, H, D, pos0, -1);  // the rotation is orthogonal: its transpose is the inverse
}

// Both attention passes run one task per (sequence, key/value head): a task owns the dk, dv
// rows of its kv head and the dq rows of that head's query group, so no two tasks write the
// same element and the result does not depend on the number of threads.
template <class T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int q0, int H, int KH,
                       int D) {
  const double scale = 1 / std::sqrt(double(D));
  const int group = H / KH;
  tbb::parallel_for(0, B * KH, [&](int task) {
    const int b = task / KH, kh = task % KH;
    for (int h = kh * group; h < (kh + 1) * group; ++h)
      for (int t = 0; t < Tq; ++t) {
        const int visible = std::min(Tk, q0 + t + 1);  // keys s < visible
        const T* qt = q + ((std::int64_t(b) * Tq + t) * H + h) * D;
        T* a = att + ((std::int64_t(b) * H + h) * Tq + t) * Tk;
        double mx = -1e300;
        for (int s = 0; s < visible; ++s) {
          const T* ks = k + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += double(qt[d]) * ks[d];
          a[s] = T(dot * scale);
          mx = std::max(mx, double(a[s]));
        }
        double sum = 0;
        for (int s = 0; s < visible; ++s) {
          const double e = std::exp(double(a[s]) - mx);
          a[s] = T(e);
          sum += e;
        }
        for (int s = 0; s < visible; ++s) a[s] = T(a[s] / sum);
        for (int s = visible; s < Tk; ++s) a[s] = 0;
        T* o = out + ((std::int64_t(b) * Tq + t) * H + h) * D;
        for (int d = 0; d < D; ++d) o[d] = 0;
        for (int s = 0; s < visible; ++s) {
          const T* vs = v + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          for (int d = 0; d < D; ++d) o[d] += a[s] * vs[d];
        }
      }
  });
}

template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, int B,
                        int Tq, int Tk, int q0, int H, int KH, int D) {
  const double scale = 1 / std::sqrt(double(D));
  const int group = H / KH;
  tbb::parallel_for(0, B * KH, [&](int task) {
    const int b = task / KH, kh = task % KH;
    std::vector<double> datt(static_cast<std::size_t>(Tk));
    for (int h = kh * group; h < (kh + 1) * group; ++h)
      for (int t = 0; t < Tq; ++t) {
        const int visible = std::min(Tk, q0 + t + 1);
        const T* a = att + ((std::int64_t(b) * H + h) * Tq + t) * Tk;
        const T* d = dout + ((std::int64_t(b) * Tq + t) * H + h) * D;
        // out = Σ_s a_s v_s
        for (int s = 0; s < visible; ++s) {
          const T* vs = v + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          T* dvs = dv + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          double dot = 0;
          for (int i = 0; i < D; ++i) dot += double(d[i]) * vs[i], dvs[i] += a[s] * d[i];
          datt[std::size_t(s)] = dot;
        }
        // softmax backward: dpre_s = a_s (datt_s - Σ_r a_r datt_r)
        double inner = 0;
        for (int s = 0; s < visible; ++s) inner += double(a[s]) * datt[std::size_t(s)];
        const T* qt = q + ((std::int64_t(b) * Tq + t) * H + h) * D;
        T* dqt = dq + ((std::int64_t(b) * Tq + t) * H + h) * D;
        for (int s = 0; s < visible; ++s) {
          const double dpre = a[s] * (datt[std::size_t(s)] - inner) * scale;
          const T* ks = k + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          T* dks = dk + ((std::int64_t(b) * Tk + s) * KH + kh) * D;
          for (int i = 0; i < D; ++i) dqt[i] += T(dpre * ks[i]), dks[i] += T(dpre * qt[i]);
        }
      }
  });
}

template <class T>
void embedding_forward(T* out, const int* tokens, const T* wte, const T* wpe, int N, int Tn, int C, int pos0) {
  for (int n = 0; n < N; ++n) {
    const T* e = wte + std::int64_t(tokens[n]) * C;
    T* o = out + std::int64_t(n) * C;
    for (int c = 0; c < C; ++c) o[c] = e[c] + (wpe ? wpe[std::int64_t(pos0 + n % Tn) * C + c] : T(0));
  }
}

template <class T>
void embedding_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int N, int Tn, int C, int pos0) {
  for (int n = 0; n < N; ++n) {
    const T* d = dout + std::int64_t(n) * C;
    T* e = dwte + std::int64_t(tokens[n]) * C;
    for (int c = 0; c < C; ++c) e[c] += d[c];
    if (dwpe)
      for (int c = 0; c < C; ++c) dwpe[std::int64_t(pos0 + n % Tn) * C + c] += d[c];
  }
}

template <class T>
double crossentropy_forward_backward(T* dlogits, const T* logits, const int* targets, int N, int V, double scale) {
  double total = 0;
  for (int n = 0; n < N; ++n) {
    const T* l = logits + std::int64_t(n) * V;
    double mx = -1e300;
    for (int i = 0; i < V; ++i) mx = std::max(mx, double(l[i]));
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += std::exp(double(l[i]) - mx);
    total += -(double(l[targets[n]]) - mx - std::log(sum));
    if (dlogits) {
      T* d = dlogits + std::int64_t(n) * V;
      for (int i = 0; i < V; ++i) d[i] += T((std::exp(double(l[i]) - mx) / sum - (i == targets[n] ? 1 : 0)) * scale);
    }
  }
  return total;
}

template <class T>
void add_inplace(T* x, const T* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) x[i] += y[i];
}

#define HET_INSTANTIATE(T)                                                                                          \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                                 \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);                        \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);                           \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int);      \
  template void rmsnorm_forward<T>(T*, T*, const T*, const T*, int, int);                                           \
  template void rmsnorm_backward<T>(T*, T*, const T*, const T*, const T*, const T*, int, int);                      \
  template void gelu_forward<T>(T*, const T*, int);                                                                 \
  template void gelu_backward<T>(T*, const T*, const T*, int);                                                      \
  template void swiglu_forward<T>(T*, const T*, const T*, int);                                                     \
  template void swiglu_backward<T>(T*, T*, const T*, const T*, const T*, int);                                      \
  template void rope_forward<T>(T*, int, int, int, int, int);                                                       \
  template void rope_backward<T>(T*, int, int, int, int, int);                                                      \
  template void attention_forward<T>(T*, T*, const T*, const T*, const T*, int, int, int, int, int, int, int);      \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int, int,  \
                                      int, int, int, int);                                                          \
  template void embedding_forward<T>(T*, const int*, const T*, const T*, int, int, int, int);                       \
  template void embedding_backward<T>(T*, T*, const T*, const int*, int, int, int, int);                            \
  template double crossentropy_forward_backward<T>(T*, const T*, const int*, int, int, double);                     \
  template void add_inplace<T>(T*, const T*, std::int64_t);
HET_INSTANTIATE(float)
HET_INSTANTIATE(double)

}  // namespace het::model

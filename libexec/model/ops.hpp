#pragma once
// Layer kernels of the CPU backend, each a forward/backward pair (llm.c style). Shapes are
// in the comments: N = rows (batch × time), C = channels, OC = output channels, B = batch,
// T = time, H = query heads, KH = key/value heads, D = head dimension, V = vocabulary.
// Backward functions ACCUMULATE into their gradient outputs (+=), as gradients of shared
// inputs do. Templated on the scalar so gradient checks can run in double precision.
#include <cstdint>

namespace het::model {

// out[N,OC] = inp[N,C] @ w[OC,C]^T (+ b[OC]); large products run as oneTBB tasks over fixed
// row blocks, so results never depend on the number of threads.
template <class T> void matmul_forward(T* out, const T* inp, const T* w, const T* b, int N, int C, int OC);
// dinp[N,C] += dout @ w; dw[OC,C] += dout^T @ inp; db[OC] += Σ_n dout (b may be null)
template <class T> void matmul_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, int N, int C, int OC);

// out[N,C] = (inp - mean) * rstd * w + b; keeps mean[N], rstd[N]
template <class T> void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N, int C);
template <class T> void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w, const T* mean,
                                           const T* rstd, int N, int C);
// out[N,C] = inp * rstd * w, rstd = 1/sqrt(mean(inp²) + eps)
template <class T> void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int N, int C);
template <class T> void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd, int N, int C);

// GELU, tanh approximation (GPT-2), elementwise over n
template <class T> void gelu_forward(T* out, const T* inp, int n);
template <class T> void gelu_backward(T* dinp, const T* inp, const T* dout, int n);
// SwiGLU: out = silu(gate) * up, elementwise over n
template <class T> void swiglu_forward(T* out, const T* gate, const T* up, int n);
template <class T> void swiglu_backward(T* dgate, T* dup, const T* dout, const T* gate, const T* up, int n);

// Rotary position embedding on x[B,T,H,D] in place (pairs (2i, 2i+1), theta 10000); time
// step t sits at position pos0 + t (context parallelism holds a slice of the sequence).
// backward rotates gradients back by the same angle.
template <class T> void rope_forward(T* x, int B, int Tn, int H, int D, int pos0);
template <class T> void rope_backward(T* dx, int B, int Tn, int H, int D, int pos0);

// Causal attention with grouped queries: q[B,Tq,H,D], k,v[B,Tk,KH,D] -> out[B,Tq,H,D]; query t
// sits at position q0 + t and sees keys s <= q0 + t (self-attention: Tq = Tk, q0 = 0; context
// parallelism: a slice of the queries against the keys up to its end).
// att[B,H,Tq,Tk] keeps the softmax probabilities for the backward. Parallel over (b, kv head).
template <class T>
void attention_forward(T* out, T* att, const T* q, const T* k, const T* v, int B, int Tq, int Tk, int q0, int H, int KH, int D);
template <class T>
void attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* att, const T* q, const T* k, const T* v, int B,
                        int Tq, int Tk, int q0, int H, int KH, int D);

// out[N,C] = wte[tokens[n]] (+ wpe[pos0 + n % T]); N = B·T
template <class T> void embedding_forward(T* out, const int* tokens, const T* wte, const T* wpe, int N, int Tn, int C, int pos0);
template <class T> void embedding_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int N, int Tn, int C, int pos0);

// losses[N] = -log softmax(logits[N,V])[target]; dlogits[N,V] = (softmax - onehot) * scale
// (scale: d(mean loss)/d(loss_n), e.g. 1/(number of tokens of the batch)). Returns Σ losses.
template <class T> double crossentropy_forward_backward(T* dlogits, const T* logits, const int* targets, int N, int V,
                                                        double scale);

// x += y, elementwise over n
template <class T> void add_inplace(T* x, const T* y, std::int64_t n);

}  // namespace het::model

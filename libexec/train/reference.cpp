#include "train/reference.hpp"

#include "model/stage.hpp"

namespace het::train {

template <class T>
std::vector<double> train_reference(const ModelSpec& spec, const data::Batches& batches, const Settings& st) {
  model::StageModel<T> m(spec, 0, spec.num_layers + 1, 0, 1, st.seed);
  const int G = spec.training.global_batch_size, Tn = spec.seq_length, b = st.micro_batch_size;
  const double scale = 1.0 / (double(G) * Tn);
  std::vector<double> losses;
  std::vector<int> in(std::size_t(b) * Tn), tg(in.size());
  for (int step = 0; step < st.steps; ++step) {
    m.zero_grad();
    double total = 0;
    for (int first = 0; first < G; first += b) {
      for (int k = 0; k < b; ++k) batches.sequence(step, G, first + k, &in[std::size_t(k) * Tn], &tg[std::size_t(k) * Tn]);
      double loss = 0;
      m.forward(first, b, in.data(), nullptr, tg.data(), &loss);
      m.backward(first, nullptr, scale);
      total += loss;
    }
    losses.push_back(total * scale);
    for (auto* p : m.params()) model::adamw_step(*p, st.optimizer, step + 1);
  }
  return losses;
}

template std::vector<double> train_reference<float>(const ModelSpec&, const data::Batches&, const Settings&);
template std::vector<double> train_reference<double>(const ModelSpec&, const data::Batches&, const Settings&);

}  // namespace het::train

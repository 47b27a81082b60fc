// train/delayed_scaling.cc — the model's delayed-scaling state (train/delayed_scaling.h).
#include "mxtrain/train/delayed_scaling.h"

#include "mxtrain/common.h"

namespace mxtrain {

ModelScales::ModelScales(GPT& model) {
  for (const ModuleInfo& m : model.quantizable_modules()) {
    LayerScaleHistories* h = nullptr;
    if (GroupedLinear* g = model.grouped_linear(m.module))
      h = &g->scale_histories();
    else if (Linear* l = model.linear(m.module))
      h = &l->scale_histories();
    if (!h) continue;
    for (int i = 0; i < kNumRoles; ++i) {
      std::vector<ScaleHistory>& v = h->roles[size_t(i)];
      if (!v.empty()) entries_.push_back({m.module + "." + role_name(Role(i)), Role(i), &v});
    }
  }
  size_t n = 0;
  for (const Entry& e : entries_) n += e.histories->size();
  amax_.resize(n);
}

void ModelScales::begin_step() {
  for (Entry& e : entries_)
    if (e.role != Role::weight)
      for (ScaleHistory& h : *e.histories) h.drop_step_amax();
}

void ModelScales::end_step(const std::function<void(float*, size_t)>& reduce_max) {
  if (entries_.empty()) return;
  size_t i = 0;
  for (const Entry& e : entries_)
    for (const ScaleHistory& h : *e.histories) amax_[i++] = h.step_amax();
  reduce_max(amax_.data(), amax_.size());
  i = 0;
  for (Entry& e : entries_)
    for (ScaleHistory& h : *e.histories) {
      h.set_step_amax(amax_[i++]);
      h.update();
    }
}

std::vector<io::NamedTensor> ModelScales::state() const {
  std::vector<io::NamedTensor> out;
  for (const Entry& e : entries_) {
    const int64_t G = int64_t(e.histories->size()), L = e.histories->front().length();
    io::NamedTensor hist{e.name + ".amax_history", {G, L}, {}};
    io::NamedTensor scale{e.name + ".delayed_scale", {G}, {}};
    for (const ScaleHistory& h : *e.histories) {
      const std::vector<float> v = h.history();
      hist.data.insert(hist.data.end(), v.begin(), v.end());
      scale.data.push_back(h.scale());
    }
    out.push_back(std::move(hist));
    out.push_back(std::move(scale));
  }
  return out;
}

int ModelScales::restore(
    const std::function<const io::NamedTensor*(const std::string&)>& find) {
  int fresh = 0;
  for (Entry& e : entries_) {
    const io::NamedTensor* hist = find(e.name + ".amax_history");
    const io::NamedTensor* scale = find(e.name + ".delayed_scale");
    if (!hist || !scale) {
      ++fresh;
      continue;
    }
    const int64_t G = int64_t(e.histories->size()), L = e.histories->front().length();
    MXT_CHECK(hist->shape.size() == 2 && hist->shape[0] == G && scale->shape.size() == 1 &&
                  scale->shape[0] == G,
              "checkpoint: the delayed-scaling state of `", e.name, "` is for ",
              hist->shape.empty() ? 0 : hist->shape[0], " group(s), the model has ", G);
    MXT_CHECK(hist->shape[1] == L, "checkpoint: the amax history of `", e.name, "` holds ",
              hist->shape[1], " steps but precision.amax_history_len is ", L,
              "; resume with the length it was saved with");
    for (int64_t g = 0; g < G; ++g)
      (*e.histories)[size_t(g)].restore(
          std::span<const float>(hist->data.data() + g * L, size_t(L)), scale->data[size_t(g)]);
  }
  return fresh;
}

}  // namespace mxtrain

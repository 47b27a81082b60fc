// train/param_sync_local.cc — one process: whole parameters, AdamW moments beside them.
#include "mxtrain/train/optim.h"
#include "train/param_sync.h"

namespace mxtrain {
namespace {

class LocalSync : public ParamSync {
 public:
  explicit LocalSync(GPT& model) : params_(model.parameters()) {
    for (Parameter* p : params_) {
      m_.emplace_back(p->numel(), 0.f);
      v_.emplace_back(p->numel(), 0.f);
    }
  }
  bool grads_finite() override {
    for (Parameter* p : params_)
      if (!all_finite(p->grad.data(), p->numel())) return false;
    return true;
  }
  double grad_sum_squares() override {
    double s = 0;
    for (Parameter* p : params_) s += sum_squares(p->grad.data(), p->numel());
    return s;
  }
  // Every gradient is in the sum: one read of them instead of two.
  double grad_sum_squares_checked() override { return grad_sum_squares(); }
  std::vector<OptimView> views() override {
    std::vector<OptimView> out;
    for (size_t i = 0; i < params_.size(); ++i) {
      Parameter& p = *params_[i];
      out.push_back({p.value.data(), p.grad.data(), m_[i].data(), v_[i].data(), p.numel(),
                     p.shape.size() >= 2, &p.version});
    }
    return out;
  }
  std::string save(const std::string& dir, const TrainConfig& cfg, const TrainerState& st,
                   const std::vector<io::NamedTensor>& extra) override {
    return save_training_checkpoint(dir, cfg, params_, m_, v_, st, extra);
  }
  TrainerState load(const std::string& dir, const TrainConfig& cfg,
                    std::vector<io::NamedTensor>& extra) override {
    return load_training_checkpoint(dir, cfg, params_, m_, v_, &extra);
  }

 private:
  std::vector<Parameter*> params_;
  std::vector<FloatBuffer> m_, v_;
};

}  // namespace

std::unique_ptr<ParamSync> make_local_sync(GPT& model) {
  return std::make_unique<LocalSync>(model);
}

}  // namespace mxtrain

// train/checkpointing.cc — trainer checkpoints on top of io/checkpoint.h, and a checkpoint's
// model for inference (train/checkpointing.h).
#include "mxtrain/train/checkpointing.h"

#include <cstdio>
#include <set>

#include "mxtrain/common.h"
#include "mxtrain/io/checkpoint.h"

namespace mxtrain {
namespace {

constexpr const char* kTokenizerFile = "tokenizer.model";

// The tokenizer a checkpoint records ("tokenizer" in its trainer state; none: byte-level).
corpus::Tokenizer checkpoint_tokenizer(const io::LoadedCheckpoint& ck) {
  const auto it = ck.extra_files.find(kTokenizerFile);
  if (it == ck.extra_files.end()) return corpus::Tokenizer::bytes();
  return corpus::Tokenizer::from_model(it->second, ck.dir + "/" + kTokenizerFile);
}

// dst = the checkpoint tensor t, which must have p's shape.
void copy_tensor(const io::NamedTensor& t, const Parameter& p, FloatBuffer& dst) {
  MXT_CHECK(t.shape == p.shape, "checkpoint tensor `", t.name, "` has the wrong shape");
  dst.assign(t.data.begin(), t.data.end());
}

}  // namespace

std::string save_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                              const std::vector<Parameter*>& params,
                              const std::vector<FloatBuffer>& m,
                              const std::vector<FloatBuffer>& v, const TrainerState& st,
                              const std::vector<io::NamedTensor>& extra_state) {
  std::vector<io::TensorRef> model, optim;
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter& p = *params[i];
    model.push_back({p.name, p.shape, p.value.data()});
    optim.push_back({io::exp_avg_name(p.name), p.shape, m[i].data()});
    optim.push_back({io::exp_avg_sq_name(p.name), p.shape, v[i].data()});
  }
  for (const io::NamedTensor& t : extra_state) optim.push_back(t.ref());
  nlohmann::json state = {{"step", st.step},
                           {"opt_steps", st.opt_steps},
                           {"skipped", st.skipped},
                           {"world_size", st.world_size},
                           {"global_batch", st.global_batch},
                           {"validation_due", st.validation_due}};
  io::CheckpointOptions opt;
  opt.keep_last = cfg.training.keep_checkpoints;
  opt.config_text = cfg.source_text;
  state["tokenizer"] = tokenizer_of(cfg).id().str();
  if (!cfg.tokenizer_model.empty()) opt.extra_files[kTokenizerFile] = cfg.tokenizer_model;
  return io::save_checkpoint(dir, st.step, model, optim, state, opt);
}

int resume_grad_accum(const TrainerState& saved, int micro_batch, int world, int grad_accum,
                      std::string* note) {
  const int64_t G = saved.global_batch, per_accum = int64_t(micro_batch) * world;
  if (saved.world_size == world || per_accum * grad_accum == G) return grad_accum;
  MXT_CHECK(G % per_accum == 0, "cannot resume at ", world, " rank(s) with the checkpoint's "
            "global batch: it has ", G, " sequences per step (written at ", saved.world_size,
            " rank(s)), which micro_batch_size ", micro_batch, " x ", world, " rank(s) = ",
            per_accum, " does not divide; choose a micro_batch_size and world size whose "
            "product divides ", G);
  const int64_t a = G / per_accum;
  if (note)
    *note = "resuming at " + std::to_string(world) + " rank(s), checkpoint written at " +
            std::to_string(saved.world_size) + ": training.grad_accum " +
            std::to_string(grad_accum) + " -> " + std::to_string(a) +
            " keeps the global batch of " + std::to_string(G) + " sequences (micro_batch_size " +
            std::to_string(micro_batch) + " x " + std::to_string(world) + " rank(s) x " +
            std::to_string(a) + ")";
  return int(a);
}

TrainerState load_training_checkpoint(const std::string& dir, const TrainConfig& cfg,
                                      const std::vector<Parameter*>& params,
                                      std::vector<FloatBuffer>& m,
                                      std::vector<FloatBuffer>& v,
                                      std::vector<io::NamedTensor>* extra_state) {
  const io::LoadedCheckpoint ck = io::load_checkpoint(dir);
  const TrainConfig saved = parse_config(ck.config_text, ck.dir + "/state.json config");
  const std::vector<std::string> changed = model_changes(saved.model, cfg.model);
  if (!changed.empty()) {
    std::string list;
    for (const std::string& c : changed) list += (list.empty() ? "" : "; ") + c;
    MXT_FAIL("checkpoint ", ck.dir, " was written for a different model (checkpoint -> config: ",
             list, "); resume with the model it was written for, or start a new run in "
             "another --checkpoint-dir");
  }
  const std::string saved_tok = checkpoint_tokenizer(ck).id().str();
  const std::string want_tok = tokenizer_of(cfg).id().str();
  MXT_CHECK(saved_tok == want_tok, "checkpoint ", ck.dir, " was trained with tokenizer ",
            saved_tok, " but the config's is ", want_tok, " (model.tokenizer: ",
            cfg.tokenizer.empty() ? "byte-level" : cfg.tokenizer, ")");
  if (saved.training.seed != cfg.training.seed)
    std::fprintf(stderr, "warning: resuming with seed %llu, checkpoint used %llu: the data "
                 "order differs from the original run\n",
                 (unsigned long long)cfg.training.seed, (unsigned long long)saved.training.seed);
  // Anything else that differs (recipe, learning rate, schedule, ...) is allowed but said.
  for (const std::string& change : config_changes(saved, cfg))
    if (change.rfind("training.seed:", 0) != 0)
      std::fprintf(stderr, "note: resuming with a changed setting: %s\n", change.c_str());
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    copy_tensor(ck.model_tensor(p.name), p, p.value);
    copy_tensor(ck.optimizer_tensor(io::exp_avg_name(p.name)), p, m[i]);
    copy_tensor(ck.optimizer_tensor(io::exp_avg_sq_name(p.name)), p, v[i]);
    ++p.version;  // any quantized copy made from the old value is stale
  }
  if (extra_state) {
    std::set<std::string> moments;
    for (const Parameter* p : params) {
      moments.insert(io::exp_avg_name(p->name));
      moments.insert(io::exp_avg_sq_name(p->name));
    }
    extra_state->clear();
    for (const io::NamedTensor& t : ck.optimizer)
      if (!moments.count(t.name)) extra_state->push_back(t);
  }
  TrainerState st;
  try {
    st.step = ck.trainer_state.at("step").get<int64_t>();
    st.opt_steps = ck.trainer_state.at("opt_steps").get<int64_t>();
    st.skipped = ck.trainer_state.at("skipped").get<int64_t>();
    st.world_size = ck.trainer_state.value("world_size", int64_t(1));
    st.global_batch = ck.trainer_state.value(
        "global_batch", int64_t(saved.training.micro_batch_size) * saved.training.grad_accum);
    st.validation_due = ck.trainer_state.value("validation_due", false);
  } catch (const nlohmann::json::exception& e) {
    MXT_FAIL("checkpoint ", ck.dir, ": trainer state is incomplete (", e.what(), ")");
  }
  MXT_CHECK(st.world_size >= 1 && st.global_batch >= 1, "checkpoint ", ck.dir,
            ": trainer state has world_size ", st.world_size, " and global_batch ",
            st.global_batch, " (both must be >= 1)");
  MXT_CHECK(st.step == ck.step, "checkpoint ", ck.dir, ": state step ", st.step,
            " does not match the directory's step ", ck.step);
  return st;
}

CheckpointModel load_checkpoint_model(const std::string& dir) {
  const io::LoadedCheckpoint ck = io::load_checkpoint(dir, /*read_optimizer=*/false);
  CheckpointModel out;
  out.dir = ck.dir;
  out.step = ck.step;
  out.config = parse_config(ck.config_text, ck.dir + "/state.json config");
  out.model = std::make_unique<InferenceModel>(out.config.model);
  for (Parameter* p : out.model->parameters())
    copy_tensor(ck.model_tensor(p->name), *p, p->value);
  out.tokenizer = checkpoint_tokenizer(ck);
  return out;
}

corpus::Tokenizer tokenizer_of(const TrainConfig& cfg) {
  if (cfg.tokenizer_model.empty()) return corpus::Tokenizer::bytes();
  return corpus::Tokenizer::from_model(cfg.tokenizer_model, cfg.tokenizer);
}

}  // namespace mxtrain

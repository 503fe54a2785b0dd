// Pretraining a small GPT-2 on CPU: the only core file that needs torch's optimizers.
#include "attnscope/model/pretrain.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <torch/optim/adamw.h>  // before clip_grad.h, which needs torch::Tensor declared
#include <torch/nn/utils/clip_grad.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/text_file.h"
#include "attnscope/model/model.h"
#include "attnscope/tokenize/tokenizer.h"

namespace fs = std::filesystem;

namespace attnscope {

namespace {

// GPT-2 initialization from `gen` (pretrain draws its batches from the same generator afterwards).
ModelWeights init_gpt2(const ModelConfig& c, at::Generator& gen) {
  const int64_t D = c.d_model, F = c.d_ff, V = c.vocab_size;
  auto normal = [&](std::vector<int64_t> shape, double std) { return at::normal(0.0, std, shape, gen); };
  const double resid = 0.02 / std::sqrt(2.0 * c.n_layer);
  ModelWeights w;
  w.tok_emb = normal({V, D}, 0.02);
  w.pos_emb = normal({c.n_ctx, D}, 0.01);
  for (int s = 0; s < c.n_layer; ++s) {
    LayerWeights l;
    l.ln1_w = at::ones({D}), l.ln1_b = at::zeros({D});
    l.wq = normal({D, D}, 0.02), l.wk = normal({D, D}, 0.02), l.wv = normal({D, D}, 0.02);
    l.bq = at::zeros({D}), l.bk = at::zeros({D}), l.bv = at::zeros({D});
    l.wo = normal({D, D}, resid), l.bo = at::zeros({D});
    l.ln2_w = at::ones({D}), l.ln2_b = at::zeros({D});
    l.w_up = normal({F, D}, 0.02), l.b_up = at::zeros({F});
    l.w_down = normal({D, F}, resid), l.b_down = at::zeros({D});
    w.layers.push_back(std::move(l));
  }
  w.lnf_w = at::ones({D}), w.lnf_b = at::zeros({D});
  w.lm_head = w.tok_emb;  // tied
  return w;
}

}  // namespace

ModelConfig gpt2_config(int n_layer, int n_head, int d_model, int vocab_size, int n_ctx) {
  ModelConfig c;
  c.arch = Arch::GPT2;
  c.arch_name = "GPT2LMHeadModel";
  c.n_layer = n_layer, c.n_head = n_head, c.n_kv_head = n_head;
  c.d_model = d_model, c.head_dim = d_model / n_head, c.d_ff = 4 * d_model;
  c.vocab_size = vocab_size, c.n_ctx = n_ctx;
  c.activation = Activation::GeluTanh;
  c.tied_embeddings = true, c.attn_bias = true, c.mlp_bias = true;
  return c;
}

ModelWeights init_gpt2_weights(const ModelConfig& c, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  return init_gpt2(c, gen);
}

namespace {

// Parameters split by whether weight decay applies (matrices yes; norms, biases, positions no).
void collect(ModelWeights& w, std::vector<at::Tensor>* decay, std::vector<at::Tensor>* no_decay) {
  decay->push_back(w.tok_emb);
  no_decay->push_back(w.pos_emb);
  for (auto& l : w.layers) {
    for (at::Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_up, &l.w_down}) decay->push_back(*t);
    for (at::Tensor* t : {&l.ln1_w, &l.ln1_b, &l.bq, &l.bk, &l.bv, &l.bo, &l.ln2_w, &l.ln2_b, &l.b_up, &l.b_down})
      no_decay->push_back(*t);
  }
  no_decay->push_back(w.lnf_w);
  no_decay->push_back(w.lnf_b);
}

double unigram_loss(const std::vector<int64_t>& train, const std::vector<int64_t>& held, int64_t V) {
  std::vector<double> count(V, 1.0);  // add-one smoothing
  for (int64_t t : train) count[t] += 1;
  const double total = double(train.size()) + double(V);
  double nll = 0;
  for (int64_t t : held) nll -= std::log(count[t] / total);
  return nll / double(held.size());
}

// Mean held-out loss over fixed, non-overlapping windows (at most 64 of them, for speed).
double heldout_loss(const Model& m, const std::vector<int64_t>& held, int n_ctx) {
  at::NoGradGuard ng;
  const int64_t n = std::min<int64_t>(64, (int64_t(held.size()) - 1) / n_ctx);
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor w = at::tensor(std::vector<int64_t>(held.begin() + i * n_ctx, held.begin() + (i + 1) * n_ctx + 1));
    at::Tensor logits = m.forward(w.narrow(0, 0, n_ctx).view({1, -1})).squeeze(0);
    total += at::cross_entropy_loss(logits, w.narrow(0, 1, n_ctx)).item<double>();
  }
  return total / double(n);
}

}  // namespace

PretrainReport pretrain_gpt2(const std::string& corpus, const PretrainOptions& opt, const std::string& out_dir,
                             const ProgressFn& progress, const std::function<void(const std::string&)>& log) {
  if (opt.d_model % opt.n_head != 0) fail("pretrain", "d_model must be divisible by the number of heads");
  if (opt.vocab_size < 300) fail("pretrain", "vocab size must be at least 300 (256 bytes + merges + <|endoftext|>)");
  if (opt.steps < 1 || opt.batch < 1 || opt.n_ctx < 8) fail("pretrain", "steps, batch must be >= 1 and n_ctx >= 8");
  const auto t_start = std::chrono::steady_clock::now();
  OutputDir out(out_dir);
  const fs::path tmp = out.path();

  // 1. Tokenizer, then the token stream; the tail is held out.
  if (log) log("training a byte-level BPE tokenizer with " + std::to_string(opt.vocab_size) + " tokens");
  train_bytelevel_bpe(corpus, opt.vocab_size, (tmp / "tokenizer.json").string());
  auto tok = load_hf_tokenizer(tmp.string());
  std::vector<int64_t> ids = tok->encode(corpus);
  const int64_t n_held = std::max<int64_t>(int64_t(ids.size() * opt.heldout_fraction), opt.n_ctx + 1);
  if (int64_t(ids.size()) < n_held + int64_t(opt.n_ctx) * 4)
    fail("pretrain", "corpus too small: " + std::to_string(ids.size()) + " tokens");
  std::vector<int64_t> train(ids.begin(), ids.end() - n_held), held(ids.end() - n_held, ids.end());

  PretrainReport rep;
  rep.train_tokens = int64_t(train.size());
  rep.heldout_tokens = n_held;
  rep.unigram_heldout_loss = unigram_loss(train, held, tok->vocab_size());
  if (log)
    log(std::to_string(train.size()) + " training tokens, " + std::to_string(n_held) +
        " held out; unigram baseline " + std::to_string(rep.unigram_heldout_loss) + " nats");

  // 2. Model.
  const ModelConfig c = gpt2_config(opt.n_layer, opt.n_head, opt.d_model, int(tok->vocab_size()), opt.n_ctx);
  at::manual_seed(opt.seed);
  at::Generator gen = at::detail::createCPUGenerator(opt.seed);
  ModelWeights w = init_gpt2(c, gen);
  std::vector<at::Tensor> decay, no_decay;
  collect(w, &decay, &no_decay);
  for (auto* group : {&decay, &no_decay})
    for (auto& t : *group) t.set_requires_grad(true);
  Model model(c, std::move(w));  // lm_head is the same tensor as tok_emb: tied, trained once

  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(opt.lr).betas({0.9, 0.95}).weight_decay(opt.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(opt.lr).betas({0.9, 0.95}).weight_decay(0.0)));
  torch::optim::AdamW adam(std::move(groups), torch::optim::AdamWOptions(opt.lr));
  std::vector<at::Tensor> params = decay;
  params.insert(params.end(), no_decay.begin(), no_decay.end());

  // 3. Training: random windows, cosine schedule after a linear warm-up, gradient clipping at 1.
  const int64_t span = opt.n_ctx + 1;
  at::Tensor train_t = at::tensor(train);
  double running = 0;
  for (int step = 1; step <= opt.steps; ++step) {
    const double lr = step <= opt.warmup
                          ? opt.lr * step / opt.warmup
                          : opt.lr * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * (step - opt.warmup) /
                                                                      std::max(1, opt.steps - opt.warmup))));
    for (auto& g : adam.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    at::Tensor starts = at::randint(int64_t(train.size()) - span, {opt.batch}, gen);
    at::Tensor idx = starts.unsqueeze(1) + at::arange(span).unsqueeze(0);
    at::Tensor batch = train_t.index({idx});
    at::Tensor logits = model.forward(batch.narrow(1, 0, opt.n_ctx));
    at::Tensor loss = at::cross_entropy_loss(logits.reshape({-1, c.vocab_size}),
                                             batch.narrow(1, 1, opt.n_ctx).reshape({-1}));
    adam.zero_grad();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    adam.step();
    const double l = loss.item<double>();
    running = step == 1 ? l : 0.95 * running + 0.05 * l;
    if (step % opt.eval_every == 0 || step == opt.steps) {
      const double h = heldout_loss(model, held, opt.n_ctx);
      rep.curve.push_back({step, running, h, lr});
      rep.final_heldout_loss = h;
      if (log)
        log("step " + std::to_string(step) + "  train " + std::to_string(running) + "  held-out " +
            std::to_string(h) + "  lr " + std::to_string(lr));
    }
    if (progress) progress(double(step) / opt.steps, "step " + std::to_string(step) + " loss " + std::to_string(l));
  }
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();

  // 4. Write the model, its tokenizer and the training record; then move into place.
  for (auto& t : params) t.set_requires_grad(false);
  save_gpt2_model(model, tmp.string());
  nlohmann::ordered_json j;
  j["options"] = {{"vocab_size", opt.vocab_size}, {"layers", opt.n_layer}, {"heads", opt.n_head},
                  {"d_model", opt.d_model}, {"context_length", opt.n_ctx}, {"steps", opt.steps}, {"batch", opt.batch},
                  {"lr", opt.lr}, {"warmup", opt.warmup}, {"weight_decay", opt.weight_decay},
                  {"heldout_fraction", opt.heldout_fraction}, {"seed", opt.seed}};
  j["train_tokens"] = rep.train_tokens;
  j["heldout_tokens"] = rep.heldout_tokens;
  j["unigram_heldout_loss"] = rep.unigram_heldout_loss;
  j["final_heldout_loss"] = rep.final_heldout_loss;
  j["seconds"] = rep.seconds;
  for (const auto& p : rep.curve)
    j["curve"].push_back({{"step", p.step}, {"train_loss", p.train_loss}, {"heldout_loss", p.heldout_loss}, {"lr", p.lr}});
  write_text_file((tmp / "training.json").string(), j.dump(2) + "\n");
  out.commit();
  return rep;
}

}  // namespace attnscope

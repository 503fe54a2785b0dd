// Stage 2 (finetune.h): the attention weights written back in each architecture's own layout, the
// merged adapters equal to W0 + B A of the run's last checkpoint, a finetuned model that attnscope
// and attnscope_linear.py run alike, resume equal to an uninterrupted run, and bad input refused
// before any work.
#include <gtest/gtest.h>
#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/convert/converted_model.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "attnscope/tokenize/tokenizer.h"
#include "attnscope/model/model.h"
#include "hf_checkpoint_writer.h"
#include "test_support.h"
#include "tiny_models.h"

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string text() { return test::source_dir() + "/resources/texts/brown_news_ca44.txt"; }
std::string python_module() { return test::source_dir() + "/resources/python/attnscope_linear.py"; }

FinetuneOptions options(const std::string& model, int64_t steps) {
  FinetuneOptions o;
  o.model = model;
  o.texts = {text()};
  o.rank = 4;
  o.steps = steps;
  o.lr = 3e-3;
  o.map_lr = 3e-3;
  o.seq_len = 32;
  o.batch = 2;
  o.checkpoint_every = 3;
  o.seed = 5;
  o.python_module = python_module();
  return o;
}

at::Tensor checkpoint_tensor(const std::string& run, const std::string& name) {
  return SafetensorsFile(run + "/checkpoints/checkpoint.safetensors").tensor(name).clone();
}

}  // namespace

// The writer of finetuned attention (hf_weights_with_attention) is the inverse of the loader, in
// every architecture's layout: perturbed q, k, v, o (and biases) written back and loaded again are
// the perturbed ones, every other tensor untouched.
TEST(Finetune, AttentionWeightsRoundTripInEveryLayout) {
  for (const test::RefArch arch : {test::RefArch::GPT2, test::RefArch::GPTNeoX, test::RefArch::Llama}) {
    test::RefConfig rc;
    rc.arch = arch;
    rc.n_kv_head = arch == test::RefArch::Llama ? 2 : 4;
    rc.vocab = 4096;  // the bundled tokenizer's
    const std::string dir = test::temp_dir("ft_layout") + "/src";
    fs::create_directories(dir);
    test::write_hf_checkpoint(dir, rc, test::random_weights(rc, 7));
    const std::string tokenizer = test::source_dir() + "/resources/models/brown-gpt2-mini/tokenizer.json";
    fs::copy_file(tokenizer, dir + "/tokenizer.json");
    LoadedModel m = load_model(dir);
    ModelWeights w = m.model->weights();
    at::manual_seed(1);
    for (auto& l : w.layers)
      for (at::Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo})
        if (t->defined()) *t = *t + at::randn(t->sizes());
    const std::string out = test::temp_dir("ft_layout") + "/out";
    fs::create_directories(out);
    fs::copy_file(dir + "/config.json", out + "/config.json");
    fs::copy_file(tokenizer, out + "/tokenizer.json");
    write_safetensors(out + "/model.safetensors", hf_weights_with_attention(m.model->config(), WeightStore(dir), w));
    LoadedModel back = load_model(out);
    SCOPED_TRACE(int(arch));
    for (size_t s = 0; s < w.layers.size(); ++s) {
      const LayerWeights &a = w.layers[s], &b = back.model->weights().layers[s];
      for (const auto& [x, y] : {std::pair<const at::Tensor*, const at::Tensor*>{&a.wq, &b.wq}, {&a.wk, &b.wk}, {&a.wv, &b.wv},
                                 {&a.wo, &b.wo}, {&a.bq, &b.bq}, {&a.bv, &b.bv}, {&a.w_up, &b.w_up}})
        if (x->defined()) {
          EXPECT_TRUE(at::allclose(*x, *y, 0, 1e-6)) << s;
        }
    }
  }
}

// On stories260K (a real Llama): the held-out loss falls; RUN/model holds W0 + B A of the last
// checkpoint and the trained maps; attnscope_linear.py gives its logits.
TEST(Finetune, LowersHeldOutLossAndWritesTheMergedModel) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  const std::string conv = test::hedgehog_conversion(bin, "ft_stories");
  const std::string run = test::temp_dir("ft_stories_run") + "/run";
  FinetuneOptions o = options(conv, 12);
  const FinetuneResult r = finetune(o, run);
  EXPECT_LT(r.val_loss, r.initial_val_loss - 0.05) << r.initial_val_loss << " -> " << r.val_loss;
  const auto cfg = nlohmann::json::parse(test::read_file(run + "/model/config.json"));
  EXPECT_EQ(cfg["attnscope"]["finetune"]["rank"], 4);
  EXPECT_EQ(cfg["attnscope"]["finetune"]["steps"], 12);
  EXPECT_EQ(cfg["attnscope"]["feature_map"]["name"], "hedgehog");
  // Independent of the writer: the loaded weights are W0 (the input's) + B A (the checkpoint's).
  LoadedModel before = load_model(conv), after = load_model(run + "/model");
  for (int s = 0; s < after.model->config().n_layer; ++s) {
    const auto& w0 = before.model->weights().layers[size_t(s)];
    const auto& w1 = after.model->weights().layers[size_t(s)];
    const std::string p = "lora." + std::to_string(s) + ".";
    const at::Tensor dq = at::matmul(checkpoint_tensor(run, p + "q.B"), checkpoint_tensor(run, p + "q.A"));
    const at::Tensor dout = at::matmul(checkpoint_tensor(run, p + "o.B"), checkpoint_tensor(run, p + "o.A"));
    EXPECT_TRUE(at::allclose(w1.wq, w0.wq + dq, 1e-5, 1e-6)) << s;
    EXPECT_TRUE(at::allclose(w1.wo, w0.wo + dout, 1e-5, 1e-6)) << s;
    EXPECT_GT(dq.abs().max().item<double>(), 1e-5) << "the adapters moved";
    EXPECT_TRUE(at::equal(w1.w_up, w0.w_up)) << "only attention is finetuned";
  }
  // The maps learned too: head (0, 0)'s W moved from the input's.
  const auto m0 = before.model->feature_maps()->maps[0][0]->named_parameters();
  const auto m1 = after.model->feature_maps()->maps[0][0]->named_parameters();
  EXPECT_GT((m0[0].second - m1[0].second).abs().max().item<double>(), 1e-6);
  // PyTorch alone runs it to the same logits.
  const std::string python = test::python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch";
  std::string out;
  ASSERT_EQ(test::run_command(python + " -c \"import sys, torch; sys.path.insert(0, '" + run + "/model'); "
                                  "import attnscope_linear as a; m = a.load('" + run + "/model'); "
                                  "print(' '.join('%.6f' % v for v in m(torch.tensor([[1, 5, 9, 30, 7, 2]]))[0, -1, :8].tolist()))\"",
                              &out),
            0)
      << out;
  const at::Tensor logits = after.model->forward(at::tensor(std::vector<int64_t>{1, 5, 9, 30, 7, 2}).view({1, -1}))[0][-1];
  std::istringstream in(out);
  for (int i = 0; i < 8; ++i) {
    double v = 0;
    in >> v;
    EXPECT_NEAR(v, logits[i].item<double>(), 1e-3) << i;
  }
}

// A cancelled run resumed from its checkpoint ends where an uninterrupted one does; the recorded
// command names every option.
// The softmax anchor of linearize's report: stage 2's recipe on the original model changes only the
// attention projections (by a rank-r product each) and lowers the loss on the text it trains on.
TEST(Finetune, SoftmaxBaselineAdaptsOnlyTheProjectionsByLowRank) {
  const LoadedModel m = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
  FinetuneOptions o;
  o.model = "unused: the original is passed";
  o.texts = {text()};
  o.rank = 2;
  o.steps = 12;
  o.lr = 5e-3;
  o.seq_len = 64;
  o.batch = 2;
  o.seed = 4;
  const ModelWeights w = finetune_softmax(m, o);
  const ModelWeights& w0 = m.model->weights();
  for (size_t s = 0; s < w.layers.size(); ++s) {
    const LayerWeights &a = w.layers[s], &b = w0.layers[s];
    for (const auto& [x, y] : {std::pair<const at::Tensor*, const at::Tensor*>{&a.wq, &b.wq}, {&a.wk, &b.wk}, {&a.wv, &b.wv}, {&a.wo, &b.wo}}) {
      const at::Tensor delta = (*x - *y).to(at::kDouble);
      EXPECT_GT(delta.abs().max().item<double>(), 0) << "layer " << s << ": an adapter did not train";
      const at::Tensor sv = at::linalg_svdvals(delta);
      EXPECT_LT(sv[2].item<double>(), 1e-5 * sv[0].item<double>()) << "layer " << s << ": the change is not rank 2";
    }
    EXPECT_TRUE(at::equal(a.w_up, b.w_up) && at::equal(a.ln1_w, b.ln1_w)) << "layer " << s << ": a frozen tensor moved";
  }
  // Its loss on the text it trained on falls.
  const std::vector<int64_t> ids = encode_documents(*m.tokenizer, read_text_documents({text()}));
  Model adapted(m.model->config(), w);
  EXPECT_LT(adapted.mean_loss(ids, 64), m.model->mean_loss(ids, 64) - 1e-3);
}

TEST(Finetune, ResumeEqualsAnUninterruptedRun) {
  const std::string conv = test::hedgehog_conversion(test::source_dir() + "/resources/models/brown-gpt2-mini", "ft_resume");
  const std::string root = test::temp_dir("ft_resume_runs");
  finetune(options(conv, 7), root + "/whole");
  const ProgressFn stop = [](double, const std::string& what) {
    if (what.rfind("step 5/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(finetune(options(conv, 7), root + "/killed", stop), Cancelled);
  EXPECT_FALSE(fs::exists(root + "/killed/model"));
  resume_finetune(root + "/killed");
  SafetensorsFile a(root + "/whole/model/model.safetensors"), b(root + "/killed/model/model.safetensors");
  ASSERT_EQ(a.entries().size(), b.entries().size());
  for (const auto& e : a.entries()) EXPECT_TRUE(at::allclose(a.tensor(e.name), b.tensor(e.name), 1e-5, 1e-6)) << e.name;
  const auto job = nlohmann::json::parse(test::read_file(root + "/whole/job.json"));
  for (const char* flag : {"--rank 4", "--steps 7", "--seq-len 32", "--batch 2", "--seed 5", "--checkpoint-every 3", "--text "})
    EXPECT_NE(job["command"].get<std::string>().find(flag), std::string::npos) << flag << " in " << job["command"];
}

// Bad input is refused before any work, naming the file or option, and leaves no run directory.
TEST(Finetune, BadInputIsRefusedAndLeavesNothing) {
  const std::string conv = test::hedgehog_conversion(test::source_dir() + "/resources/models/brown-gpt2-mini", "ft_bad");
  const std::string root = test::temp_dir("ft_bad_runs");
  const std::string cli = test::cli_path() + " finetune --text " + text();
  const std::string tiny = root + "/tiny.txt";
  std::ofstream(tiny) << "Too short.";
  struct Case {
    std::string args, says;
    int rc;
  };
  for (const Case& c : {Case{" --model " + conv + " --rank 0", "--rank", 2},
                        Case{" --model " + test::source_dir() + "/resources/models/brown-gpt2-mini",
                             "is not a converted model", 1},
                        Case{" --model " + conv + " --text " + tiny + " --seq-len 64", "fewer than two windows", 1},
                        Case{" --model " + conv + " --seq-len 100000", "sequence length", 1},
                        Case{" --model " + conv + " --kl-weight nan", "--kl-weight", 2}}) {
    std::string out;
    const std::string cmd = c.args.find(tiny) != std::string::npos ? test::cli_path() + " finetune" + c.args : cli + c.args;
    EXPECT_EQ(test::run_command(cmd + " --out " + root + "/run 2>&1", &out), c.rc) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args << "\n" << out;
    EXPECT_FALSE(fs::exists(root + "/run")) << c.args;
  }
}

// The block loss (issue 27, `--loss block`: paper 003's hidden-state alignment): each layer's output
// (attention and MLP, the residual stream after it) with the maps' head outputs in place of
// softmax's, from the same input. Checked against the model's own forward pass: layer s's output
// from its captured residual input and softmax's A V (recomputed from the capture's q, k, v) is the
// residual stream the model hands to layer s + 1; the loss is 0 exactly when the maps' outputs are
// softmax's and its gradient matches finite differences; distill --loss block trains it (the held-out
// block loss falls), resumes exactly, and a capture whose model is gone is refused before any work.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/base/error.h"
#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/model/model.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_block_loss {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {


}  // namespace

// Model::layer_output with softmax's A V is the model's own layer: the residual stream it hands on.
// The block loss is 0 for the teacher's own outputs, positive for the maps', and its gradient in a
// map parameter matches a central finite difference.
TEST(BlockLoss, LayerOutputIsTheModelsLayerAndTheLossIsItsDistance) {
  LoadedModel m = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
  const Model& model = *m.model;
  const CaptureStore cap(test::bundled_capture());
  const at::Tensor ids = cap.ids().narrow(0, 0, 2);
  std::vector<at::Tensor> resid;
  {
    at::NoGradGuard no_grad;
    CaptureHook hook;
    hook.on_layer = [&](const AttentionActivations& a) { resid.push_back(a.resid.clone()); };
    model.hidden_states(ids, &hook);
  }
  const int64_t L = ids.size(1);
  for (int s = 0; s + 1 < cap.num_layers(); ++s) {
    // A V from the capture's q, k, v, in float64 by the definition (causal softmax).
    const at::Tensor q = cap.layer_tensor(s, "q").narrow(0, 0, 2).to(at::kDouble), k = cap.layer_tensor(s, "k").narrow(0, 0, 2).to(at::kDouble);
    const at::Tensor v = cap.layer_tensor(s, "v").narrow(0, 0, 2).to(at::kDouble);
    const at::Tensor scores = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(q.size(3)));
    const at::Tensor y = at::matmul(at::softmax(scores.masked_fill(at::ones({L, L}, at::kBool).triu(1), -INFINITY), -1), v);
    const at::Tensor out = model.layer_output(s, resid[size_t(s)], y.to(at::kFloat));
    EXPECT_LT((out - resid[size_t(s) + 1]).abs().max().item<double>(), 1e-4 * (1 + resid[size_t(s) + 1].abs().max().item<double>()))
        << "layer " << s;
  }
  // The loss of maps against softmax, from the capture.
  DistillOptions o;
  o.feature_map = "hedgehog";
  o.seed = 2;
  LayerMaps maps = init_layer_maps(o, 1, cap.num_heads(), cap.head_dim(), 8);
  const at::Tensor q = cap.layer_tensor(1, "q").narrow(0, 0, 2), k = cap.layer_tensor(1, "k").narrow(0, 0, 2);
  const at::Tensor v = cap.layer_tensor(1, "v").narrow(0, 0, 2);
  LayerOutputs heads = layer_outputs(maps, q, k, v);
  EXPECT_EQ(block_loss(model, 1, resid[1], {heads.y, heads.y}).item<double>(), 0.0);
  const double loss = block_loss(model, 1, resid[1], heads).item<double>();
  EXPECT_GT(loss, 1e-6);
  // d loss / d W[0][0][0] of hedgehog's first head against a central difference (float64 model).
  LoadedModel m64 = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini", "", at::kDouble);
  for (auto& [name, t] : maps.params) t.set_data(t.to(at::kDouble)), t.requires_grad_(true);
  const at::Tensor qd = q.to(at::kDouble), kd = k.to(at::kDouble), vd = v.to(at::kDouble), rd = resid[1].to(at::kDouble);
  block_loss(*m64.model, 1, rd, layer_outputs(maps, qd, kd, vd)).backward();
  at::Tensor& w = maps.params[0].second;
  const double grad = w.grad().view({-1})[0].item<double>();
  const double eps = 1e-5;
  auto at_shift = [&](double dx) {
    at::NoGradGuard no_grad;
    w.view({-1})[0] += dx;
    const double l = block_loss(*m64.model, 1, rd, layer_outputs(maps, qd, kd, vd)).item<double>();
    w.view({-1})[0] -= dx;
    return l;
  };
  const double fd = (at_shift(eps) - at_shift(-eps)) / (2 * eps);
  EXPECT_NEAR(grad, fd, 1e-4 * std::max(1e-3, std::abs(fd)));
  EXPECT_GT(std::abs(fd), 0.0);
}

// distill --loss block: the layer's groups (DoF's per-head sizes) train together on the capture and
// its model; the held-out block loss falls; a killed run resumes exactly; report.json names the loss.
// A capture whose model is gone is refused, naming it, with nothing written.
TEST(BlockLoss, DistillTrainsItResumesAndRefusesAMissingModel) {
  const std::string root = test::temp_dir("block_distill");
  DistillOptions o;
  o.capture = test::bundled_capture();
  o.feature_map = "hedgehog";
  o.loss = DistillLoss::Block;
  o.strategy = AllocStrategy::PerHead;  // heads of one layer in groups of different sizes
  o.budget = 8;
  o.steps = 12;
  o.seed = 5;
  o.batch = 2;
  o.lr = 0.02;
  o.checkpoint_every = 5;
  distill(o, root + "/whole");
  const auto rep = nlohmann::json::parse(test::read_file(root + "/whole/report.json"));
  std::set<int64_t> sizes;
  for (const auto& l : rep["layers"]) {
    EXPECT_LT(l["final_loss"].get<double>(), l["initial_loss"].get<double>()) << l.dump();
    if (l.contains("head_features"))
      for (const auto& f : l["head_features"]) sizes.insert(f.get<int64_t>());
  }
  EXPECT_GT(sizes.size(), 1u) << "the test should train heads of different sizes together: " << rep.dump();
  const auto metrics = test::read_file(root + "/whole/metrics.jsonl");
  EXPECT_NE(metrics.find("val_loss"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(test::read_file(root + "/whole/job.json"))["loss"], "block");
  test::expect_distill_resumes_exactly(o, root);

  // The capture's model moved away: refused before the run directory exists.
  const std::string moved = root + "/moved_capture";
  fs::copy(o.capture, moved, fs::copy_options::recursive);
  nlohmann::json man = nlohmann::json::parse(test::read_file(moved + "/manifest.json"));
  man["model"]["path"] = root + "/no_such_model";
  std::ofstream(moved + "/manifest.json") << man.dump();
  std::string out;
  const int rc = test::run_command(test::cli_path() + " distill --capture " + moved + " --feature-map hedgehog --features 8 --steps 2 --loss block --out " +
                                       root + "/refused 2>&1", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find(root + "/no_such_model"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/refused"));
}

}  // namespace test_block_loss

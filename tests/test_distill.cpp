// Layerwise distillation (distill.h): the batched log-domain loss against an explicit float64
// computation from core's own feature maps, training that lowers the loss on the bundled model's
// capture, resume equal to an uninterrupted run, a cancelled run leaving only complete files, and
// the errors a user meets.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>  // at::NoGradGuard: not pulled in by ATen.h in LibTorch 2.x
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attnscope/capture/capture.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/layer_maps.h"
#include "attnscope/distill/distributed.h"
#include "attnscope/base/error.h"
#include "attnscope/base/job.h"
#include "attnscope/model/model.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_distill {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

using test::bundled_capture;

DistillOptions base_options(const std::string& map, const std::string& loss, int64_t steps) {
  DistillOptions o;
  o.capture = bundled_capture();
  o.feature_map = map;
  o.loss = parse_distill_loss(loss);
  o.features = 16;
  o.steps = steps;
  o.seed = 11;
  o.batch = 2;
  o.l2_pairs = 256;
  return o;
}

// Explicit float64 reference of one head: phi from core's FeatureMap, Ahat by its definition.
struct Ref {
  double kl = 0, ce = 0, l2 = 0, output = 0;  // output: mean over defined rows and d_v of (A V - Ahat V)^2
  int64_t undefined_rows = 0, zero_entries = 0;  // t2r: rows with no positive weight, Khat_ij = 0 in defined rows
};

Ref reference(const LayerMaps& maps, const at::Tensor& q, const at::Tensor& k, const at::Tensor& pairs,
              const at::Tensor& v = {}) {
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), d = q.size(3);
  const int64_t dv = v.defined() ? v.size(3) : 0;
  Ref r;
  double l2_sum = 0;
  for (int64_t h = 0; h < H; ++h) {
    auto fm = maps.head_map(h);
    for (int64_t b = 0; b < B; ++b) {
      const at::Tensor qd = q[b][h].to(at::kDouble), kd = k[b][h].to(at::kDouble);
      const at::Tensor pq = fm->query_features(qd), pk = fm->key_features(kd);  // [L, M]
      auto Q = qd.accessor<double, 2>();
      auto K = kd.accessor<double, 2>();
      auto PQ = pq.accessor<double, 2>();
      auto PK = pk.accessor<double, 2>();
      std::vector<std::vector<double>> s(L, std::vector<double>(L)), kh(L, std::vector<double>(L));
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0, f = 0;
          for (int64_t c = 0; c < d; ++c) dot += Q[i][c] * K[j][c];
          for (int64_t m = 0; m < pq.size(1); ++m) f += PQ[i][m] * PK[j][m];
          s[i][j] = dot / std::sqrt(double(d));
          kh[i][j] = std::max(f, 0.0);  // signed (Fourier) kernels are clamped at 0 (SPEC 5)
        }
      std::vector<double> row_max(L);
      for (int64_t i = 0; i < L; ++i) {
        double mx = -1e300, z = 0, zh = 0;
        for (int64_t j = 0; j <= i; ++j) mx = std::max(mx, s[i][j]);
        row_max[i] = mx;
        for (int64_t j = 0; j <= i; ++j) z += std::exp(s[i][j] - mx), zh += kh[i][j];
        // A row with no positive weight has no Ahat: left out (core's undefined rows); a zero entry
        // of a defined row has its Ahat floored at 1e-30 (distill.h).
        if (!(zh > 0)) {
          ++r.undefined_rows;
          continue;
        }
        std::vector<double> y(size_t(dv), 0.0), yh(size_t(dv), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          if (kh[i][j] == 0) ++r.zero_entries;
          const double a = std::exp(s[i][j] - mx) / z, ah = std::max(kh[i][j] / zh, 1e-30);
          r.kl += a * std::log(a / ah);
          r.ce += -a * std::log(ah);
          for (int64_t c = 0; c < dv; ++c) {
            const double vj = v[b][h][j][c].item<double>();
            y[size_t(c)] += a * vj;
            yh[size_t(c)] += kh[i][j] / zh * vj;
          }
        }
        for (int64_t c = 0; c < dv; ++c) r.output += (y[size_t(c)] - yh[size_t(c)]) * (y[size_t(c)] - yh[size_t(c)]);
      }
      auto P = pairs.accessor<int64_t, 2>();
      for (int64_t p = 0; p < pairs.size(0); ++p) {
        const int64_t i = P[p][0], j = P[p][1];
        const double diff = kh[i][j] / std::exp(row_max[i]) - std::exp(s[i][j] - row_max[i]);
        l2_sum += diff * diff;
      }
    }
  }
  r.kl /= double(B * H * L - r.undefined_rows);
  r.ce /= double(B * H * L - r.undefined_rows);
  r.l2 = l2_sum / double(B * H * pairs.size(0));
  if (dv) r.output /= double((B * H * L - r.undefined_rows) * dv);
  return r;
}


nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(test::read_file(path)); }

}  // namespace

TEST(Distill, BatchedLossEqualsFloat64ReferenceForEveryLossAndMap) {
  at::manual_seed(5);
  const at::Tensor q = at::randn({2, 3, 12, 8}) * 1.5, k = at::randn({2, 3, 12, 8}) * 1.5;
  const at::Tensor v = at::randn({2, 3, 12, 8}) * 2;
  at::Tensor pairs = at::empty({20, 2}, at::kLong);
  auto pa = pairs.accessor<int64_t, 2>();
  for (int64_t p = 0; p < 20; ++p) {
    pa[p][0] = (p * 7) % 12;
    pa[p][1] = (p * 7) % 12 * p / 19;
  }
  struct Case { std::string map; bool tied; std::string activation; };
  for (const Case& c : {Case{"learned-prf", true, "exp"}, Case{"hedgehog", true, "exp"}, Case{"hedgehog", false, "exp"},
                        Case{"hedgehog", true, "softmax"}, Case{"t2r", true, "exp"}, Case{"t2r", false, "exp"},
                        Case{"flex-stationary", true, "exp"}}) {
    DistillOptions o;
    o.feature_map = c.map;
    o.tied = c.tied;
    o.activation = c.activation;
    o.seed = 9;
    LayerMaps maps = init_layer_maps(o, 1, 3, 8, 16);
    // Away from the initialization, so alpha, b and every head differ.
    for (auto& [name, t] : maps.params) t.add_(at::randn(t.sizes()) * 0.3);
    const Ref ref = reference(maps, q, k, pairs, v);
    const double kl = layer_loss(maps, q, k, DistillLoss::Kl).item<double>();
    const double out = layer_loss(maps, q, k, DistillLoss::Output, {}, v).item<double>();
    const double ce = layer_loss(maps, q, k, DistillLoss::Softmax).item<double>();
    const double l2 = layer_loss(maps, q, k, DistillLoss::L2, pairs).item<double>();
    SCOPED_TRACE(c.map + (c.tied ? " tied " : " untied ") + c.activation);
    EXPECT_GT(ref.kl, 1e-3);
    // The Fourier kernel goes negative here: the clamp at 0 is exercised, not just stated.
    if (c.map == "flex-stationary") {
      EXPECT_GT(ref.zero_entries, 0);
    }
    EXPECT_NEAR(kl, ref.kl, 2e-5 + 1e-4 * ref.kl);
    EXPECT_NEAR(ce, ref.ce, 1e-4 * ref.ce);
    EXPECT_NEAR(l2, ref.l2, 1e-6 + 1e-4 * ref.l2);
    EXPECT_GT(ref.output, 1e-4);
    EXPECT_NEAR(out, ref.output, 1e-6 + 1e-4 * ref.output);
    EXPECT_NEAR(layer_kl(maps, q, k), ref.kl, 2e-5 + 1e-4 * ref.kl);
  }
}

TEST(Distill, T2rLossLeavesOutRowsWithNoPositiveWeight) {
  // Biases pushed down so that ReLU cuts most features: rows with no positive weight and zero
  // entries in defined rows, where a log-domain loss would be -inf or NaN.
  at::manual_seed(6);
  const at::Tensor q = at::randn({2, 3, 12, 8}), k = at::randn({2, 3, 12, 8});
  at::Tensor pairs = at::empty({20, 2}, at::kLong);
  auto pa = pairs.accessor<int64_t, 2>();
  for (int64_t p = 0; p < 20; ++p) pa[p][0] = (p * 5) % 12, pa[p][1] = (p * 5) % 12 * p / 19;
  DistillOptions o;
  o.feature_map = "t2r";
  o.tied = false;
  LayerMaps maps = init_layer_maps(o, 0, 3, 8, 6);
  for (auto& [name, t] : maps.params)
    if (name.size() >= 1 && name.back() == 'b') t.sub_(at::full(t.sizes(), 0.9));
  const at::Tensor v = at::randn({2, 3, 12, 8});
  const Ref ref = reference(maps, q, k, pairs, v);
  ASSERT_GT(ref.undefined_rows, 0);
  ASSERT_LT(ref.undefined_rows, 2 * 3 * 12);
  ASSERT_GT(ref.zero_entries, 0);
  for (auto& p : maps.params) p.second.requires_grad_(true);
  const at::Tensor kl = layer_loss(maps, q, k, DistillLoss::Kl);
  EXPECT_NEAR(kl.item<double>(), ref.kl, 1e-4 * ref.kl);
  EXPECT_NEAR(layer_loss(maps, q, k, DistillLoss::Softmax).item<double>(), ref.ce, 1e-4 * ref.ce);
  EXPECT_NEAR(layer_loss(maps, q, k, DistillLoss::L2, pairs).item<double>(), ref.l2, 1e-6 + 1e-4 * ref.l2);
  const at::Tensor out = layer_loss(maps, q, k, DistillLoss::Output, {}, v);
  EXPECT_NEAR(out.item<double>(), ref.output, 1e-6 + 1e-4 * ref.output);
  out.backward();
  for (auto& p : maps.params) EXPECT_TRUE(p.second.grad().isfinite().all().item<bool>()) << "output " << p.first;
  for (auto& p : maps.params) p.second.mutable_grad().zero_();
  kl.backward();
  for (auto& p : maps.params) {
    EXPECT_TRUE(p.second.grad().isfinite().all().item<bool>()) << p.first;
    EXPECT_GT(p.second.grad().abs().sum().item<double>(), 0) << p.first;
  }
}

TEST(Distill, LossStaysFiniteForLargeQueryNorms) {
  // |x|^2 / sqrt(d) of several hundred: phi itself overflows float32, the log-domain loss does not.
  at::manual_seed(2);
  const at::Tensor q = at::randn({1, 2, 16, 8}) * 12, k = at::randn({1, 2, 16, 8}) * 12;
  DistillOptions o;
  o.feature_map = "learned-prf";
  LayerMaps maps = init_layer_maps(o, 0, 2, 8, 32);
  for (auto& p : maps.params) p.second.requires_grad_(true);
  const at::Tensor loss = layer_loss(maps, q, k, DistillLoss::Kl);
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  for (auto& p : maps.params) EXPECT_TRUE(p.second.grad().isfinite().all().item<bool>()) << p.first;
}

TEST(Distill, TrainingLowersLossAndHeldOutKlOnBundledCapture) {
  for (const auto& [map, loss] : std::vector<std::pair<std::string, std::string>>{{"learned-prf", "kl"}, {"hedgehog", "softmax"}, {"learned-prf", "l2"}, {"t2r", "kl"}, {"flex-stationary", "kl"}, {"hedgehog", "output"}}) {
    const std::string run = test::temp_dir("distill_train") + "/run";
    DistillOptions o = base_options(map, loss, 50);
    const auto t0 = std::chrono::steady_clock::now();
    const DistillResult r = distill(o, run);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_EQ(r.layers.size(), 4u);
    for (const auto& l : r.layers) {
      std::printf("%s %s layer %d: loss %.4f -> %.4f, val KL %.4f -> %.4f\n", map.c_str(), loss.c_str(), l.layer,
                  l.initial_loss, l.final_loss, l.initial_val_kl, l.val_kl);
      EXPECT_LT(l.final_loss, l.initial_loss) << map << " " << loss << " layer " << l.layer;
      EXPECT_LT(l.val_kl, l.initial_val_kl) << map << " " << loss << " layer " << l.layer;
    }
    double first = 0, last = 0, kl0 = 0, kl1 = 0;
    for (const auto& l : r.layers) first += l.initial_loss, last += l.final_loss, kl0 += l.initial_val_kl, kl1 += l.val_kl;
    // The softmax loss is the row entropy of A (fixed) plus the KL: only the KL part can fall.
    if (loss != "softmax") {
      EXPECT_LT(last, 0.8 * first) << map << " " << loss;
    }
    EXPECT_LT(kl1, 0.8 * kl0) << map << " " << loss;
    std::printf("%s %s: %.2f ms per step (4 layers x 4 heads, 2 windows x 64 tokens, M = 16)\n", map.c_str(),
                loss.c_str(), 1000 * s / 50);
  }
}

TEST(Distill, StrategyDimsAreThoseOfAllocate) {
  const std::string root = test::temp_dir("distill_strategy");
  const std::string cli = test::cli_path();
  for (const std::string strategy : {"dof", "dof-clip", "fix"}) {
    std::string out;
    const std::string dof_args = " --capture " + bundled_capture() + " --strategy " + strategy + " --budget 24 --lambda 2^-6 --samples 128";
    int rc = test::run_command("(" + cli + " allocate" + dof_args + " --json 2>/dev/null)", &out);  // stdout alone
    ASSERT_EQ(rc, 0) << out;
    const auto want = nlohmann::json::parse(out)["dims"].get<std::vector<int64_t>>();
    ASSERT_EQ(want.size(), 4u);
    const std::string run = root + "/" + strategy;
    rc = test::run_command(cli + " distill" + dof_args + " --feature-map learned-prf --steps 1 --out " + run + " 2>&1", &out);
    ASSERT_EQ(rc, 0) << out;
    const auto job = read_json(run + "/job.json");
    EXPECT_EQ(job["dims"].get<std::vector<int64_t>>(), want) << strategy;
    EXPECT_EQ(job["strategy"], strategy);
    const auto maps = test::read_tensors(run + "/feature_maps.safetensors");
    for (int s = 0; s < 4; ++s)
      EXPECT_EQ(maps.at(feature_map_tensor_name(s, 0, "z")).size(0), want[size_t(s)]) << strategy << " layer " << s;
    if (strategy == "dof") {
      std::printf("dof dims at C = 24, lambda 2^-6: %d %d %d %d\n", int(want[0]), int(want[1]), int(want[2]), int(want[3]));
      EXPECT_NE(want, std::vector<int64_t>(4, 24));  // the bundled model's layers differ in DoF
    }
  }
  std::string out;
  const std::string base = cli + " distill --capture " + bundled_capture() + " --feature-map learned-prf --steps 1 --out " + root + "/x";
  EXPECT_EQ(test::run_command(base + " --features 8 --strategy dof --budget 8 2>&1", &out), 2) << out;
  EXPECT_EQ(test::run_command(base + " 2>&1", &out), 2) << out;
  EXPECT_EQ(test::run_command(base + " --strategy dof 2>&1", &out), 2) << out;
  EXPECT_FALSE(fs::exists(root + "/x/report.json"));
}

TEST(Distill, RunDirectoryFilesFollowSpec6And7) {
  const std::string run = test::temp_dir("distill_files") + "/run";
  DistillOptions o = base_options("hedgehog", "kl", 12);
  o.tied = false;
  o.checkpoint_every = 5;
  distill(o, run);
  const auto job = read_json(run + "/job.json");
  EXPECT_EQ(job["feature_map"]["name"], "hedgehog");
  EXPECT_EQ(job["steps"], 12);
  EXPECT_EQ(job["dims"], nlohmann::json({16, 16, 16, 16}));
  // metrics.jsonl: every line parses; per layer, training steps run 1..12 in order; validation at
  // 5, 10 and 12.
  std::istringstream in(test::read_file(run + "/metrics.jsonl"));
  std::string line;
  std::map<int, std::vector<int64_t>> train_steps, val_steps;
  while (std::getline(in, line)) {
    const auto m = nlohmann::json::parse(line);
    if (m.contains("loss")) {
      train_steps[m["layer"].get<int>()].push_back(m["step"].get<int64_t>());
      EXPECT_TRUE(m.contains("lr") && m.contains("elapsed_s"));
    } else {
      val_steps[m["layer"].get<int>()].push_back(m["step"].get<int64_t>());
      EXPECT_TRUE(m.contains("val_kl") && m.contains("val_loss"));
    }
  }
  ASSERT_EQ(train_steps.size(), 4u);
  for (auto& [layer, steps] : train_steps) {
    ASSERT_EQ(steps.size(), 12u);
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], int64_t(i + 1));
    EXPECT_EQ(val_steps[layer], (std::vector<int64_t>{5, 10, 12}));
  }
  const auto rep = read_json(run + "/report.json");
  ASSERT_EQ(rep["layers"].size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(rep["layers"][s]["layer"], s);
    EXPECT_TRUE(rep["layers"][s]["final_loss"].is_number());
    EXPECT_TRUE(rep["layers"][s]["val_kl"].is_number());
  }
  // SPEC 7 names and shapes: untied hedgehog, d = 32, M = 16 -> d' = 8.
  const auto maps = test::read_tensors(run + "/feature_maps.safetensors");
  EXPECT_EQ(maps.size(), 4u * 4u * 4u);
  EXPECT_EQ(feature_map_tensor_name(3, 2, "q.W"), "layers.3.heads.2.feature_map.q.W");
  ASSERT_TRUE(maps.count("layers.3.heads.2.feature_map.k.b"));
  EXPECT_EQ(maps.at("layers.3.heads.2.feature_map.q.W").sizes(), (at::IntArrayRef{32, 8}));
  EXPECT_EQ(maps.at("layers.3.heads.2.feature_map.k.b").sizes(), (at::IntArrayRef{8}));
  EXPECT_EQ(maps.at("layers.0.heads.0.feature_map.q.W").scalar_type(), at::kFloat);
  EXPECT_FALSE(test::read_file(run + "/log.txt").empty());
}

TEST(Distill, ResumeAfterCancelEqualsUninterruptedRun) {
  const std::string root = test::temp_dir("distill_resume");
  DistillOptions o = base_options("learned-prf", "kl", 20);
  o.schedule = LrSchedule::Cosine;
  o.checkpoint_every = 10;
  distill(o, root + "/whole");

  // A run killed at step 13: the checkpoint of step 10 is there, whole, and nothing final is.
  const ProgressFn kill_at_13 = [](double, const std::string& what) {
    if (what.rfind("step 13/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(distill(o, root + "/killed", kill_at_13), Cancelled);
  std::vector<std::string> ck;
  for (const auto& e : fs::directory_iterator(root + "/killed/checkpoints")) ck.push_back(e.path().filename().string());
  EXPECT_EQ(ck, std::vector<std::string>{"checkpoint.safetensors"});
  EXPECT_EQ(SafetensorsFile(root + "/killed/checkpoints/checkpoint.safetensors").metadata().at("step"), "10");
  EXPECT_FALSE(fs::exists(root + "/killed/report.json"));
  EXPECT_FALSE(fs::exists(root + "/killed/feature_maps.safetensors"));
  EXPECT_EQ(run_state(root + "/killed"), RunState::Killed);
  EXPECT_EQ(run_state(root + "/whole"), RunState::Finished);

  resume_distill(root + "/killed");  // everything from job.json
  const auto a = test::read_tensors(root + "/whole/feature_maps.safetensors");
  const auto b = test::read_tensors(root + "/killed/feature_maps.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (const auto& [name, t] : a) max_diff = std::max(max_diff, (t - b.at(name)).abs().max().item<double>());
  std::printf("resume: max |uninterrupted - resumed| = %.3g over %zu tensors\n", max_diff, a.size());
  EXPECT_LE(max_diff, 1e-6);
  const auto ra = read_json(root + "/whole/report.json"), rb = read_json(root + "/killed/report.json");
  for (int s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(ra["layers"][s]["final_loss"].get<double>(), rb["layers"][s]["final_loss"].get<double>());
    EXPECT_DOUBLE_EQ(ra["layers"][s]["initial_loss"].get<double>(), rb["layers"][s]["initial_loss"].get<double>());
    EXPECT_DOUBLE_EQ(ra["layers"][s]["val_kl"].get<double>(), rb["layers"][s]["val_kl"].get<double>());
  }
  // The resumed metrics read as one run: the steps after the checkpoint appear once.
  std::istringstream in(test::read_file(root + "/killed/metrics.jsonl"));
  std::string line;
  int64_t prev = 0, n = 0;
  while (std::getline(in, line)) {
    const auto m = nlohmann::json::parse(line);
    if (!m.contains("loss") || m["layer"].get<int>() != 0) continue;
    EXPECT_EQ(m["step"].get<int64_t>(), prev + 1);
    prev = m["step"].get<int64_t>();
    ++n;
  }
  EXPECT_EQ(n, 20);
}

TEST(Distill, ErrorsNameTheProblem) {
  DistillOptions o = base_options("prf", "kl", 2);
  const std::string e = test::error_of([&] { distill(o, test::temp_dir("distill_err") + "/run"); });
  EXPECT_NE(e.find("learned-prf, hedgehog"), std::string::npos) << e;

  const std::string bad = test::temp_dir("distill_alloc") + "/alloc.json";
  std::ofstream(bad) << "{\"dims\": [16, 16]}";
  DistillOptions a = base_options("learned-prf", "kl", 2);
  a.features = 0;
  a.allocation = bad;
  const std::string e2 = test::error_of([&] { distill_dims(a, 4, 4, nullptr); });
  EXPECT_NE(e2.find(bad), std::string::npos) << e2;
  EXPECT_NE(e2.find("2 layers"), std::string::npos) << e2;
  std::ofstream(bad) << "not json";
  EXPECT_NE(test::error_of([&] { distill_dims(a, 4, 4, nullptr); }).find(bad), std::string::npos);
  std::ofstream(bad) << "{\"dims\": [8, 16, 24, 32]}";
  const auto dims = distill_dims(a, 4, 4, nullptr);
  EXPECT_EQ(dims, (std::vector<std::vector<int64_t>>{{8, 8, 8, 8}, {16, 16, 16, 16}, {24, 24, 24, 24}, {32, 32, 32, 32}}));

  const std::string run = test::temp_dir("distill_nock") + "/run";
  fs::create_directories(run);
  EXPECT_NE(test::error_of([&] { resume_distill(run); }).find("job.json"), std::string::npos);
}

TEST(Distill, CliTrainsListsAndRefusesFixedMaps) {
  const std::string root = test::temp_dir("distill_cli");
  std::string out;
  const std::string cli = test::cli_path();
  int rc = test::run_command(cli + " distill --capture " + bundled_capture() + " --feature-map elu --features 16 --steps 2 --out " + root + "/x 2>&1", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("learned-prf, hedgehog"), std::string::npos) << out;
  rc = test::run_command(cli + " distill --capture " + bundled_capture() + " --feature-map learned-prf --features 8 --steps 3 --seed 1 --out " + root + "/run 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  rc = test::run_command(cli + " jobs " + root + "/run 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("finished"), std::string::npos) << out;
  EXPECT_NE(out.find("3/3"), std::string::npos) << out;
  EXPECT_NE(out.find("learned-prf"), std::string::npos) << out;
  // A finished run is not resumed (issue 19: a run without a checkpoint now resumes from step 0,
  // so a finished one is refused for what it is).
  fs::remove(root + "/run/checkpoints/checkpoint.safetensors");
  rc = test::run_command(cli + " distill --resume " + root + "/run 2>&1", &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("has finished"), std::string::npos) << out;
}

TEST(Distill, KillNineThenResumeEqualsUninterruptedRun) {
  const std::string root = test::temp_dir("distill_kill9");
  const std::string cli = test::cli_path();
  const std::string args = " --capture " + bundled_capture() +
                           " --feature-map learned-prf --features 8 --steps 200 --checkpoint-every 5 --seed 4 --schedule cosine";
  std::string out;
  // Killed (SIGKILL: no handler, no cleanup) as soon as its first checkpoint is on disk.
  const std::string killed = root + "/killed";
  int rc = test::run_command("(" + cli + " distill" + args + " --out " + killed + " >/dev/null 2>&1 & pid=$!; " +
                                 "while [ ! -f " + killed + "/checkpoints/checkpoint.safetensors ]; do sleep 0.01; done; " +
                                 "kill -9 $pid; wait $pid) 2>&1",
                             &out);
  if (fs::exists(killed + "/report.json")) GTEST_SKIP() << "the run finished before the kill";
  EXPECT_EQ(rc, 137) << out;  // the shell's status of a SIGKILLed child
  EXPECT_EQ(run_state(killed), RunState::Killed);
  rc = test::run_command(cli + " jobs " + killed + " 2>&1", &out);
  EXPECT_NE(out.find("killed"), std::string::npos) << out;
  rc = test::run_command(cli + " distill --resume " + killed + " 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  rc = test::run_command(cli + " distill" + args + " --out " + root + "/whole 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  const auto a = test::read_tensors(root + "/whole/feature_maps.safetensors");
  const auto b = test::read_tensors(killed + "/feature_maps.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double max_diff = 0;
  for (const auto& [name, t] : a) max_diff = std::max(max_diff, (t - b.at(name)).abs().max().item<double>());
  std::printf("kill -9 + resume: max |uninterrupted - resumed| = %.3g\n", max_diff);
  EXPECT_LE(max_diff, 1e-6);
  EXPECT_EQ(run_state(killed), RunState::Finished);
}

TEST(Distill, AllocationDimsPerLayerAndValidationCapture) {
  const std::string root = test::temp_dir("distill_alloc_run");
  std::ofstream(root + "/alloc.json") << "{\"strategy\": \"dof\", \"dims\": [8, 16, 8, 24]}";
  DistillOptions o = base_options("learned-prf", "softmax", 3);
  o.features = 0;
  o.allocation = root + "/alloc.json";
  o.val_capture = bundled_capture();
  const DistillResult r = distill(o, root + "/run");
  ASSERT_EQ(r.layers.size(), 4u);
  const auto maps = test::read_tensors(root + "/run/feature_maps.safetensors");
  const std::vector<int64_t> dims = {8, 16, 8, 24};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(r.layers[s].features, dims[s]);
    EXPECT_EQ(maps.at(feature_map_tensor_name(s, 3, "z")).sizes(), (at::IntArrayRef{dims[s], 32}));
    EXPECT_EQ(maps.at(feature_map_tensor_name(s, 3, "alpha")).sizes(), (at::IntArrayRef{dims[s]}));
    EXPECT_TRUE(std::isfinite(r.layers[s].val_kl));
  }
  // The maps on disk are the trained ones: layer 2's heads read back from the file give the
  // validation KL the run reported (the validation capture is the whole bundled capture).
  CaptureStore cap(bundled_capture());
  const at::Tensor q = cap.layer_tensor(2, "q"), k = cap.layer_tensor(2, "k");
  LayerMaps m;
  m.map = "learned-prf";
  m.heads = 4;
  m.d = 32;
  m.features = dims[2];
  m.params = {{"z", at::stack({maps.at(feature_map_tensor_name(2, 0, "z")), maps.at(feature_map_tensor_name(2, 1, "z")),
                               maps.at(feature_map_tensor_name(2, 2, "z")), maps.at(feature_map_tensor_name(2, 3, "z"))})},
              {"alpha", at::stack({maps.at(feature_map_tensor_name(2, 0, "alpha")), maps.at(feature_map_tensor_name(2, 1, "alpha")),
                                   maps.at(feature_map_tensor_name(2, 2, "alpha")), maps.at(feature_map_tensor_name(2, 3, "alpha"))})}};
  double kl = 0;
  for (int64_t t = 0; t < q.size(0); t += 4) {
    const int64_t n = std::min<int64_t>(4, q.size(0) - t);
    kl += layer_kl(m, q.narrow(0, t, n), k.narrow(0, t, n)) * double(n);
  }
  EXPECT_NEAR(kl / double(q.size(0)), r.layers[2].val_kl, 1e-5);

  DistillOptions bad = base_options("hedgehog", "kl", 2);
  bad.activation = "softmax-joint";
  EXPECT_NE(test::error_of([&] { distill(bad, root + "/bad"); }).find("activation"), std::string::npos);
}

// Not a check: the training cost of one GPT-2-small-shaped layer (12 heads, d = 64, M = 64) on one
// window of 1024 tokens, forward and backward, per loss. Run with --gtest_also_run_disabled_tests.
TEST(Distill, DISABLED_BenchGpt2SmallLayer) {
  at::manual_seed(1);
  const at::Tensor q = at::randn({1, 12, 1024, 64}), k = at::randn({1, 12, 1024, 64});
  DistillOptions o;
  o.feature_map = "learned-prf";
  LayerMaps maps = init_layer_maps(o, 0, 12, 64, 64);
  for (auto& p : maps.params) p.second.requires_grad_(true);
  at::Tensor pairs = at::empty({4096, 2}, at::kLong);
  auto pa = pairs.accessor<int64_t, 2>();
  for (int64_t p = 0; p < 4096; ++p) pa[p][0] = (p * 131) % 1024, pa[p][1] = ((p * 131) % 1024) * (p % 7) / 7;
  for (const std::string loss : {"l2", "softmax", "kl"}) {
    layer_loss(maps, q, k, parse_distill_loss(loss), pairs).backward();  // warm-up
    const int reps = 3;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) layer_loss(maps, q, k, parse_distill_loss(loss), pairs).backward();
    const double ms = 1000 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("%s: %.1f ms per layer per 1024-token window; x 12 layers = %.0f ms per sample\n", loss.c_str(), ms, 12 * ms);
  }
}

TEST(Distill, LearnedPrfFarBelowUntrainedOnSpikyStories260KHeads) {
  const std::string bin = test::shared_model_file("stories260K/stories260K.bin");
  if (bin.empty()) GTEST_SKIP() << "missing " << test::shared_models() << "/stories260K/stories260K.bin";
  std::vector<TextDocument> docs;
  for (const auto& e : fs::directory_iterator(test::source_dir() + "/resources/texts")) {
    std::ifstream in(e.path());
    docs.push_back({e.path().string(), std::string(std::istreambuf_iterator<char>(in), {})});
  }
  std::sort(docs.begin(), docs.end(), [](auto& a, auto& b) { return a.source < b.source; });
  CaptureOptions co;
  co.seq_len = 64;
  co.num_seqs = 8;
  const std::string root = test::temp_dir("distill_stories");
  capture_to_dir(load_model(bin), docs, co, root + "/cap");
  DistillOptions o;
  o.capture = root + "/cap";
  o.feature_map = "learned-prf";
  o.features = 16;
  o.steps = 150;
  o.lr = 0.1;  // paper 000's 0.02 gets there too, in more steps than a unit test should take
  o.seed = 1;
  const DistillResult r = distill(o, root + "/run");
  ASSERT_EQ(r.layers.size(), 5u);
  for (const auto& l : r.layers) {
    std::printf("stories260K layer %d: held-out KL untrained %.2f -> trained %.2f nats\n", l.layer, l.initial_val_kl, l.val_kl);
    EXPECT_LT(l.val_kl, 0.2 * l.initial_val_kl) << "layer " << l.layer;
  }
}

// Beyond one map per layer (below): per-head dimensions (heads grouped by M, each group one stacked
// LayerMaps), flex-nonstationary, the trainable head views the model runs with, and direct training
// (the whole model with linear attention in place, next-token loss). Independent checks: core's
// own feature maps in float64, a central finite difference, a per-layer run of the same heads.
namespace {

std::string bundled_model() { return test::source_dir() + "/resources/models/brown-gpt2-mini"; }
std::string sample_text() { return test::source_dir() + "/resources/texts/brown_news_ca44.txt"; }

double max_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (const auto& [name, t] : a) m = std::max(m, (t - b.at(name)).abs().max().item<double>());
  return m;
}

// `model` with every weight in float64 (shared config), for finite differences.
Model float64_model(const Model& m) {
  ModelWeights w = m.weights();
  w.compute = at::kDouble;
  auto to64 = [](at::Tensor& t) {
    if (t.defined()) t = t.to(at::kDouble);
  };
  to64(w.tok_emb), to64(w.pos_emb), to64(w.lnf_w), to64(w.lnf_b), to64(w.lm_head);
  for (LayerWeights& l : w.layers)
    for (at::Tensor* t : {&l.ln1_w, &l.ln1_b, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.bo, &l.ln2_w, &l.ln2_b,
                          &l.w_up, &l.b_up, &l.w_gate, &l.w_down, &l.b_down})
      to64(*t);
  return Model(m.config(), w);
}

}  // namespace

// --- the head views the model runs with -------------------------------------------------------

TEST(DistillGroups, TrainableHeadMapFeaturesEqualCoreFeatureMaps) {
  at::manual_seed(3);
  const at::Tensor x = at::randn({2, 10, 8}, at::kDouble) * 1.5;
  struct Case { std::string map; bool tied; std::string activation; };
  for (const Case& c : {Case{"learned-prf", true, "exp"}, Case{"hedgehog", false, "exp"}, Case{"hedgehog", true, "softmax"},
                        Case{"t2r", false, "exp"}, Case{"flex-stationary", true, "exp"},
                        Case{"flex-nonstationary", true, "exp"}}) {
    SCOPED_TRACE(c.map + " " + c.activation);
    DistillOptions o;
    o.feature_map = c.map;
    o.tied = c.tied;
    o.activation = c.activation;
    LayerMaps maps = init_layer_maps(o, 0, 3, 8, 12);
    for (auto& [name, t] : maps.params) t.add_(at::randn(t.sizes()) * 0.3);
    for (int64_t h = 0; h < 3; ++h) {
      const auto view = maps.trainable_head_map(h);
      const auto core = maps.head_map(h);
      EXPECT_EQ(view->feature_dim(), 12);
      const at::Tensor a = view->query_features(x), b = core->query_features(x);
      const at::Tensor ak = view->key_features(x), bk = core->key_features(x);
      ASSERT_EQ(a.sizes(), b.sizes());
      EXPECT_LE((a - b).abs().max().item<double>(), 1e-6 * (1 + b.abs().max().item<double>())) << "head " << h;
      EXPECT_LE((ak - bk).abs().max().item<double>(), 1e-6 * (1 + bk.abs().max().item<double>())) << "head " << h;
    }
  }
}

// --- flex-nonstationary -------------------------------------------------------------------------

TEST(DistillGroups, FlexNonstationaryLossEqualsFloat64Reference) {
  at::manual_seed(8);
  const at::Tensor q = at::randn({2, 3, 12, 8}) * 1.5, k = at::randn({2, 3, 12, 8}) * 1.5;
  for (const std::string init : {"gaussian", "independent"}) {
    SCOPED_TRACE(init);
    DistillOptions o;
    o.feature_map = "flex-nonstationary";
    o.init = init;
    o.seed = 4;
    LayerMaps maps = init_layer_maps(o, 2, 3, 8, 16);
    ASSERT_EQ(maps.params.size(), 3u);
    EXPECT_EQ(maps.params[1].first, "omega2");
    for (auto& [name, t] : maps.params) t.add_(at::randn(t.sizes()) * 0.3);  // w1 != w2, tau per head
    const Ref ref = reference(maps, q, k, at::zeros({1, 2}, at::kLong));
    const double kl = ref.kl, ce = ref.ce;
    EXPECT_GT(ref.zero_entries, 0);  // the kernel goes negative here: the clamp is exercised
    EXPECT_GT(kl, 1e-3);
    for (auto& p : maps.params) p.second.requires_grad_(true);
    const at::Tensor loss = layer_loss(maps, q, k, DistillLoss::Kl);
    EXPECT_NEAR(loss.item<double>(), kl, 2e-5 + 1e-4 * kl);
    EXPECT_NEAR(layer_loss(maps, q, k, DistillLoss::Softmax).item<double>(), ce, 1e-4 * ce);
    loss.backward();
    for (auto& p : maps.params) {
      EXPECT_TRUE(p.second.grad().isfinite().all().item<bool>()) << p.first;
      EXPECT_GT(p.second.grad().abs().sum().item<double>(), 0) << p.first;
    }
  }
}

TEST(DistillGroups, FlexNonstationaryTrainingLowersHeldOutKl) {
  const DistillOptions o = base_options("flex-nonstationary", "kl", 50);
  const std::string run = test::temp_dir("distill_flexns") + "/run";
  const DistillResult r = distill(o, run);
  ASSERT_EQ(r.layers.size(), 4u);
  double kl0 = 0, kl1 = 0;
  for (const auto& l : r.layers) {
    std::printf("flex-nonstationary layer %d: loss %.4f -> %.4f, val KL %.4f -> %.4f\n", l.layer, l.initial_loss,
                l.final_loss, l.initial_val_kl, l.val_kl);
    EXPECT_LT(l.val_kl, l.initial_val_kl) << "layer " << l.layer;
    kl0 += l.initial_val_kl, kl1 += l.val_kl;
  }
  EXPECT_LT(kl1, 0.8 * kl0);
  const auto maps = test::read_tensors(run + "/feature_maps.safetensors");
  EXPECT_EQ(maps.at(feature_map_tensor_name(3, 1, "omega2")).sizes(), (at::IntArrayRef{8, 32}));
}

// --- per-head dimensions ------------------------------------------------------------------------

TEST(DistillGroups, PerHeadDimsTrainLikePerLayerRunsResumeAndConvert) {
  const std::string root = test::temp_dir("distill_perhead");
  const std::vector<std::vector<int64_t>> dims = {{8, 16, 8, 16}, {16, 16, 16, 16}, {8, 8, 24, 8}, {24, 16, 8, 8}};
  std::ofstream(root + "/alloc.json") << nlohmann::json{{"strategy", "per-head"}, {"dims", dims}}.dump();
  DistillOptions o;
  o.capture = bundled_capture();
  o.feature_map = "learned-prf";
  o.loss = DistillLoss::Kl;
  o.allocation = root + "/alloc.json";
  o.steps = 20;
  o.seed = 5;
  o.batch = 2;
  o.checkpoint_every = 10;
  const DistillResult r = distill(o, root + "/run");

  // job.json keeps per-head dims; report and maps follow them head by head.
  EXPECT_EQ(read_json(root + "/run/job.json")["dims"], nlohmann::json(dims));
  const auto rep = read_json(root + "/run/report.json");
  EXPECT_EQ(rep["layers"][0]["head_features"], nlohmann::json(dims[0]));
  EXPECT_FALSE(rep["layers"][1].contains("head_features"));  // one group: as a per-layer run
  // Layer 2 trains as two groups: heads {0, 1, 3} with M = 8 and head {2} with M = 24.
  const auto groups2 = init_layer_groups(o, 2, dims[2], 32);
  EXPECT_EQ(groups2.size(), 2u);
  EXPECT_EQ(groups2[1].heads, std::vector<int64_t>{2});
  ASSERT_EQ(r.maps->maps.size(), 4u);
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 4; ++h) EXPECT_EQ(r.maps->maps[s][h]->feature_dim(), dims[s][h]) << s << " " << h;
  const auto maps = test::read_tensors(root + "/run/feature_maps.safetensors");
  EXPECT_EQ(maps.size(), 4u * 4u * 2u);
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 4; ++h)
      EXPECT_EQ(maps.at(feature_map_tensor_name(s, h, "z")).sizes(), (at::IntArrayRef{dims[s][h], 32})) << s << " " << h;
  for (const auto& l : r.layers) {
    EXPECT_LT(l.final_loss, l.initial_loss) << "layer " << l.layer;
    EXPECT_LT(l.val_kl, l.initial_val_kl) << "layer " << l.layer;
  }

  // A group trains as its heads would in a per-layer run of that M (same seeds and mini-batches;
  // the layer's loss there is a mean over 4 heads instead of 2, which AdamW's update ignores up to
  // its epsilon): heads 0 and 2 of layer 0 (M = 8) and heads 1 and 3 (M = 16).
  for (const int64_t m : {8, 16}) {
    DistillOptions p = o;
    p.allocation.clear();
    p.features = m;
    distill(p, root + "/perlayer" + std::to_string(m));
    const auto pm = test::read_tensors(root + "/perlayer" + std::to_string(m) + "/feature_maps.safetensors");
    // Where a gradient entry is near AdamW's epsilon (1e-8) the two scales step slightly
    // differently: the maps agree to within 1% of how far training moved them, while a head in the
    // wrong group, with the wrong seed or the wrong slice of q, k would differ by about that much.
    LayerMaps init = init_layer_maps(p, 0, 4, 32, m);
    for (int h = 0; h < 4; ++h) {
      if (dims[0][size_t(h)] != m) continue;
      for (size_t i = 0; i < init.params.size(); ++i) {
        const std::string name = feature_map_tensor_name(0, h, init.params[i].first);
        const double moved = (pm.at(name) - init.params[i].second[h]).abs().max().item<double>();
        EXPECT_GT(moved, 0.05) << name;
        EXPECT_LE((maps.at(name) - pm.at(name)).abs().max().item<double>(), 0.01 * moved) << name;
      }
    }
    // ... and its layer's head-weighted loss is the groups' mean: layer 1 is all M = 16.
    if (m == 16) {
      EXPECT_DOUBLE_EQ(r.layers[1].final_loss, read_json(root + "/perlayer16/report.json")["layers"][1]["final_loss"].get<double>());
    }
  }

  // Killed at step 13, resumed: the same maps as the uninterrupted run.
  const ProgressFn kill_at_13 = [](double, const std::string& what) {
    if (what.rfind("step 13/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(distill(o, root + "/killed", kill_at_13), Cancelled);
  EXPECT_FALSE(fs::exists(root + "/killed/feature_maps.safetensors"));
  resume_distill(root + "/killed");
  EXPECT_LE(max_diff(maps, test::read_tensors(root + "/killed/feature_maps.safetensors")), 1e-6);

  // convert --job takes the per-head run; the converted model's batch and recurrent forms agree.
  std::string out;
  const int rc = test::run_command(test::cli_path() + " convert --job " + root + "/run --out " + root + "/conv 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(read_json(root + "/conv/config.json")["attnscope"]["dims"], nlohmann::json(dims));
  LoadedModel m = load_model(root + "/conv");
  ASSERT_NE(m.model->feature_maps(), nullptr);
  EXPECT_EQ(m.model->feature_maps()->maps[3][0]->feature_dim(), 24);
  at::NoGradGuard ng;
  const at::Tensor ids = at::randint(0, 4096, {1, 24}, at::kLong);
  const at::Tensor batch = m.model->forward(ids), rec = m.model->forward_recurrent(ids);
  EXPECT_TRUE(batch.isfinite().all().item<bool>());
  EXPECT_LE((batch - rec).abs().max().item<double>(), 1e-3 * (1 + batch.abs().max().item<double>()));
}

TEST(DistillGroups, PerHeadStrategyGivesAllocatesDims) {
  const std::string root = test::temp_dir("distill_perhead_strategy");
  const std::string args = " --capture " + bundled_capture() + " --strategy per-head --budget 12 --lambda 2^-6 --samples 128";
  std::string out;
  int rc = test::run_command("(" + test::cli_path() + " allocate" + args + " --json 2>/dev/null)", &out);
  ASSERT_EQ(rc, 0) << out;
  const auto want = nlohmann::json::parse(out)["dims"];
  ASSERT_TRUE(want[0].is_array()) << want;
  rc = test::run_command(test::cli_path() + " distill" + args + " --feature-map t2r --steps 2 --out " + root + "/run 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  const auto job = read_json(root + "/run/job.json");
  const auto maps = test::read_tensors(root + "/run/feature_maps.safetensors");
  bool differ = false;
  for (int s = 0; s < 4; ++s)
    for (int h = 0; h < 4; ++h) {
      const int64_t m = want[s][h].get<int64_t>();
      differ = differ || m != want[s][0].get<int64_t>();
      EXPECT_EQ(maps.at(feature_map_tensor_name(s, h, "b")).size(0), m) << s << " " << h;
      const auto& jd = job["dims"][s];
      EXPECT_EQ(jd.is_array() ? jd[h].get<int64_t>() : jd.get<int64_t>(), m);
    }
  std::printf("per-head dims at C = 12: %s\n", want.dump().c_str());
  EXPECT_TRUE(differ);  // the bundled model's heads differ in DoF
}

// --- direct training ----------------------------------------------------------------------------

TEST(DistillGroups, DirectLossGradientEqualsFiniteDifference) {
  LoadedModel tiny = load_model(test::tiny_gpt2_dir());
  Model model = float64_model(*tiny.model);
  const ModelConfig& c = model.config();
  at::manual_seed(4);
  const at::Tensor ids = at::randint(0, c.vocab_size, {2, 12}, at::kLong);
  for (const std::string map : {"learned-prf", "flex-nonstationary", "hedgehog", "t2r"}) {
    SCOPED_TRACE(map);
    DistillOptions o;
    o.feature_map = map;
    const std::vector<std::vector<int64_t>> head_dims = {{4, 6}, {6, 6}};  // layer 0: two groups
    std::vector<std::vector<HeadGroup>> groups;
    for (int s = 0; s < c.n_layer; ++s) {
      groups.push_back(init_layer_groups(o, s, head_dims[size_t(s)], c.head_dim));
      for (HeadGroup& g : groups.back())
        for (auto& [name, t] : g.maps.params) {
          t = t + at::randn(t.sizes()) * 0.2;
          // t2r: biases pushed down so that ReLU cuts most features and some queries see no
          // positive weight (their 0/0 output is zeroed by the model; its gradient must be 0).
          if (map == "t2r" && name == "b") t = t - 0.6;
          t = t.to(at::kDouble).requires_grad_(true);
        }
    }
    ASSERT_EQ(groups[0].size(), 2u);
    model.set_feature_maps(group_feature_maps(groups));
    if (map == "t2r") {  // count the queries with no positive weight, from the layers' own q, k
      int64_t undefined = 0;
      CaptureHook hook;
      hook.on_layer = [&](const AttentionActivations& a) {
        for (const HeadGroup& g : groups[size_t(a.layer)])
          for (size_t i = 0; i < g.heads.size(); ++i) {
            const auto view = g.maps.trainable_head_map(int64_t(i));
            const at::Tensor pq = view->query_features(a.q.select(1, g.heads[i]));
            const at::Tensor pk = view->key_features(a.k.select(1, g.heads[i]));
            const at::Tensor row_sum = (at::matmul(pq, pk.transpose(-1, -2)).tril()).sum(-1);
            undefined += (row_sum == 0).sum().item<int64_t>();
          }
      };
      at::NoGradGuard ng;
      model.forward(ids, &hook);
      std::printf("t2r: %lld queries with no positive weight\n", static_cast<long long>(undefined));
      EXPECT_GT(undefined, 0);
    }
    const at::Tensor loss = direct_loss(model, ids);
    EXPECT_EQ(loss.scalar_type(), at::kDouble);
    loss.backward();
    EXPECT_FALSE(model.weights().layers[0].wq.requires_grad());
    for (const auto& layer : groups)
      for (const HeadGroup& g : layer)
        for (const auto& [name, p] : g.maps.params) EXPECT_TRUE(p.grad().isfinite().all().item<bool>()) << name;
    // One entry of every parameter of layer 0's second group and of layer 1: the one with the
    // largest gradient (t2r's cut features have none).
    for (auto* g : {&groups[0][1], &groups[1][0]})
      for (auto& [name, p] : g->maps.params) {
        const at::Tensor flat = p.detach().view({-1});
        const int64_t i = p.grad().view({-1}).abs().argmax().item<int64_t>();
        const double analytic = p.grad().view({-1})[i].item<double>();
        const double eps = 1e-5, old = flat[i].item<double>();
        at::NoGradGuard ng;
        flat[i] = old + eps;
        const double up = direct_loss(model, ids).item<double>();
        flat[i] = old - eps;
        const double down = direct_loss(model, ids).item<double>();
        flat[i] = old;
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(analytic, numeric, 1e-6 + 1e-5 * std::abs(numeric)) << name;
        EXPECT_GT(std::abs(numeric), 1e-7) << name;  // the entry matters
      }
  }
}

TEST(DistillGroups, DirectTrainingLowersHeldOutLossResumesAndConverts) {
  const std::string root = test::temp_dir("distill_direct");
  // The bundled sample texts in one file: 3300 words, 52 windows of 64 tokens.
  {
    std::ofstream all(root + "/texts.txt");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(test::source_dir() + "/resources/texts")) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) all << test::read_file(f) << "\n";
  }
  DistillOptions o;
  o.model = bundled_model();
  o.text = root + "/texts.txt";
  o.loss = DistillLoss::Direct;
  o.feature_map = "learned-prf";
  o.features = 8;
  o.seq_len = 64;
  o.steps = 20;
  o.batch = 4;
  o.lr = 0.05;
  o.lr_alpha = 0.2;
  o.seed = 2;
  o.checkpoint_every = 5;
  const DistillResult r = distill(o, root + "/whole");
  std::printf("direct: held-out loss %.4f -> %.4f (perplexity %.1f -> %.1f)\n", r.initial_val_loss, r.val_loss,
              std::exp(r.initial_val_loss), std::exp(r.val_loss));
  // The bundled model leans little on attention (its softmax loss on this text is no better than
  // the untrained maps'), so the gain is small: 0.013 nats here, against 0.005 asked.
  EXPECT_LT(r.val_loss, r.initial_val_loss - 0.005);
  ASSERT_EQ(r.layers.size(), 4u);
  for (const auto& l : r.layers) {
    std::printf("direct layer %d: attention KL %.3f -> %.3f\n", l.layer, l.initial_val_kl, l.val_kl);
    EXPECT_TRUE(std::isfinite(l.val_kl) && l.val_kl > 0);
  }
  const auto rep = read_json(root + "/whole/report.json");
  EXPECT_EQ(rep["loss"], "direct");
  EXPECT_NEAR(rep["val_perplexity"].get<double>(), std::exp(r.val_loss), 1e-9 * std::exp(r.val_loss));
  EXPECT_TRUE(rep["layers"][2]["val_kl"].is_number());
  const auto job = read_json(root + "/whole/job.json");
  EXPECT_EQ(job["text"], root + "/texts.txt");

  // Killed at step 13 (checkpoint at 10), resumed: the same maps and held-out loss.
  const ProgressFn kill_at_8 = [](double, const std::string& what) {
    if (what.rfind("step 13/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(distill(o, root + "/killed", kill_at_8), Cancelled);
  EXPECT_FALSE(fs::exists(root + "/killed/report.json"));
  const DistillResult rr = resume_distill(root + "/killed");
  const auto a = test::read_tensors(root + "/whole/feature_maps.safetensors");
  EXPECT_LE(max_diff(a, test::read_tensors(root + "/killed/feature_maps.safetensors")), 1e-6);
  EXPECT_NEAR(rr.val_loss, r.val_loss, 1e-6);
  EXPECT_DOUBLE_EQ(rr.initial_val_loss, r.initial_val_loss);

  // The run converts; the converted model's held-out loss is the run's.
  std::string out;
  int rc = test::run_command(test::cli_path() + " convert --job " + root + "/whole --out " + root + "/conv 2>&1", &out);
  ASSERT_EQ(rc, 0) << out;
  LoadedModel m = load_model(root + "/conv");
  ASSERT_NE(m.model->feature_maps(), nullptr);
  at::NoGradGuard ng;
  const at::Tensor ids = at::randint(0, 4096, {1, 20}, at::kLong);
  EXPECT_LE((m.model->forward(ids) - m.model->forward_recurrent(ids)).abs().max().item<double>(), 1e-3);
}

TEST(DistillGroups, DirectBadInputIsAClearError) {
  const std::string root = test::temp_dir("distill_direct_bad");
  const std::string cli = test::cli_path();
  const std::string base = cli + " distill --model " + bundled_model() + " --loss direct --features 8 --steps 2";
  std::string out;
  EXPECT_EQ(test::run_command(base + " --out " + root + "/a 2>&1", &out), 2) << out;
  EXPECT_NE(out.find("--text"), std::string::npos) << out;
  EXPECT_EQ(test::run_command(base + " --text " + root + "/missing.txt --out " + root + "/b 2>&1", &out), 1) << out;
  EXPECT_NE(out.find(root + "/missing.txt"), std::string::npos) << out;
  std::ofstream(root + "/empty.txt").close();
  EXPECT_EQ(test::run_command(base + " --text " + root + "/empty.txt --out " + root + "/c 2>&1", &out), 1) << out;
  EXPECT_NE(out.find(root + "/empty.txt"), std::string::npos) << out;
  std::ofstream(root + "/short.txt") << "A few words.";
  EXPECT_EQ(test::run_command(base + " --text " + root + "/short.txt --out " + root + "/d 2>&1", &out), 1) << out;
  EXPECT_NE(out.find(root + "/short.txt"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/d/report.json"));
  // Neither --capture nor --model: nothing to train.
  EXPECT_EQ(test::run_command(cli + " distill --loss direct --text " + sample_text() + " --features 8 --out " + root +
                                  "/e 2>&1", &out), 2) << out;
}

// The benchmark hook runs real training steps: two AdamW updates (warm-up and timed) lower the loss
// they train on, layerwise (per layer q, k) and direct (the model on ids).
TEST(DistillGroups, StepSecondsHookTrainsWhatItTimes) {
  CaptureStore cap(bundled_capture());
  DistillBench b;
  b.options.feature_map = "learned-prf";
  b.options.features = 16;
  b.options.lr = 0.05;
  for (const std::string loss : {"kl", "l2", "direct"}) {
    SCOPED_TRACE(loss);
    b.options.loss = parse_distill_loss(loss);
    b.groups.clear();
    b.q.clear();
    b.k.clear();
    for (int s = 0; s < 4; ++s) {
      b.groups.push_back(init_layer_groups(b.options, s, std::vector<int64_t>(4, 16), 32));
      b.q.push_back(cap.layer_tensor(s, "q").narrow(0, 0, 2));
      b.k.push_back(cap.layer_tensor(s, "k").narrow(0, 0, 2));
    }
    LoadedModel m = load_model(bundled_model());
    b.model = m.model.get();
    b.ids = at::randint(0, 4096, {2, 64}, at::kLong);
    const auto layer1_kl = [&] { return layer_kl(b.groups[1][0].maps, b.q[1], b.k[1]); };
    const auto model_loss = [&] {
      at::NoGradGuard ng;
      Model lin(m.model->config(), m.model->weights());
      lin.set_feature_maps(group_feature_maps(b.groups));
      return direct_loss(lin, b.ids).item<double>();
    };
    const double before = loss == "direct" ? model_loss() : layer1_kl();
    const double seconds = distill_step_seconds(b);
    const double after = loss == "direct" ? model_loss() : layer1_kl();
    std::printf("%s: one step %.2f ms; %s %.4f -> %.4f\n", loss.c_str(), 1000 * seconds,
                loss == "direct" ? "loss" : "layer 1 KL", before, after);
    EXPECT_GT(seconds, 0);
    EXPECT_LT(after, before);
  }
}

// --device cuda computes what the CPU computes, for every code path of the loss (log domain, ReLU
// kernel, clamped Fourier kernel, l2 pairs): at the same parameters the loss and every gradient
// agree to float tolerance. Whole runs are compared only for learned-prf, whose training is smooth:
// t2r's ReLU and flex's clamp make a 20-step AdamW trajectory chaotic (on the CPU alone, 1e-6
// relative noise in q, k moves t2r's maps by 0.19 and flex-stationary's by 0.28 of their size after
// 20 steps, learned-prf's by 4e-6), so equal trajectories would only test rounding luck. The whole
// runs also check the files' format and that a CUDA run resumes on the CPU. Skipped where there is
// no CUDA; run on the GPU machine (packaging/gpu_check.sh).
TEST(DistillDevice, CudaEqualsCpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA here (CPU-only LibTorch or no GPU): run on a GPU machine";
  const CaptureStore cap(bundled_capture());
  const at::Device cuda(at::kCUDA, 0);
  for (const auto& [map, loss] : std::vector<std::pair<std::string, std::string>>{
           {"learned-prf", "kl"}, {"learned-prf", "l2"}, {"hedgehog", "softmax"}, {"t2r", "softmax"},
           {"t2r", "l2"}, {"flex-stationary", "kl"}, {"flex-nonstationary", "kl"}}) {
    DistillOptions o = base_options(map, loss, 1);
    for (int s = 0; s < cap.num_layers(); ++s) {
      const at::Tensor q = cap.layer_tensor(s, "q").narrow(0, 0, 2).contiguous();
      const at::Tensor k = cap.layer_tensor(s, "k").narrow(0, 0, 2).contiguous();
      at::Tensor pairs;
      if (loss == "l2") pairs = at::stack({at::arange(64, at::kLong), at::arange(64, at::kLong).floor_divide(3)}, 1);
      LayerMaps on_cpu = init_layer_maps(o, s, cap.num_heads(), cap.head_dim(), 16), on_gpu = on_cpu;
      for (auto& p : on_cpu.params) p.second = p.second.clone().requires_grad_(true);
      for (auto& p : on_gpu.params) p.second = p.second.to(cuda).requires_grad_(true);
      const at::Tensor l_cpu = layer_loss(on_cpu, q, k, parse_distill_loss(loss), pairs);
      const at::Tensor l_gpu = layer_loss(on_gpu, q.to(cuda), k.to(cuda), parse_distill_loss(loss), pairs.defined() ? pairs.to(cuda) : pairs);
      l_cpu.backward();
      l_gpu.backward();
      EXPECT_NEAR(l_gpu.item<double>(), l_cpu.item<double>(), 1e-5 * std::max(1.0, std::abs(l_cpu.item<double>())))
          << map << " " << loss << " layer " << s;
      for (size_t i = 0; i < on_cpu.params.size(); ++i) {
        const at::Tensor g = on_cpu.params[i].second.grad(), h = on_gpu.params[i].second.grad().cpu();
        const double scale = std::max(1e-6, g.abs().max().item<double>());
        EXPECT_LE((g - h).abs().max().item<double>() / scale, 1e-4)
            << map << " " << loss << " layer " << s << " gradient of " << on_cpu.params[i].first;
      }
    }
  }
  const std::string root = test::temp_dir("distill_cuda");
  for (const std::string loss : {"kl", "l2"}) {
    DistillOptions o = base_options("learned-prf", loss, 20);
    distill(o, root + "/cpu-" + loss);
    o.device = Device::Cuda;
    const DistillResult r = distill(o, root + "/cuda-" + loss);
    EXPECT_EQ(read_json(root + "/cuda-" + loss + "/job.json")["device"], "cuda");
    EXPECT_EQ(r.maps->maps[0][0]->parameters()[0].device().type(), at::kCPU);
    const auto a = test::read_tensors(root + "/cpu-" + loss + "/feature_maps.safetensors");
    const auto b = test::read_tensors(root + "/cuda-" + loss + "/feature_maps.safetensors");
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (const auto& [tensor, t] : a) {
      ASSERT_EQ(b.at(tensor).scalar_type(), at::kFloat) << tensor;
      const double scale = std::max(1.0, t.abs().max().item<double>());
      worst = std::max(worst, (t - b.at(tensor)).abs().max().item<double>() / scale);
    }
    std::printf("learned-prf %s: max |cpu - cuda| / max(1, |cpu|) = %.3g after 20 steps\n", loss.c_str(), worst);
    EXPECT_LE(worst, 1e-4) << loss;
  }
  // Cancelled on CUDA at step 13, resumed on the CPU from the step-10 checkpoint.
  DistillOptions o = base_options("learned-prf", "kl", 20);
  o.checkpoint_every = 10;
  o.device = Device::Cuda;
  const ProgressFn cancel_at_13 = [](double, const std::string& what) {
    if (what.rfind("step 13/", 0) == 0) throw Cancelled();
  };
  EXPECT_THROW(distill(o, root + "/moved", cancel_at_13), Cancelled);
  resume_distill(root + "/moved", nullptr, Device::Cpu);
  const auto a = test::read_tensors(root + "/cpu-kl/feature_maps.safetensors");
  const auto b = test::read_tensors(root + "/moved/feature_maps.safetensors");
  double worst = 0;
  for (const auto& [tensor, t] : a) worst = std::max(worst, (t - b.at(tensor)).abs().max().item<double>());
  EXPECT_LE(worst, 1e-4);
}

TEST(DistillDevice, UnknownDeviceIsAUsageErrorAndMissingCudaIsClear) {
  const std::string root = test::temp_dir("distill_device_err");
  const std::string cli = test::cli_path();
  const std::string args = " distill --capture " + bundled_capture() + " --feature-map learned-prf --features 8 --steps 2";
  std::string out;
  int rc = test::run_command(cli + args + " --device tpu --out " + root + "/tpu 2>&1", &out);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("tpu"), std::string::npos) << out;
  EXPECT_NE(out.find("cpu"), std::string::npos) << out;
  EXPECT_NE(out.find("cuda"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/tpu"));
  const std::string e = test::error_of([&] { parse_device_name("cuda:7"); });
  EXPECT_NE(e.find("'cuda:7' is unknown (valid: cpu, cuda)"), std::string::npos) << e;
  if (at::hasCUDA()) return;  // the GPU machine runs CudaEqualsCpu instead
  rc = test::run_command(cli + args + " --device cuda --out " + root + "/cuda 2>&1", &out);
  EXPECT_EQ(rc, 1) << out;
  const bool says_why = out.find("this build has no CUDA") != std::string::npos || out.find("no CUDA device") != std::string::npos;
  EXPECT_TRUE(says_why) << out;
  EXPECT_NE(out.find("--device"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/cuda/job.json")) << "nothing is written for a device that is not there";
}

namespace {

// A TCP port free on the loopback right now (the kernel's pick for port 0).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free loopback port");
  ::close(fd);
  return ntohs(a.sin_port);
}

// Two ranks of the real CLI on the loopback, each with its own arguments after `distill`, its output
// in root/rank{0,1}.log; returns "rc0 rc1". Bounded: 120 s per rank, and the ranks' own c10d timeout.
std::string run_two_ranks(const std::string& root, const std::string& args0, const std::string& args1) {
  const std::string env = "export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(free_loopback_port()) + " ATTNSCOPE_DIST_TIMEOUT_S=30 OMP_NUM_THREADS=1; ";
  const std::string cli = " timeout 120 " + test::cli_path() + " distill ";
  std::string out;
  test::run_command("cd " + root + "/cwd1 && " + env + "RANK=1" + cli + args1 + " > " + root + "/rank1.log 2>&1 & p1=$!; " +
                        "cd " + root + " && " + env + "RANK=0" + cli + args0 + " > " + root + "/rank0.log 2>&1; r0=$?; " +
                        "wait $p1; echo \"$r0 $?\"",
                    &out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

// Layers 0, 2 train on rank 0 and 1, 3 on rank 1 (c10d Gloo over the loopback); rank 0's run
// directory equals the single process's (maps, losses, checkpoint with the AdamW moments, every
// layer's metrics), and rank 1 writes nothing, not even the run directory it was given.
TEST(DistillDistributed, TwoRanksOnLoopbackEqualOneProcess) {
  const std::string root = test::temp_dir("distill_dist");
  fs::create_directories(root + "/cwd1");
  const std::string args = "--capture " + bundled_capture() +
                           " --feature-map learned-prf --features 8 --steps 10 --checkpoint-every 4 --seed 2 --schedule cosine";
  std::string out;
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + test::cli_path() + " distill " + args + " --out " + root + "/one 2>&1", &out), 0) << out;
  const std::string rc = run_two_ranks(root, args + " --out " + root + "/two", args + " --out " + root + "/rank1-out");
  ASSERT_EQ(rc, "0 0") << test::read_file(root + "/rank0.log") << test::read_file(root + "/rank1.log");
  EXPECT_FALSE(fs::exists(root + "/rank1-out")) << "rank 1 created its run directory";
  EXPECT_TRUE(fs::is_empty(root + "/cwd1")) << "rank 1 wrote into its working directory";

  EXPECT_EQ(read_json(root + "/two/job.json")["world_size"], 2);
  EXPECT_EQ(read_json(root + "/one/job.json")["world_size"], 1);
  double worst = 0;
  for (const std::string file : {"feature_maps.safetensors", "checkpoints/checkpoint.safetensors"}) {
    const auto a = test::read_tensors(root + "/one/" + file), b = test::read_tensors(root + "/two/" + file);
    ASSERT_EQ(a.size(), b.size()) << file;
    for (const auto& [name, t] : a) {
      ASSERT_TRUE(b.count(name)) << file << " " << name;
      worst = std::max(worst, (t - b.at(name)).abs().max().item<double>());
    }
  }
  std::printf("2 ranks against 1 process: max |difference| of maps and AdamW moments = %.3g\n", worst);
  EXPECT_LE(worst, 1e-6);
  const auto ra = read_json(root + "/one/report.json"), rb = read_json(root + "/two/report.json");
  ASSERT_EQ(rb["layers"].size(), 4u);
  for (int s = 0; s < 4; ++s)
    for (const std::string key : {"initial_loss", "final_loss", "initial_val_kl", "val_kl"})
      EXPECT_NEAR(ra["layers"][s][key].get<double>(), rb["layers"][s][key].get<double>(), 1e-6) << key << " layer " << s;
  // metrics.jsonl: each step has every layer's training loss, equal to the single process's.
  const auto losses = [](const std::string& file) {
    std::map<std::pair<int64_t, int>, double> m;
    std::istringstream in(test::read_file(file));
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) m[{j["step"].get<int64_t>(), j["layer"].get<int>()}] = j["loss"].get<double>();
    }
    return m;
  };
  const auto la = losses(root + "/one/metrics.jsonl"), lb = losses(root + "/two/metrics.jsonl");
  ASSERT_EQ(lb.size(), 40u);
  for (const auto& [key, loss] : la) EXPECT_NEAR(lb.at(key), loss, 1e-6) << "step " << key.first << " layer " << key.second;
}

// A rank that fails makes the other fail too, soon (not after a hang), each naming its rank, and
// nothing final is written.
TEST(DistillDistributed, AFailingRankStopsTheOthersWithAClearError) {
  const std::string root = test::temp_dir("distill_dist_fail");
  fs::create_directories(root + "/cwd1");
  const std::string args = " --feature-map learned-prf --features 8 --steps 10 --out " + root + "/run";
  const auto t0 = std::chrono::steady_clock::now();
  const std::string rc = run_two_ranks(root, "--capture " + bundled_capture() + args, "--capture " + root + "/no-such-capture" + args);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string log0 = test::read_file(root + "/rank0.log"), log1 = test::read_file(root + "/rank1.log");
  EXPECT_EQ(rc, "1 1") << log0 << log1;
  EXPECT_NE(log1.find("rank 1: "), std::string::npos) << log1;
  EXPECT_NE(log1.find("no-such-capture"), std::string::npos) << log1;
  EXPECT_NE(log0.find("rank 0: "), std::string::npos) << log0;
  EXPECT_NE(log0.find("other ranks"), std::string::npos) << log0;
  EXPECT_FALSE(fs::exists(root + "/run/report.json"));
  EXPECT_LT(seconds, 60) << "the surviving rank should not wait for the whole timeout";
}

// The environment is read in this process (setenv), and once through the CLI for the exit code and
// that nothing is written.
TEST(DistillDistributed, BadEnvironmentNamesTheVariable) {
  const std::vector<std::string> names = {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "ATTNSCOPE_DIST_TIMEOUT_S"};
  std::map<std::string, std::string> saved;
  for (const auto& n : names)
    if (const char* v = std::getenv(n.c_str())) saved[n] = v;
  const auto set_env = [&](const std::map<std::string, std::string>& env) {
    for (const auto& n : names) ::unsetenv(n.c_str());
    for (const auto& [n, v] : env) ::setenv(n.c_str(), v.c_str(), 1);
  };
  const std::map<std::string, std::string> ok = {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  const auto with = [&](const std::string& name, const char* value) {
    auto env = ok;
    if (value) env[name] = value;
    else env.erase(name);
    return env;
  };
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {with("WORLD_SIZE", "two"), "WORLD_SIZE: 'two' is not an integer"},
      {with("WORLD_SIZE", "0"), "WORLD_SIZE: 0 is out of range"},
      {with("RANK", nullptr), "RANK: is not set"},
      {with("RANK", "2"), "RANK: 2 is not below WORLD_SIZE 2"},
      {with("RANK", "-1"), "RANK: -1 is out of range"},
      {with("RANK", "1x"), "RANK: '1x' is not an integer"},
      {with("MASTER_ADDR", nullptr), "MASTER_ADDR: is not set"},
      {with("MASTER_PORT", "http"), "MASTER_PORT: 'http' is not an integer"},
      {with("MASTER_PORT", "70000"), "MASTER_PORT: 70000 is out of range"}};
  for (const auto& [env, want] : cases) {
    set_env(env);
    const std::string e = test::error_of([] { dist_env_from_environment(); });
    EXPECT_NE(e.find("environment variable " + want), std::string::npos) << want << ": " << e;
  }
  set_env(with("ATTNSCOPE_DIST_TIMEOUT_S", "soon"));
  EXPECT_NE(test::error_of([] { dist_timeout_s(); }).find("ATTNSCOPE_DIST_TIMEOUT_S: 'soon' is not a positive number"),
            std::string::npos);
  set_env(ok);
  const DistEnv env = dist_env_from_environment();
  EXPECT_EQ(env.rank, 1);
  EXPECT_EQ(env.world, 2);
  EXPECT_EQ(env.master_port, 29500);
  set_env({{"WORLD_SIZE", "1"}, {"RANK", "5"}});  // one process: the rest is not read
  EXPECT_EQ(dist_env_from_environment().world, 1);
  set_env(saved);

  const std::string root = test::temp_dir("distill_dist_env");
  std::string out;
  const int rc = test::run_command("env WORLD_SIZE=2 RANK=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " + test::cli_path() +
                                       " distill --capture " + bundled_capture() +
                                       " --feature-map learned-prf --features 8 --steps 2 --out " + root + "/run 2>&1",
                                   &out);
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("environment variable RANK: 2 is not below WORLD_SIZE 2"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(root + "/run"));
}

// SIGTERM to rank 0 alone (as a scheduler stopping the job might) stops both ranks at the same step
// boundary, leaving rank 0's checkpoint whole; resumed with 2 ranks, the run ends where an
// uninterrupted single process does.
TEST(DistillDistributed, StopOnRankZeroStopsAllAndResumeEqualsUninterrupted) {
  const std::string root = test::temp_dir("distill_dist_stop");
  fs::create_directories(root + "/cwd1");
  const std::string args = "--capture " + bundled_capture() +
                           " --feature-map learned-prf --features 8 --steps 40 --checkpoint-every 5 --seed 5 --schedule cosine";
  const std::string run = root + "/two";
  // Rank 0 in the background; SIGTERM once its first checkpoint is on disk.
  const std::string env = "export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_loopback_port()) +
                          " ATTNSCOPE_DIST_TIMEOUT_S=30 OMP_NUM_THREADS=1; ";
  const std::string cli = " timeout 120 " + test::cli_path() + " distill ";
  std::string out;
  test::run_command("cd " + root + "/cwd1 && " + env + "RANK=1" + cli + args + " --out " + run + " > " + root +
                        "/rank1.log 2>&1 & p1=$!; cd " + root + " && " + env + "RANK=0" + cli + args + " --out " + run +
                        " > " + root + "/rank0.log 2>&1 & p0=$!; " + "while [ ! -f " + run +
                        "/checkpoints/checkpoint.safetensors ] && kill -0 $p0 2>/dev/null; do sleep 0.01; done; " +
                        "kill -TERM $p0; wait $p0; r0=$?; wait $p1; echo \"$r0 $?\"",
                    &out);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  if (fs::exists(run + "/report.json")) GTEST_SKIP() << "the run finished before the signal";
  const std::string log0 = test::read_file(root + "/rank0.log"), log1 = test::read_file(root + "/rank1.log");
  EXPECT_EQ(out, "1 1") << log0 << log1;
  EXPECT_NE(log0.find("cancelled"), std::string::npos) << log0;
  EXPECT_NE(log1.find("rank 1 stopped with the job"), std::string::npos) << log1;
  EXPECT_NE(log0.find("--resume " + run), std::string::npos) << log0;
  const int64_t stopped_at = std::stoll(SafetensorsFile(run + "/checkpoints/checkpoint.safetensors").metadata().at("step"));
  EXPECT_LT(stopped_at, 40);

  // Resume with the same 2 ranks (their options come from job.json), against one whole process.
  const std::string rc = run_two_ranks(root, "--resume " + run, "--resume " + run);
  ASSERT_EQ(rc, "0 0") << test::read_file(root + "/rank0.log") << test::read_file(root + "/rank1.log");
  ASSERT_EQ(test::run_command("OMP_NUM_THREADS=1 " + test::cli_path() + " distill " + args + " --out " + root + "/one 2>&1", &out), 0) << out;
  const auto a = test::read_tensors(root + "/one/feature_maps.safetensors"), b = test::read_tensors(run + "/feature_maps.safetensors");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, t] : a) worst = std::max(worst, (t - b.at(name)).abs().max().item<double>());
  std::printf("stopped at step %lld, resumed on 2 ranks: max |difference| from one whole process = %.3g\n",
              (long long)stopped_at, worst);
  EXPECT_LE(worst, 1e-6);
  EXPECT_TRUE(fs::is_empty(root + "/cwd1"));
}

// ---- issue 18: one name table per set, one option table, one command line -------------------------

// Every value of every name set has one name, reads back from it, and an unknown name is refused
// naming the quantity and every valid name.
TEST(NameTables, EveryValueRoundTripsAndUnknownNamesListTheValidOnes) {
  for (const std::string& n : distill_loss_names()) EXPECT_EQ(distill_loss_name(parse_distill_loss(n)), n);
  for (const std::string& n : lr_schedule_names()) EXPECT_EQ(lr_schedule_name(parse_lr_schedule(n)), n);
  for (const std::string& n : device_names()) EXPECT_EQ(device_name(parse_device_name(n)), n);
  for (const std::string& n : alloc_strategy_names()) EXPECT_EQ(alloc_strategy_name(parse_alloc_strategy(n)), n);
  EXPECT_EQ(distill_loss_names(), (std::vector<std::string>{"kl", "softmax", "l2", "output", "block", "direct"}));
  for (DistillLoss l : {DistillLoss::Kl, DistillLoss::Softmax, DistillLoss::L2, DistillLoss::Output, DistillLoss::Block,
                        DistillLoss::Direct})
    EXPECT_NE(std::string(distill_loss_name(l)), "?");
  try {
    parse_lr_schedule("linear");
    FAIL() << "an unknown schedule was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.quantity(), "schedule");
    EXPECT_NE(std::string(e.what()).find("'linear' is unknown (valid: constant, cosine)"), std::string::npos) << e.what();
  }
}

// The option table: every row writes back what it reads (a value that is not the default, so a
// row whose get or set forgot its field fails), and every long flag is distinct.
TEST(DistillOptionTable, EveryRowRoundTripsAndFlagsAreDistinct) {
  DistillOptions o;
  o.capture = "/c a p";
  o.val_capture = "/v";
  o.val_share = 0.375;
  o.model = "/m";
  o.text = "/t.txt";
  o.seq_len = 48;
  o.feature_map = "hedgehog";
  o.init = "random";
  o.tied = false;
  o.activation = "softmax";
  o.window = 32;
  o.decay = Decay::Fixed;
  o.decay_init = DecayInit::None;
  o.features = 24;
  o.allocation = "/a.json";
  o.strategy = AllocStrategy::DofClip;
  o.budget = 40;
  o.lambda = std::pow(2.0, -6.25);
  o.dof_samples = 300;
  o.state_budget = 123456;
  o.state_share = 0.3;
  o.loss = DistillLoss::L2;
  o.steps = 77;
  o.lr = 0.0123;
  o.lr_alpha = 0.456;
  o.weight_decay = 0.01;
  o.schedule = LrSchedule::Cosine;
  o.batch = 5;
  o.l2_pairs = 999;
  o.seed = 12345678901234ull;
  o.checkpoint_every = 13;
  o.device = Device::Cuda;
  o.compute = at::kHalf;
  std::set<std::string> flags;
  for (const auto& row : distill_option_table()) {
    EXPECT_TRUE(flags.insert(long_flag(row.flags)).second) << row.flags;
    DistillOptions fresh;
    fresh.strategy = o.strategy;  // budget, lambda and samples are written with a strategy only
    fresh.decay = o.decay;        // the decay's start with a decay only
    const std::string text = row.get(o);
    ASSERT_FALSE(text.empty()) << row.flags << ": the test sets every option";
    row.set(fresh, text);
    EXPECT_EQ(row.get(fresh), text) << row.flags;
    DistillOptions defaults;
    defaults.strategy = o.strategy;
    defaults.decay = o.decay;
    if (long_flag(row.flags) != "--strategy" && long_flag(row.flags) != "--decay") {
      EXPECT_NE(row.get(defaults), text) << row.flags << ": the test value equals the default";
    }
  }
  EXPECT_EQ(flags.size(), distill_option_table().size());
  // The command line quotes what the shell would split.
  EXPECT_NE(distill_command(o, "/r").find("--capture '/c a p'"), std::string::npos) << distill_command(o, "/r");
}

// Defect 2: job.json's command reproduces the job. Runs with every option (one source of dims
// each: features, an allocation file, a strategy; direct) are rerun from their recorded command
// with only --out changed: the same job.json options and the same maps, bit for bit.
TEST(DistillCommand, RecordedCommandRerunsToTheSameResult) {
  const std::string root = test::temp_dir("distill_command");
  std::ofstream(root + "/alloc.json") << "{\"dims\": [[4, 8, 4, 8], 8, 4, [8, 8, 4, 4]]}";
  std::vector<DistillOptions> jobs;
  {  // hedgehog, untied, softmax activation, a validation capture, cosine, weight decay
    DistillOptions o = base_options("hedgehog", "kl", 3);
    o.features = 8;
    o.tied = false;
    o.activation = "softmax";
    o.init = "random";
    o.val_capture = bundled_capture();
    o.schedule = LrSchedule::Cosine;
    o.lr = 0.015;
    o.weight_decay = 0.02;
    o.batch = 3;
    o.checkpoint_every = 2;
    jobs.push_back(o);
  }
  {  // learned-prf from an allocation file (per-head rows), l2 with its pairs, a validation share
    DistillOptions o = base_options("learned-prf", "l2", 3);
    o.features = 0;
    o.allocation = root + "/alloc.json";
    o.l2_pairs = 128;
    o.init = "orthogonal";
    o.val_share = 0.4;
    o.lr_alpha = 0.3;
    jobs.push_back(o);
  }
  {  // t2r from Algorithm 1 on the capture's DoF
    DistillOptions o = base_options("t2r", "softmax", 2);
    o.features = 0;
    o.strategy = AllocStrategy::Dof;
    o.budget = 8;
    o.lambda = std::pow(2.0, -6.5);
    o.dof_samples = 64;
    o.seed = 3;
    jobs.push_back(o);
  }
  {  // direct, on a text, from the capture's model
    DistillOptions o = base_options("learned-prf", "direct", 2);
    o.text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
    o.seq_len = 32;
    jobs.push_back(o);
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i));
    const std::string first = root + "/first" + std::to_string(i), again = root + "/again" + std::to_string(i);
    distill(jobs[i], first);
    const auto job = read_json(first + "/job.json");
    std::string command = job.at("command");
    const std::string out = " --out " + first;
    ASSERT_EQ(command.rfind("attnscope distill ", 0), 0u) << command;
    ASSERT_EQ(command.substr(command.size() - out.size()), out) << command;
    command = test::cli_path() + command.substr(std::string("attnscope").size(), command.size() - out.size() - 9) +
              " --out " + again;
    std::string log;
    ASSERT_EQ(test::run_command("cd / && " + command + " 2>&1", &log), 0) << command << "\n" << log;
    auto job2 = read_json(again + "/job.json");
    for (const char* key : {"command"}) {
      job2.erase(key);
    }
    auto job1 = job;
    job1.erase("command");
    EXPECT_EQ(job1.dump(), job2.dump());
    const auto a = test::read_tensors(first + "/feature_maps.safetensors"), b = test::read_tensors(again + "/feature_maps.safetensors");
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, t] : a) EXPECT_TRUE(at::equal(t, b.at(name))) << name;
  }
}

// Issue 15, item 5: a run records the window length it trained on, the converted model carries it,
// and eval says when it evaluates beyond it (at every length given).
TEST(DistillCommand, TrainedLengthTravelsToEvalWhichWarnsBeyondIt) {
  const std::string root = test::temp_dir("distill_trained_length");
  DistillOptions o = base_options("learned-prf", "kl", 2);
  distill(o, root + "/run");
  EXPECT_EQ(read_json(root + "/run/job.json")["trained_length"], 64);  // the capture's windows
  std::string out;
  ASSERT_EQ(test::run_command(test::cli_path() + " convert --job " + root + "/run --out " + root + "/conv 2>&1", &out), 0) << out;
  EXPECT_EQ(read_json(root + "/conv/config.json")["attnscope"]["trained_length"], 64);
  const std::string text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  ASSERT_EQ(test::run_command("(" + test::cli_path() + " eval --model " + root + "/conv --text " + text +
                                  " --seq-len 64,128 --speed-lengths 32 --min-seconds 0 --closeness-windows 1 --json 2>" +
                                  root + "/err.txt)",
                              &out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out);
  ASSERT_EQ(j["by_length"].size(), 2u);
  EXPECT_EQ(j["seq_len"], 64);
  EXPECT_EQ(j["by_length"][0]["beyond_trained_length"], false);
  EXPECT_EQ(j["by_length"][1]["beyond_trained_length"], true);
  EXPECT_EQ(j["by_length"][1]["trained_length"], 64);
  EXPECT_EQ(j["by_length"][1]["positions"].size(), 2u);
  EXPECT_FALSE(j["by_length"][0]["speed"].empty());
  EXPECT_TRUE(j["by_length"][1]["speed"].empty());
  const std::string err = test::read_file(root + "/err.txt");
  EXPECT_NE(err.find("trained on 64-token windows and are evaluated at 128"), std::string::npos) << err;
  EXPECT_EQ(err.find("evaluated at 64 "), std::string::npos) << err;
}

}  // namespace test_distill

// The analysis commands end to end on a capture of a tiny model: `dof`, `allocate`, `metrics`,
// `maps` and `report`. Numbers are checked against float64 computations written here from the
// capture files themselves (plain loops, LAPACK through at::linalg_eigvalsh), not against core.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/attention/attention.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/base/random.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_cli_analysis {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

int run(const std::string& args, std::string* out) { return test::run_command(test::cli_path() + " " + args, out); }
// stdout only (progress and notes go to stderr). The braces keep run_command's trailing 2>&1 from
// sending stderr back into the output.
int run_stdout(const std::string& args, std::string* out) {
  return test::run_command("{ " + test::cli_path() + " " + args + " 2>/dev/null; }", out);
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

using attnscope::test::read_file;

// One capture of the tiny model, made once: 3 windows x 24 tokens, 2 layers x 2 heads, d = 8.
const std::string& tiny_capture() {
  static const std::string dir = [] {
    const std::string d = test::temp_dir("cli_analysis") + "/cap";
    std::string out;
    const int rc = run("capture --model " + test::tiny_gpt2_dir() + " --text " + test::source_dir() +
                           "/resources/texts/brown_news_ca44.txt --seq-len 24 --num-seqs 3 --seed 5 --out " + d,
                       &out);
    EXPECT_EQ(rc, 0) << out;
    return d;
  }();
  return dir;
}

// Captured q and k of one head, float64 [T*L, d] each.
std::pair<at::Tensor, at::Tensor> head_qk(int layer, int head) {
  SafetensorsFile f(tiny_capture() + "/layer_" + std::to_string(layer) + ".safetensors");
  const at::Tensor q = f.tensor("q").select(1, head).to(at::kDouble);
  const at::Tensor k = f.tensor("k").select(1, head).to(at::kDouble);
  return {q.reshape({-1, q.size(-1)}).clone(), k.reshape({-1, k.size(-1)}).clone()};
}

// DoF of the vectors x [n, d], trace normalization, in plain float64 loops.
double reference_dof_of(const at::Tensor& x_in, double lambda) {
  const at::Tensor x = x_in.to(at::kDouble).contiguous();
  const int64_t n = x.size(0), d = x.size(1);
  const double* p = x.data_ptr<double>();
  double shift = 0;
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t c = 0; c < d; ++c) s += p[i * d + c] * p[i * d + c];
    shift = std::max(shift, s / std::sqrt(double(d)));
  }
  at::Tensor g = at::empty({n, n}, at::kDouble);
  double* gp = g.data_ptr<double>();
  double trace = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += p[i * d + c] * p[j * d + c];
      gp[i * n + j] = std::exp(s / std::sqrt(double(d)) - shift);
      if (i == j) trace += gp[i * n + j];
    }
  const at::Tensor mu = at::linalg_eigvalsh(g / trace).clamp_min(0);
  double dof = 0;
  for (int64_t i = 0; i < n; ++i) dof += mu[i].item<double>() / (mu[i].item<double>() + lambda);
  return dof;
}

// DoF of a head with every vector of Q u K.
double reference_dof(int layer, int head, double lambda) {
  auto [q, k] = head_qk(layer, head);
  return reference_dof_of(at::cat({q, k}, 0), lambda);
}

nlohmann::json parse(const std::string& s) { return nlohmann::json::parse(s); }

// RFC 4180 records (quoted fields may hold commas, quotes and newlines).
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(field), field.clear();
    } else if (c == '\n') {
      rows.back().push_back(field), field.clear();
      rows.emplace_back();
    } else {
      field += c;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

}  // namespace

TEST(CliAnalysis, DofJsonMatchesAnIndependentEigendecompositionAndSpectraAreReused) {
  const std::string sp = test::temp_dir("cli_dof") + "/spectra.safetensors";
  std::string out;
  // J far above the 2 x 3 x 24 = 144 vectors available: all of them, so the result is exact.
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --lambda 2^-4 --samples 100000 --json --out " + sp, &out), 0)
      << out;
  const auto j = parse(out);
  EXPECT_DOUBLE_EQ(j["lambda"].get<double>(), 0.0625);
  EXPECT_EQ(j["normalize"], "trace");
  ASSERT_EQ(j["layers"].size(), 2u);
  for (const auto& l : j["layers"]) {
    double mx = 0;
    ASSERT_EQ(l["heads"].size(), 2u);
    for (const auto& h : l["heads"]) {
      const double ref = reference_dof(l["layer"], h["head"], 0.0625);
      EXPECT_NEAR(h["dof"].get<double>(), ref, 1e-8 * ref) << "layer " << l["layer"] << " head " << h["head"];
      EXPECT_DOUBLE_EQ(h["lower"].get<double>(), h["dof"].get<double>()) << "exact spectrum: no gap";
      mx = std::max(mx, h["dof"].get<double>());
    }
    EXPECT_DOUBLE_EQ(l["dof"].get<double>(), mx) << "layer DoF = max over heads";
  }
  ASSERT_TRUE(fs::exists(sp));

  // A new lambda from the saved spectra: no capture needed (move it away to prove it).
  const std::string moved = tiny_capture() + ".moved";
  fs::rename(tiny_capture(), moved);
  const int rc = run_stdout("dof --spectra " + sp + " --lambda 0.25 --json", &out);
  fs::rename(moved, tiny_capture());
  ASSERT_EQ(rc, 0) << out;
  const auto j2 = parse(out);
  const double ref = reference_dof(1, 0, 0.25);
  EXPECT_NEAR(j2["layers"][1]["heads"][0]["dof"].get<double>(), ref, 1e-8 * ref);
}

TEST(CliAnalysis, DofBadInputsExitOneWithAClearMessage) {
  std::string out;
  EXPECT_EQ(run("dof --capture " + tiny_capture() + " --lambda abc", &out), 2);
  EXPECT_TRUE(contains(out, "abc")) << out;
  EXPECT_EQ(run("dof --capture " + tiny_capture() + " --lambda -1", &out), 2) << out;
  EXPECT_EQ(run("dof --capture /nonexistent/capture --lambda 2^-8", &out), 1);
  EXPECT_TRUE(contains(out, "/nonexistent/capture")) << out;
  EXPECT_EQ(run("dof --spectra " + test::source_dir() + "/README.md --lambda 2^-8", &out), 1) << out;
  EXPECT_EQ(run("dof --lambda 2^-8", &out), 1) << "neither --capture nor --spectra";
  EXPECT_EQ(run("dof --capture " + tiny_capture() + " --normalize sideways", &out), 2) << out;
}

TEST(CliAnalysis, AllocatePrintsAlgorithmOneInEveryFormat) {
  const std::string sp = test::temp_dir("cli_alloc") + "/spectra.safetensors";
  std::string out;
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --samples 100000 --out " + sp, &out), 0) << out;

  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --lambda 2^-4 --budget 16 --strategy dof --json", &out), 0) << out;
  const auto j = parse(out);
  const std::vector<double> nd = j["layer_dof"].get<std::vector<double>>();
  ASSERT_EQ(nd.size(), 2u);
  EXPECT_NEAR(nd[0], std::max(reference_dof(0, 0, 0.0625), reference_dof(0, 1, 0.0625)), 1e-8 * nd[0]);
  const double mean = (nd[0] + nd[1]) / 2;
  for (int s = 0; s < 2; ++s)
    EXPECT_EQ(j["dims"][s].get<int64_t>(), std::max<int64_t>(1, std::llround(16 * nd[s] / mean))) << "M_s = round(C N_s / mean N)";

  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --lambda 2^-4 --budget 16 --strategy per-head --json", &out), 0);
  const auto ph = parse(out);
  ASSERT_EQ(ph["dims"].size(), 2u);
  ASSERT_EQ(ph["dims"][0].size(), 2u) << "per-head: a dimension for every head";
  EXPECT_NEAR(ph["mean_cost"].get<double>(), 16.0, 1.0);

  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --lambda 2^-4 --budget 16 --strategy fix --markdown", &out), 0);
  EXPECT_TRUE(contains(out, "| Model")) << out;
  EXPECT_TRUE(contains(out, "| fix")) << out;
  EXPECT_TRUE(contains(out, "| Layer")) << "the Table-2 DoF grid follows: " << out;
  EXPECT_TRUE(contains(out, "**")) << "each layer's maximum DoF is bold";
  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --budget 16 --latex", &out), 0);
  EXPECT_TRUE(contains(out, "\\begin{tabular}")) << out;
  EXPECT_TRUE(contains(out, "\\textbf{")) << out;
  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --budget 16 --multiple-of 8 --csv", &out), 0);
  EXPECT_EQ(out.substr(0, out.find('\n')), "layer,head,dof,dim");
  std::istringstream rows(out);
  std::string line;
  std::getline(rows, line);
  int n = 0;
  while (std::getline(rows, line)) {
    const int64_t dim = std::stoll(line.substr(line.rfind(',') + 1));
    EXPECT_EQ(dim % 8, 0) << line;
    EXPECT_GE(dim, 8) << line;
    ++n;
  }
  EXPECT_EQ(n, 4) << "2 layers x 2 heads";

  EXPECT_EQ(run("allocate --spectra " + sp + " --budget 0", &out), 2) << out;
  EXPECT_TRUE(contains(out, "budget")) << out;
  EXPECT_EQ(run("allocate --spectra " + sp + " --strategy biggest", &out), 2) << out;
}

// `dof` shows the J each head actually used (not the J asked for), the [lower, upper] bounds of
// fast-path heads, and the DoF at J/2 beside the DoF at J, flagging heads that move by more than 10%.
// The J/2 value is checked against loops on the documented subset: sample_without_replacement(J, J/2,
// derive_seed(derive_seed(seed, layer, head), 1)) of the J sampled rows.
TEST(CliAnalysis, DofShowsTheJUsedBoundsAndConvergence) {
  std::string out;
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --lambda 2^-4 --samples 100000", &out), 0) << out;
  EXPECT_TRUE(contains(out, "J = 144")) << out;
  EXPECT_FALSE(contains(out, "100000 per head")) << out;

  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --lambda 2^-4 --samples 100000 --json", &out), 0) << out;
  const auto exact = parse(out);
  int unconverged = 0;
  for (const auto& l : exact["layers"])
    for (const auto& h : l["heads"]) {
      EXPECT_EQ(h["samples"].get<int64_t>(), 144);
      EXPECT_EQ(h["samples_half"].get<int64_t>(), 72);
      const double dof = h["dof"].get<double>(), half = h["dof_half"].get<double>();
      EXPECT_DOUBLE_EQ(h["relative_change"].get<double>(), std::abs(dof - half) / dof);
      EXPECT_EQ(h["converged"].get<bool>(), std::abs(dof - half) <= 0.1 * dof);
      unconverged += !h["converged"].get<bool>();
    }
  EXPECT_EQ(exact["unconverged_heads"].get<int>(), unconverged);
  // Layer 1 head 0 at J/2 from the capture files: every vector is in the J sample (J >= 144), in
  // the pooled order [queries; keys], and the J/2 subset is drawn from those 144 rows.
  {
    auto [q, k] = head_qk(1, 0);
    const at::Tensor x = at::cat({q, k}, 0);
    const auto sub = sample_without_replacement(144, 72, derive_seed(derive_seed(0, 1, 0), 1));
    const at::Tensor xs = x.index_select(0, at::tensor(sub, at::kLong)).contiguous();
    const double ref = reference_dof_of(xs, 0.0625);
    EXPECT_NEAR(exact["layers"][1]["heads"][0]["dof_half"].get<double>(), ref, 1e-8 * ref);
  }

  // Fast path (exact limit 50, a Krylov subspace of 10, and a tolerance so loose that the first
  // subspace is accepted, where the default 1% would send these flat spectra to the exact path):
  // certified bounds, in the JSON and on the text table.
  const std::string fast = " --lambda 2^-4 --samples 100000 --exact-limit 50 --top-k 10 --tolerance 1000";
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + fast + " --json", &out), 0) << out;
  const auto j = parse(out);
  for (const auto& l : j["layers"])
    for (const auto& h : l["heads"]) {
      EXPECT_FALSE(h["exact"].get<bool>());
      EXPECT_LT(h["lower"].get<double>(), h["upper"].get<double>());
      const double ref = reference_dof(l["layer"], h["head"], 0.0625);
      EXPECT_LE(h["lower"].get<double>(), ref * (1 + 1e-9));
      EXPECT_GE(h["upper"].get<double>(), ref * (1 - 1e-9));
    }
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + fast, &out), 0) << out;
  // Every head whose bounds differ at the printed precision shows them.
  int shown = 0;
  for (const auto& l : j["layers"])
    for (const auto& h : l["heads"]) {
      char lo[32], hi[32];
      std::snprintf(lo, sizeof lo, "%.2f", h["lower"].get<double>());
      std::snprintf(hi, sizeof hi, "%.2f", h["upper"].get<double>());
      if (std::string(lo) == hi) continue;
      const std::string bounds = "[" + std::string(lo) + ", " + hi + "]";
      EXPECT_TRUE(contains(out, bounds)) << "looked for " << bounds << " in\n" << out;
      ++shown;
    }
  EXPECT_GT(shown, 0) << out;
  EXPECT_TRUE(contains(out, "J = 144")) << out;
  // The unconverged flag: a '*' after a head and its legend, whenever some head moves by > 10%.
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --lambda 2^-4 --samples 100000", &out), 0) << out;
  EXPECT_EQ(contains(out, "* moves by more than 10%"), unconverged > 0) << out;
}

// `allocate` used the midpoint of fast-path bounds silently: it must say so (stderr, --json) when a
// head's bounds are wider than 1% of its value.
TEST(CliAnalysis, AllocateSaysWhenItUsesWideBounds) {
  const std::string dir = test::temp_dir("cli_alloc_bounds");
  std::string out;
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --samples 100000 --exact-limit 50 --top-k 10 --tolerance 1000 --out " + dir + "/fast.st", &out), 0) << out;
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --samples 100000 --out " + dir + "/exact.st", &out), 0) << out;

  // stdout to the JSON file, stderr (the notes) to err.
  std::string err;
  ASSERT_EQ(test::run_command("{ " + test::cli_path() + " allocate --spectra " + dir + "/fast.st --lambda 2^-4 --budget 16 --json > " + dir + "/fast.json; }", &err), 0) << err;
  EXPECT_TRUE(contains(err, "bounds")) << err;
  const auto j = parse(read_file(dir + "/fast.json"));
  ASSERT_TRUE(j.contains("wide_bounds")) << j.dump(2);
  EXPECT_FALSE(j["wide_bounds"].empty());
  for (const auto& w : j["wide_bounds"]) {
    EXPECT_GT(w["upper"].get<double>() - w["lower"].get<double>(), 0.01 * w["dof"].get<double>());
  }

  ASSERT_EQ(test::run_command("{ " + test::cli_path() + " allocate --spectra " + dir + "/exact.st --lambda 2^-4 --budget 16 --json > " + dir + "/exact.json; }", &err), 0) << err;
  EXPECT_FALSE(contains(err, "bounds")) << err;
  EXPECT_TRUE(parse(read_file(dir + "/exact.json"))["wide_bounds"].empty());
}

// --budget is the integer C: 64.7 used to become 64 and nan INT64_MIN without a word.
TEST(CliAnalysis, AllocateBudgetMustBeAnInteger) {
  const std::string sp = test::temp_dir("cli_budget") + "/spectra.safetensors";
  std::string out;
  ASSERT_EQ(run_stdout("dof --capture " + tiny_capture() + " --samples 100000 --out " + sp, &out), 0) << out;
  for (const char* bad : {"64.7", "nan", "inf", "abc", "16x", ""}) {
    EXPECT_EQ(run("allocate --spectra " + sp + " --budget '" + bad + "' --json", &out), 2) << "--budget '" << bad << "': " << out;
    EXPECT_TRUE(contains(out, "budget")) << out;
  }
  ASSERT_EQ(run_stdout("allocate --spectra " + sp + " --budget 16 --json", &out), 0) << out;
  const auto j = parse(out);
  EXPECT_TRUE(j["budget"].is_number_integer()) << j["budget"];
  EXPECT_EQ(j["budget"].get<int64_t>(), 16);
}

TEST(CliAnalysis, MetricsJsonAgreesWithPlainLoopsOnTheCapture) {
  std::string out;
  ASSERT_EQ(run_stdout("metrics --capture " + tiny_capture() + " --feature-map elu --json", &out), 0) << out;
  const auto j = parse(out);
  ASSERT_EQ(j["heads"].size(), 4u);
  for (const auto& h : j["heads"]) {
    EXPECT_DOUBLE_EQ(h["softmax"]["monotonicity"].get<double>(), 1.0) << "softmax is monotone by construction";
    EXPECT_DOUBLE_EQ(h["softmax"]["discordant_fraction"].get<double>(), 0.0);
    EXPECT_GE(h["linear"]["kl"].get<double>(), 0.0);
    EXPECT_GT(h["linear"]["kernel_rel_error"].get<double>(), 0.0);
    EXPECT_NEAR(h["linear"]["cross_entropy"].get<double>(),
                h["softmax"]["entropy"].get<double>() + h["linear"]["kl"].get<double>(), 1e-9)
        << "cross-entropy = H(softmax) + KL";
    EXPECT_DOUBLE_EQ(h["linear"]["nonpositive_row_fraction"].get<double>(), 0.0) << "1+ELU features are positive";
  }
  // Softmax entropy of layer 1, head 1 from the capture, in plain loops.
  auto [q, k] = head_qk(1, 1);
  const int64_t L = 24, d = q.size(1);
  double total = 0;
  for (int t = 0; t < 3; ++t)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(i + 1);
      double mx = -1e300, z = 0, h = 0;
      for (int64_t jj = 0; jj <= i; ++jj) {
        s[jj] = (q[t * L + i] * k[t * L + jj]).sum().item<double>() / std::sqrt(double(d));
        mx = std::max(mx, s[jj]);
      }
      for (double& v : s) z += (v = std::exp(v - mx));
      for (double v : s) h -= v / z * std::log(v / z);
      total += h;
    }
  for (const auto& h : j["heads"])
    if (h["layer"] == 1 && h["head"] == 1) {
      EXPECT_NEAR(h["softmax"]["entropy"].get<double>(), total / (3 * L), 1e-9);
    }

  ASSERT_EQ(run_stdout("metrics --capture " + tiny_capture() + " --csv --mixer-state 2", &out), 0);
  EXPECT_TRUE(contains(out.substr(0, out.find('\n')), "toeplitz")) << out;
  // Both are usage errors (exit 2): the option's value or a missing companion option.
  EXPECT_EQ(run("metrics --capture " + tiny_capture() + " --feature-map nonsense", &out), 2);
  EXPECT_TRUE(contains(out, "hedgehog")) << "lists the valid names: " << out;
  EXPECT_EQ(run("metrics --capture " + tiny_capture() + " --feature-map prf", &out), 2);
  EXPECT_TRUE(contains(out, "--features")) << "says which option is missing: " << out;
}

TEST(CliAnalysis, MapsWriteSoftmaxLinearAndDifferenceWithTokenLabels) {
  const std::string dir = test::temp_dir("cli_maps");
  std::string out;
  ASSERT_EQ(run("maps --capture " + tiny_capture() + " --layer 1 --head 0 --seq 2 --feature-map prf --features 32 --out " +
                    dir + "/h",
                &out),
            0)
      << out;
  for (const char* w : {"softmax", "linear", "diff"}) EXPECT_TRUE(fs::exists(dir + "/h_" + std::string(w) + ".csv")) << w;
  // The softmax CSV equals softmax(q k^T / sqrt d) of window 2 computed here.
  auto [q, k] = head_qk(1, 0);
  const int64_t L = 24, d = q.size(1);
  const at::Tensor qs = q.narrow(0, 2 * L, L), ks = k.narrow(0, 2 * L, L);
  const at::Tensor mask = at::ones({L, L}, at::kBool).triu(1);
  const at::Tensor A = at::softmax((qs.matmul(ks.t()) / std::sqrt(double(d))).masked_fill(mask, -INFINITY), -1);
  const auto rows = parse_csv(read_file(dir + "/h_softmax.csv"));
  ASSERT_EQ(rows.size(), size_t(L + 1)) << "a header and L query rows";
  ASSERT_EQ(rows[0].size(), size_t(L + 1)) << "a label column plus L keys";
  for (int64_t i = 0; i < L; ++i) {
    ASSERT_EQ(rows[i + 1].size(), size_t(L + 1));
    EXPECT_EQ(rows[i + 1][0], rows[0][i + 1]) << "the same token labels on both axes";
    for (int64_t jj = 0; jj < L; ++jj)
      EXPECT_NEAR(std::stod(rows[i + 1][jj + 1]), A[i][jj].item<double>(), 1e-6) << i << "," << jj;
  }
  if (fs::exists(dir + "/h_softmax.png")) {
    EXPECT_EQ(read_file(dir + "/h_softmax.png").substr(1, 3), "PNG");
  }

  EXPECT_EQ(run("maps --capture " + tiny_capture() + " --layer 7 --head 0 --out " + dir + "/x", &out), 1);
  EXPECT_TRUE(contains(out, "layer 7")) << out;
  EXPECT_EQ(run("maps --capture " + tiny_capture() + " --layer 0 --head 0 --out /nonexistent/dir/x", &out), 1) << out;
}

// `maps --window W` writes the hybrid map (SPEC 5, balance 1/2): the weights of the definition in
// plain loops (1+ELU features: phi(x) = x + 1 for x > 0, else e^x), the same numbers as core's
// hybrid_map on the captured q, k, and W >= L gives softmax's CSV byte for byte. `metrics
// --window` measures it: at W >= L every head's KL is 0. --window without a feature map is a
// usage error naming --window.
TEST(CliAnalysis, MapsAndMetricsWindowAreTheHybridMap) {
  const std::string dir = test::temp_dir("cli_maps_window");
  const int64_t L = 24, W = 5;
  std::string out;
  ASSERT_EQ(run("maps --capture " + tiny_capture() + " --layer 1 --head 0 --seq 2 --feature-map elu --window " +
                    std::to_string(W) + " --out " + dir + "/h",
                &out),
            0)
      << out;
  auto [q, k] = head_qk(1, 0);
  const int64_t d = q.size(1);
  const at::Tensor qs = q.narrow(0, 2 * L, L).contiguous(), ks = k.narrow(0, 2 * L, L).contiguous();
  auto phi = [](double x) { return x > 0 ? x + 1 : std::exp(x); };
  std::vector<std::vector<double>> H(L, std::vector<double>(L, 0.0));
  for (int64_t i = 0; i < L; ++i) {
    double z = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double w = 0;
      if (i - j < W) {
        w = 0.5 * std::exp((qs[i] * ks[j]).sum().item<double>() / std::sqrt(double(d)));
      } else {
        for (int64_t c = 0; c < d; ++c) w += phi(qs[i][c].item<double>()) * phi(ks[j][c].item<double>());
        w *= 0.5;
      }
      H[i][j] = w;
      z += w;
    }
    for (int64_t j = 0; j <= i; ++j) H[i][j] /= z;
  }
  // Core's hybrid_map on the same q, k and 1+ELU features.
  FeatureMapSpec spec;
  spec.name = "elu";
  spec.d = d;
  const auto map = make_feature_map(spec);
  const at::Tensor core = hybrid_map(map->scaled_query_features(qs), map->scaled_key_features(ks), qs, ks,
                                     {W, at::zeros({}, at::kDouble)});
  const auto rows = parse_csv(read_file(dir + "/h_linear.csv"));
  ASSERT_EQ(rows.size(), size_t(L + 1));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) {
      const double v = std::stod(rows[size_t(i + 1)][size_t(j + 1)]);
      EXPECT_NEAR(v, H[size_t(i)][size_t(j)], 1e-7 * std::max(1.0, H[size_t(i)][size_t(j)])) << i << "," << j;
      EXPECT_NEAR(v, core[i][j].item<double>(), 1e-8) << i << "," << j;
    }
  // The plain linear map (no --window) is another map.
  ASSERT_EQ(run("maps --capture " + tiny_capture() + " --layer 1 --head 0 --seq 2 --feature-map elu --out " + dir + "/p", &out), 0);
  EXPECT_NE(read_file(dir + "/p_linear.csv"), read_file(dir + "/h_linear.csv"));
  // Every key in the window: softmax's map, to the last digit.
  ASSERT_EQ(run("maps --capture " + tiny_capture() + " --layer 1 --head 0 --seq 2 --feature-map elu --window " +
                    std::to_string(L) + " --out " + dir + "/s",
                &out),
            0);
  EXPECT_EQ(read_file(dir + "/s_linear.csv"), read_file(dir + "/s_softmax.csv"));

  ASSERT_EQ(run_stdout("metrics --capture " + tiny_capture() + " --feature-map elu --window " + std::to_string(L) + " --json", &out), 0);
  const auto j = parse(out);
  EXPECT_EQ(j["feature_map"]["window"], L);
  for (const auto& h : j["heads"]) EXPECT_EQ(h["linear"]["kl"].get<double>(), 0.0) << h.dump();
  ASSERT_EQ(run_stdout("metrics --capture " + tiny_capture() + " --feature-map elu --window 3 --json", &out), 0);
  for (const auto& h : parse(out)["heads"]) EXPECT_GT(h["linear"]["kl"].get<double>(), 0.0) << h.dump();

  EXPECT_EQ(run("maps --capture " + tiny_capture() + " --layer 0 --head 0 --window 4 --out " + dir + "/x", &out), 2);
  EXPECT_TRUE(contains(out, "--window")) << out;
  EXPECT_TRUE(contains(out, "--feature-map")) << out;
  EXPECT_EQ(run("metrics --capture " + tiny_capture() + " --feature-map elu --window -1", &out), 2) << out;
}

TEST(CliAnalysis, ReportWritesEveryTableAndFigureOrNothing) {
  const std::string dir = test::temp_dir("cli_report") + "/report";
  const std::string common = " --model " + test::tiny_gpt2_dir() + " --text " + test::source_dir() +
                             "/resources/texts/brown_popular-lore_cf48.txt --seq-len 32 --num-seqs 2 --samples 64 --budget 16"
                             " --features 16 --mixer-state 2";
  std::string out;
  ASSERT_EQ(run("report" + common + " --out " + dir, &out), 0) << out;
  for (const char* f : {"index.md", "dof.json", "spectra.safetensors", "allocation.json", "table1_allocation.md",
                        "table1_allocation.tex", "table1_allocation.csv", "table2_dof.md", "table2_dof.tex",
                        "metrics.json", "metrics.csv", "capture/manifest.json"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  const auto alloc = parse(read_file(dir + "/allocation.json"));
  for (const char* s : {"fix", "dof", "dof-clip", "per-head"}) EXPECT_TRUE(alloc["strategies"].contains(s)) << s;
  EXPECT_NEAR(alloc["strategies"]["dof"]["mean_cost"].get<double>(), 16.0, 1.0);
  EXPECT_LE(alloc["strategies"]["dof-clip"]["mean_cost"].get<double>(), 16.0 + 1e-9);
  const std::string index = read_file(dir + "/index.md");
  EXPECT_TRUE(contains(index, "Table 1")) << index;
  EXPECT_TRUE(contains(index, "most_complex")) << index;
  // Nothing but the report itself in its parent: no temporary or old directory left beside it.
  auto siblings = [&] { return std::distance(fs::directory_iterator(fs::path(dir).parent_path()), fs::directory_iterator()); };
  EXPECT_EQ(siblings(), 1);

  // A bad argument (a feature map that does not exist) is a usage error before anything is replaced.
  EXPECT_EQ(run("report" + common + " --feature-map nonsense --out " + dir, &out), 2);
  EXPECT_TRUE(fs::exists(dir + "/index.md")) << "the earlier report is intact";
  EXPECT_EQ(siblings(), 1);
  // T x L above the corpus: the capture fails and no report directory appears.
  const std::string none = test::temp_dir("cli_report") + "/none";
  EXPECT_EQ(run("report --model " + test::tiny_gpt2_dir() + " --text " + test::source_dir() +
                    "/resources/texts/brown_popular-lore_cf48.txt --seq-len 32 --num-seqs 100000 --out " + none,
                &out),
            1);
  EXPECT_FALSE(fs::exists(none));
  EXPECT_EQ(std::distance(fs::directory_iterator(fs::path(none).parent_path()), fs::directory_iterator()), 0)
      << "no temporary directory left";
}

}  // namespace test_cli_analysis

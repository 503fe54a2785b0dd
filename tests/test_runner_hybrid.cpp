// Hybrid heads in OUT/attnscope_linear.py (SPEC 5 "Hybrid head with window W", SPEC 7 attnscope.window,
// issue 15 item 3): models converted by the CLI, made hybrid here (config.json "window": W and a
// float32 scalar layers.{s}.heads.{h}.gamma per head in feature_maps.safetensors). Each check is
// against an independent computation: a float64 dense reference written below (the full L x L
// weight matrix of the SPEC formula per head, row-normalized), attnscope's own softmax logits of the
// original model (W >= L), and the runner's batch form (its recurrent form). Bad hybrid fields are
// refused with exit 1 and one "FILE: problem" line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>

#include "attnscope/io/safetensors.h"
#include "hf_checkpoint_writer.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_runner_hybrid {

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string bundled() { return test::source_dir() + "/resources/models/brown-gpt2-mini"; }
std::string runner_source() { return test::source_dir() + "/resources/python/attnscope_linear.py"; }

// `attnscope convert` of `src` with `map` (M features), seed 3, into `out`.
std::string cli_convert(const std::string& src, const std::string& map, const std::string& out) {
  std::string o;
  const std::string cmd = test::cli_path() + " convert --model '" + src + "' --feature-map " + map + " --seed 3 --out '" + out + "' 2>&1";
  if (test::run_command(cmd, &o) != 0) throw std::runtime_error(cmd + ": " + o);
  return out;
}

// A small Llama (RoPE, grouped-query attention: 4 query heads on 2 key/value heads, head dim 8) in
// Hugging Face layout.
const std::string& llama_source() {
  static const std::string src = test::tiny_llama_dir("hybrid_llama_src", 23);
  return src;
}

// Converted models, made once: the bundled GPT-2 (4 layers x 4 heads, head dim 32) with prf, and the
// Llama with prf and with untied hedgehog.
const std::string& gpt2_prf() {
  static const std::string out = cli_convert(bundled(), "prf --features 16", test::temp_dir("hybrid_gpt2_prf") + "/out");
  return out;
}
const std::string& llama_prf() {
  static const std::string out = cli_convert(llama_source(), "prf --features 16", test::temp_dir("hybrid_llama_prf") + "/out");
  return out;
}
const std::string& llama_hedgehog() {
  static const std::string out =
      cli_convert(llama_source(), "hedgehog --features 16 --untied --init random", test::temp_dir("hybrid_llama_hh") + "/out");
  return out;
}

// feature_maps.safetensors of `dir` rewritten by `edit` (name -> tensor, in the file's order).
void edit_maps(const std::string& dir, const std::function<void(NamedTensors&)>& edit) {
  const std::string file = dir + "/feature_maps.safetensors";
  NamedTensors t;
  {
    SafetensorsFile st(file);
    for (const auto& e : st.entries()) t.emplace_back(e.name, st.tensor(e.name).clone());
  }
  edit(t);
  write_safetensors(file, t);
}

// config.json of `dir` rewritten by `edit`.
void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto cfg = nlohmann::json::parse(test::read_file(dir + "/config.json"));
  edit(cfg);
  std::ofstream(dir + "/config.json", std::ios::trunc) << cfg.dump(2);
}

int config_int(const nlohmann::json& cfg, const char* a, const char* b) { return cfg.contains(a) ? cfg[a].get<int>() : cfg[b].get<int>(); }

// Per-head gammas: +-30 (g = 1 - 9e-14 and 9e-14), 0 and random ones in [-8, 8], by a fixed rule.
double gamma_of(int s, int h, int salt) {
  const int k = (s * 7 + h * 3 + salt) % 6;
  if (k == 0) return 30;
  if (k == 1) return -30;
  if (k == 2) return 0;
  return std::sin(double(s * 131 + h * 17 + salt * 7 + 1)) * 8;
}

// A copy of the converted model `base` made hybrid: attnscope.window = W and a gamma per query head;
// the runner is the one in resources/ (this checkout's).
std::string make_hybrid(const std::string& base, const std::string& tag, int W, int salt = 0) {
  const std::string dir = test::temp_dir("hybrid_" + tag) + "/out";
  fs::copy(base, dir, fs::copy_options::recursive);
  fs::copy_file(runner_source(), dir + "/attnscope_linear.py", fs::copy_options::overwrite_existing);
  const auto cfg = nlohmann::json::parse(test::read_file(dir + "/config.json"));
  const int n_layer = config_int(cfg, "n_layer", "num_hidden_layers"), n_head = config_int(cfg, "n_head", "num_attention_heads");
  edit_config(dir, [&](nlohmann::json& c) { c["attnscope"]["window"] = W; });
  edit_maps(dir, [&](NamedTensors& t) {
    for (int s = 0; s < n_layer; ++s)
      for (int h = 0; h < n_head; ++h)
        t.emplace_back("layers." + std::to_string(s) + ".heads." + std::to_string(h) + ".gamma",
                       at::full({}, gamma_of(s, h, salt), at::kFloat));
  });
  return dir;
}

// The Python side of the checks. For a hybrid model DIR and ids (2 rows of L tokens) it prints one
// JSON line:
//   head_diff    max |runner - reference| over every head's float64 output (the runner's batch form
//                and the reference on the same q, k, v)
//                (the maps tested here, prf and hedgehog, have kernel values >= 0, so the reference's
//                per-pair clamp at 0 is no clamp; see hybrid_attention for signed maps)
//   logit_diff   max |runner logits - logits with every head computed by the reference|
//   rec_diff     max |batch logits - recurrent logits| (one token at a time from an empty cache)
//   piece_diff   the same, the first half as one call, then one token at a time
//   greedy_same  generate() (recurrent) == greedy decoding by repeated batch forwards
//   finite, max_qk (largest |q|^2 / sqrt d, |k|^2 / sqrt d seen), max_logit
// With --huge X, the query and key projections are scaled first, layer by layer, so that the largest
// |x|^2 / sqrt d of each layer is X.
// With --softmax-ref FILE, softmax_diff = max |runner logits - FILE's logits| (attnscope logits of
// the original model, row 0).
const char* kCheckScript = R"PY(
import json, math, sys, torch
d, ids_text = sys.argv[1], sys.argv[2]
sys.path.insert(0, d)
import attnscope_linear as a

def reference(q, k, v, m, lam=None, state=None):
    """SPEC 5 as written: w_ij = g exp(q_i.k_j / sqrt d) for i - j < W, (1 - g) max(phi(q_i).phi(k_j), 0)
    for i - j >= W, j <= i, normalized by the row's sum: the full L x L matrix, in float64 (each weight
    as its log, the row normalized by softmax so large norms do not overflow)."""
    assert state is None
    B, L, dh = q.shape
    vq, lq = m.query(q)
    vk, lk = m.key(k)
    log_lin = lq + lk.transpose(1, 2) + torch.log((vq @ vk.transpose(1, 2)).clamp_min(0))
    log_soft = q @ k.transpose(1, 2) / math.sqrt(dh)
    i = torch.arange(L).view(L, 1)
    j = torch.arange(L).view(1, L)
    g = torch.sigmoid(m.gamma)
    one_minus_g = torch.sigmoid(-m.gamma)
    logw = torch.where(i - j < m.window, torch.log(g) + log_soft, torch.log(one_minus_g) + log_lin)
    logw = logw.masked_fill(j > i, -math.inf)
    return torch.softmax(logw, -1) @ v

m = a.load(d)
huge = float(sys.argv[sys.argv.index("--huge") + 1]) if "--huge" in sys.argv else 0
ids = torch.tensor([[int(t) for t in row.split(",")] for row in ids_text.split(";")])
B, L = ids.shape
out = {}
runner = a.hybrid_attention
norms = []

def seen(q, k):
    dh = q.shape[-1]
    norms.append(max(float((q * q).sum(-1).max()), float((k * k).sum(-1).max())) / math.sqrt(dh))

with torch.no_grad():
    if "--huge" in sys.argv:  # layer by layer, as each layer's scale changes the next one's input
        def probe(q, k, v, fm, lam, state=None):
            seen(q, k)
            return runner(q, k, v, fm, lam, state)
        a.hybrid_attention = probe
        for s in range(m.n_layer):
            norms.clear()
            m(ids)
            f = math.sqrt(huge / max(norms[s * m.n_head:(s + 1) * m.n_head]))
            for name in list(m.w):
                if name.startswith("h.%d.attn.c_attn." % s):  # GPT-2 Conv1D [D, 3D]: q, k are the first 2D outputs
                    m.w[name][..., :2 * m.d_model] *= f
                if name.startswith(("model.layers.%d.self_attn.q_proj." % s, "model.layers.%d.self_attn.k_proj." % s)):
                    m.w[name] *= f
        a.hybrid_attention = runner
        norms.clear()
    head = []

    def both(q, k, v, fm, lam, state=None):
        seen(q, k)
        y = runner(q, k, v, fm, lam, state)
        if state is None:
            head.append(float((y - reference(q, k, v, fm)).abs().max()))
        return y
    a.hybrid_attention = both
    batch = m(ids)
    a.hybrid_attention = reference
    ref = m(ids)
    a.hybrid_attention = runner
    out["head_diff"] = max(head)
    out["logit_diff"] = float((batch - ref).abs().max())
    out["max_qk"] = max(norms)
    out["max_logit"] = float(batch.abs().max())
    out["finite"] = bool(torch.isfinite(batch).all())
    cache = m.new_cache()
    rec = torch.cat([m(ids[:, t:t + 1], cache, t) for t in range(L)], 1)
    out["rec_diff"] = float((rec - batch).abs().max())
    out["finite"] = out["finite"] and bool(torch.isfinite(rec).all())
    cache, p = m.new_cache(), L // 2
    pieces = ([m(ids[:, :p], cache, 0)] if p else []) + [m(ids[:, t:t + 1], cache, t) for t in range(p, L)]
    out["piece_diff"] = float((torch.cat(pieces, 1) - batch).abs().max())
    if "--softmax-ref" in sys.argv:
        r = a.read_safetensors(sys.argv[sys.argv.index("--softmax-ref") + 1])
        out["softmax_diff"] = float((batch[0] - r["logits"]).abs().max())
    prompt = [int(t) for t in ids[0, :3]]
    seq = list(prompt)
    for _ in range(5):
        seq.append(int(m(torch.tensor([seq]))[0, -1].argmax()))
    out["greedy_same"] = a.generate(m, prompt, 5) == seq[len(prompt):]
print(json.dumps(out))
)PY";

std::string check_script() {
  static const std::string path = [] {
    const std::string p = test::temp_dir("hybrid_script") + "/check_hybrid.py";
    std::ofstream(p) << kCheckScript;
    return p;
  }();
  return path;
}

// Two rows of L token ids below `vocab`, "a,b,c;d,e,f".
std::string ids_text(int L, int seed) {
  std::string s;
  for (int r = 0; r < 2; ++r) {
    if (r) s += ";";
    for (int i = 0; i < L; ++i) s += (i ? "," : "") + std::to_string((i * 733 + r * 1291 + seed * 97 + 5) % 4096);
  }
  return s;
}

// Runs the check script on `dir`; the JSON it prints (the output in `why` when it failed).
nlohmann::json run_check(const std::string& dir, const std::string& ids, const std::string& extra, std::string* why) {
  std::string o;
  const std::string err = dir + "/../check_stderr.txt";
  const int rc = test::run_command(test::python_with_torch() + " '" + check_script() + "' '" + dir + "' '" + ids + "' " + extra +
                                       " 2>'" + err + "'",
                                   &o);
  *why = o + test::read_file(err);
  if (rc != 0 || o.empty()) return nullptr;
  const size_t last = o.find_last_of('{');
  return nlohmann::json::parse(o.substr(last));
}

struct PythonRun {
  int exit_code = -1;
  std::string out, err;
};

// `python3 DIR/attnscope_linear.py DIR --ids 1,2,3 --new-tokens 4`, stdout and stderr apart.
PythonRun run_runner(const std::string& dir) {
  PythonRun r;
  const std::string err = dir + "/../runner_stderr.txt";
  r.exit_code = test::run_command("(" + test::python_with_torch() + " '" + dir + "/attnscope_linear.py' '" + dir +
                                      "' --ids 1,2,3 --new-tokens 4 2>'" + err + "')",
                                  &r.out);
  r.err = test::read_file(err);
  return r;
}

#define HYBRID_SKIP_WITHOUT_TORCH() \
  if (test::python_with_torch().empty()) GTEST_SKIP() << "no python3 with torch (Debian: apt install python3-torch)"

// Every check of one hybrid model on L tokens (batch against the reference, recurrent against batch).
void expect_matches_reference(const std::string& base, const std::string& tag, int W, int L, const std::string& extra = "") {
  SCOPED_TRACE(tag + " W=" + std::to_string(W) + " L=" + std::to_string(L));
  const std::string dir = make_hybrid(base, tag + "_w" + std::to_string(W) + "_l" + std::to_string(L), W, W + L);
  std::string why;
  const nlohmann::json r = run_check(dir, ids_text(L, W), extra, &why);
  ASSERT_FALSE(r.is_null()) << why;
  std::cout << "[ " << tag << " W=" << W << " L=" << L << " ] " << r.dump() << "\n";
  EXPECT_TRUE(r.at("finite").get<bool>());
  EXPECT_LT(r.at("head_diff").get<double>(), 1e-9);  // float64 head outputs
  EXPECT_LT(r.at("logit_diff").get<double>(), 1e-6);  // float32 logits, same heads to ~1e-12
  EXPECT_LT(r.at("rec_diff").get<double>(), 1e-4);
  EXPECT_LT(r.at("piece_diff").get<double>(), 1e-4);
  EXPECT_TRUE(r.at("greedy_same").get<bool>());
}

}  // namespace

// Batch logits against the float64 dense reference, and the recurrent form against the batch form:
// W in {1, 3, 16}, L in {1, W - 1, W, W + 1, 40}; gammas include +-30.
TEST(RunnerHybrid, MatchesDenseReferenceAndRecurrentForm) {
  HYBRID_SKIP_WITHOUT_TORCH();
  for (int W : {1, 3, 16})
    for (int L : std::set<int>{1, W - 1, W, W + 1, 40})
      if (L >= 1) expect_matches_reference(llama_prf(), "llama_prf", W, L);
  expect_matches_reference(gpt2_prf(), "gpt2_prf", 3, 40);
  expect_matches_reference(gpt2_prf(), "gpt2_prf", 16, 40);
  expect_matches_reference(llama_hedgehog(), "llama_hedgehog", 3, 40);
  expect_matches_reference(llama_hedgehog(), "llama_hedgehog", 16, 17);
}

// Huge query and key norms (the largest |x|^2 / sqrt d of each layer 500, and 1000, where
// exp(q.k / sqrt d) overflows even float64 unless read in the log domain): finite, and still the
// reference.
TEST(RunnerHybrid, HugeNormsStayFiniteAndExact) {
  HYBRID_SKIP_WITHOUT_TORCH();
  struct Case {
    std::string base, tag;
    int W, huge;
  };
  for (const Case& c : {Case{llama_prf(), "llama_prf", 3, 500}, Case{llama_prf(), "llama_prf", 16, 500},
                        Case{gpt2_prf(), "gpt2_prf", 3, 500}, Case{gpt2_prf(), "gpt2_prf", 16, 500},
                        Case{llama_hedgehog(), "llama_hedgehog", 3, 500}, Case{llama_hedgehog(), "llama_hedgehog", 16, 500},
                        Case{llama_prf(), "llama_prf", 3, 1000}, Case{gpt2_prf(), "gpt2_prf", 16, 1000}}) {
    const std::string name = c.tag + "_huge" + std::to_string(c.huge) + "_w" + std::to_string(c.W);
    SCOPED_TRACE(name);
    const std::string dir = make_hybrid(c.base, name, c.W, 5);
    std::string why;
    const nlohmann::json r = run_check(dir, ids_text(40, 9), "--huge " + std::to_string(c.huge), &why);
    ASSERT_FALSE(r.is_null()) << why;
    std::cout << "[ " << name << " ] " << r.dump() << "\n";
    const double scale = std::max(1.0, r.at("max_logit").get<double>());
    EXPECT_GT(r.at("max_qk").get<double>(), 0.99 * c.huge);
    EXPECT_TRUE(r.at("finite").get<bool>());
    EXPECT_LT(r.at("head_diff").get<double>(), 1e-9);
    EXPECT_LT(r.at("logit_diff").get<double>(), 1e-6 * scale);
    EXPECT_LT(r.at("rec_diff").get<double>(), 1e-4 * scale);
    EXPECT_LT(r.at("piece_diff").get<double>(), 1e-4 * scale);
  }
}

// W >= L: every key is in the window, so the hybrid model is the original softmax model whatever the
// gammas (+-30 included): its logits equal attnscope's logits of the original model, in the batch and
// the recurrent form.
TEST(RunnerHybrid, WindowCoveringTheSequenceIsTheSoftmaxModel) {
  HYBRID_SKIP_WITHOUT_TORCH();
  for (const auto& [src, base, tag] : {std::tuple{llama_source(), llama_prf(), std::string("llama")},
                                       std::tuple{bundled(), gpt2_prf(), std::string("gpt2")}})
    for (int W : {24, 64}) {
      SCOPED_TRACE(tag + " W=" + std::to_string(W));
      const int L = 24;
      const std::string dir = make_hybrid(base, tag + "_softmax_w" + std::to_string(W), W, 1);
      const std::string ids = ids_text(L, 4);
      std::string o;
      ASSERT_EQ(test::run_command(test::cli_path() + " logits --model '" + src + "' --ids " + ids.substr(0, ids.find(';')) +
                                      " --out '" + dir + "/../softmax.safetensors' 2>&1",
                                  &o),
                0)
          << o;
      std::string why;
      const nlohmann::json r = run_check(dir, ids, "--softmax-ref '" + dir + "/../softmax.safetensors'", &why);
      ASSERT_FALSE(r.is_null()) << why;
      std::cout << "[ softmax " << tag << " W=" << W << " ] " << r.dump() << "\n";
      EXPECT_LT(r.at("softmax_diff").get<double>(), 1e-4);
      EXPECT_GT(r.at("max_logit").get<double>(), 0.5);
      EXPECT_LT(r.at("rec_diff").get<double>(), 1e-4);
      EXPECT_LT(r.at("head_diff").get<double>(), 1e-9);
    }
}

// The check has power: the same comparison against the plain linear model (W = 0) and against a
// model whose window is one shorter fails.
TEST(RunnerHybrid, ReferenceComparisonHasPower) {
  HYBRID_SKIP_WITHOUT_TORCH();
  const std::string dir = make_hybrid(llama_prf(), "power", 3, 2);
  std::string why;
  const std::string ids = ids_text(40, 2);
  nlohmann::json r = run_check(dir, ids, "", &why);
  ASSERT_FALSE(r.is_null()) << why;
  ASSERT_LT(r.at("logit_diff").get<double>(), 1e-6);
  // The reference reads m.window: lie to it about W (the runner keeps 3).
  std::string script = test::read_file(check_script());
  const std::string patched = dir + "/../check_shifted.py";
  const std::string from = "torch.where(i - j < m.window,", to = "torch.where(i - j < m.window - 1,";
  ASSERT_NE(script.find(from), std::string::npos);
  script.replace(script.find(from), from.size(), to);
  std::ofstream(patched) << script;
  std::string o;
  ASSERT_EQ(test::run_command(test::python_with_torch() + " '" + patched + "' '" + dir + "' '" + ids + "' 2>&1", &o), 0) << o;
  const auto shifted = nlohmann::json::parse(o.substr(o.find_last_of('{')));
  EXPECT_GT(shifted.at("logit_diff").get<double>(), 1e-3) << o;
}

// Bad hybrid fields: exit 1, one stderr line "FILE: problem", no traceback.
TEST(RunnerHybrid, BadHybridFieldsAreRefused) {
  HYBRID_SKIP_WITHOUT_TORCH();
  const std::string FM = "feature_maps.safetensors", CFG = "config.json";
  struct Case {
    std::string name, file, problem;
    std::function<void(const std::string&)> corrupt;
  };
  auto drop = [](const std::string& name) {
    return [name](const std::string& d) {
      edit_maps(d, [&](NamedTensors& t) {
        t.erase(std::remove_if(t.begin(), t.end(), [&](const auto& e) { return e.first == name; }), t.end());
      });
    };
  };
  auto set_gamma = [](const std::string& name, at::Tensor value) {
    return [name, value](const std::string& d) {
      edit_maps(d, [&](NamedTensors& t) {
        for (auto& [n, v] : t)
          if (n == name) v = value;
      });
    };
  };
  auto set_window = [](nlohmann::json w) {
    return [w](const std::string& d) { edit_config(d, [&](nlohmann::json& c) { c["attnscope"]["window"] = w; }); };
  };
  const std::vector<Case> cases = {
      {"window_negative", CFG, ": attnscope.window: must be a non-negative integer up to 2147483647 (0: plain linear attention), got -1",
       set_window(-1)},
      {"window_fraction", CFG, ": attnscope.window: must be a non-negative integer", set_window(2.5)},
      {"window_string", CFG, ": attnscope.window: must be a non-negative integer up to 2147483647 (0: plain linear attention), got \"4\"",
       set_window("4")},
      {"window_bool", CFG, ": attnscope.window: must be a non-negative integer", set_window(true)},
      {"window_huge", CFG, ": attnscope.window: must be a non-negative integer", set_window(int64_t(1) << 40)},
      {"gamma_missing", FM,
       " (layer 1 head 2): missing tensor 'layers.1.heads.2.gamma': config.json's attnscope.window is 4, so every head is hybrid",
       drop("layers.1.heads.2.gamma")},
      {"gamma_shape", FM, " (layer 0 head 1): tensor 'layers.0.heads.1.gamma' has shape [1], a hybrid head's gamma is a scalar (shape [])",
       set_gamma("layers.0.heads.1.gamma", at::zeros({1}))},
      {"gamma_nan", FM, " (layer 1 head 0): tensor 'layers.1.heads.0.gamma' holds NaN or inf",
       set_gamma("layers.1.heads.0.gamma", at::full({}, NAN, at::kFloat))},
      {"gamma_inf", FM, " (layer 0 head 3): tensor 'layers.0.heads.3.gamma' holds NaN or inf",
       set_gamma("layers.0.heads.3.gamma", at::full({}, -INFINITY, at::kFloat))},
      {"gamma_float64", FM, " (layer 0 head 0): tensor 'layers.0.heads.0.gamma' is not float32",
       set_gamma("layers.0.heads.0.gamma", at::zeros({}, at::kDouble))},
      {"gamma_extra", FM, ": holds 1 tensors outside layers.{0..1}.heads.{0..3}.{feature_map.*, gamma}",
       [](const std::string& d) { edit_maps(d, [](NamedTensors& t) { t.emplace_back("layers.2.heads.0.gamma", at::zeros({})); }); }},
      {"gamma_with_window_0", FM,
       ": holds 8 hybrid-head gamma tensors (the first 'layers.0.heads.0.gamma') but config.json's attnscope.window is 0 or absent "
       "(plain linear attention): a stale file?",
       set_window(0)},
      {"gamma_without_window", FM, ": holds 8 hybrid-head gamma tensors", [](const std::string& d) {
         edit_config(d, [](nlohmann::json& c) { c["attnscope"].erase("window"); });
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = make_hybrid(llama_prf(), "bad_" + c.name, 4);
    c.corrupt(dir);
    const PythonRun py = run_runner(dir);
    EXPECT_EQ(py.exit_code, 1) << py.out << py.err;
    EXPECT_EQ(py.out, "");
    EXPECT_EQ(py.err.find("Traceback"), std::string::npos) << py.err;
    EXPECT_EQ(py.err.rfind(dir + "/" + c.file, 0), 0u) << py.err;
    EXPECT_NE(py.err.find(c.problem), std::string::npos) << py.err;
    EXPECT_EQ(std::count(py.err.begin(), py.err.end(), '\n'), 1) << py.err;
  }
  // The good hybrid model runs, and W = 0 without gammas is the plain model.
  const PythonRun good = run_runner(make_hybrid(llama_prf(), "good", 4));
  EXPECT_EQ(good.exit_code, 0) << good.err;
  EXPECT_EQ(good.err, "");
  const std::string plain = make_hybrid(llama_prf(), "plain_w0", 4);
  edit_config(plain, [](nlohmann::json& c) { c["attnscope"]["window"] = 0; });
  edit_maps(plain, [](NamedTensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const auto& e) { return e.first.find(".gamma") != std::string::npos; }), t.end());
  });
  const PythonRun p = run_runner(plain), base = run_runner(llama_prf());
  EXPECT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.out, base.out);
}

#undef HYBRID_SKIP_WITHOUT_TORCH

}  // namespace test_runner_hybrid

// Regressions for the parsers of untrusted files, from the fuzz targets (tests/fuzz, docs/FUZZING.md):
// every reproducer tests/fuzz/corpus/<target>/crash_*.json (a crash, an undefined behaviour, an
// escaping non-attnscope exception, a broken promise of a parsed result, or a tiny file that made the
// loader allocate gigabytes) is refused with an attnscope::Error naming the file and the problem, and
// the valid seeds next to them still load with the values they hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnscope/capture/capture.h"
#include "capture/capture_manifest.h"
#include "attnscope/base/error.h"
#include "attnscope/model/model_config.h"
#include "attnscope/tokenize/tokenizer.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_hostile_files {

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string corpus(const std::string& target) {
  return test::source_dir() + "/tests/fuzz/corpus/" + target;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The attnscope::Error message `f` throws, "" when it returns. Any other exception escapes to
// GoogleTest, which fails the test.
using attnscope::test::error_of;

struct Case {
  const char* file;    // tests/fuzz/corpus/<target>/crash_<file>.json
  const char* needle;  // in the message
};

// Every crash_* file of a corpus has a case here, so a new reproducer cannot go untested.
void expect_cases_cover_corpus(const std::string& target, const std::vector<Case>& cases) {
  std::vector<std::string> named;
  for (const Case& c : cases) named.push_back(std::string("crash_") + c.file + ".json");
  for (const auto& e : fs::directory_iterator(corpus(target))) {
    const std::string name = e.path().filename().string();
    if (name.rfind("crash_", 0) == 0) {
      EXPECT_NE(std::find(named.begin(), named.end(), name), named.end()) << target << "/" << name;
    }
  }
}

// The file's path, then the problem.
void expect_refused(const std::string& msg, const std::string& where, const Case& c) {
  EXPECT_FALSE(msg.empty()) << c.file << " was accepted";
  EXPECT_EQ(msg.rfind(where, 0), 0u) << c.file << ": " << msg;
  EXPECT_NE(msg.find(c.needle), std::string::npos) << c.file << ": " << msg;
}

}  // namespace

TEST(HostileFiles, ConfigReproducersAreRefused) {
  const std::vector<Case> cases = {
      {"llama_odd_head_dim", "rotary dimension 89 must be even"},
      {"neox_heads_not_dividing", "128 is not divisible by 3 heads"},
      {"activation_not_string", "\"activation_function\" must be a string"},
      {"default_inner_overflows", "\"n_inner\" is absent and its default 2147483648"},
      {"n_embd_2pow31", "\"n_embd\" = 2147483648 must be a positive integer"},
      {"kv_heads_wrap", "\"num_key_value_heads\" = 4294967295 must be a positive integer"},
      {"gpt2_silu", "activation \"silu\" is not supported"},
      {"neox_silu", "activation \"silu\" is not supported"},
      {"neox_zero_rotary", "rotary_pct leaves 0 of the 16 head dimensions"},
      {"negative_eps", "norm epsilon"},
      {"rope_theta_zero", "rope_theta"},
      {"params_overflow", "parameters, more than any checkpoint can hold"},
      {"zero_heads", "\"n_head\" = 0 must be a positive integer"},
  };
  expect_cases_cover_corpus("model_config", cases);
  for (const Case& c : cases) {
    const std::string path = corpus("model_config") + "/crash_" + c.file + ".json";
    ASSERT_TRUE(fs::exists(path)) << path;
    expect_refused(error_of([&] { load_hf_config(path); }), path, c);
  }
}

TEST(HostileFiles, ConfigSeedsLoadWithTheirValues) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(corpus("model_config"))) {
    if (e.path().filename().string().rfind("valid_", 0) != 0) continue;
    ++n;
    const nlohmann::json j = nlohmann::json::parse(read_text(e.path().string()));
    const ModelConfig c = load_hf_config(e.path().string());
    EXPECT_EQ(c.arch_name, j["architectures"][0].get<std::string>());
    EXPECT_EQ(c.vocab_size, j["vocab_size"].get<int>());
    EXPECT_EQ(c.n_layer, j.value("n_layer", j.value("num_hidden_layers", 0)));
    EXPECT_EQ(int64_t(c.n_head) * c.head_dim,
              j.contains("head_dim") ? j["num_attention_heads"].get<int64_t>() * j["head_dim"].get<int64_t>()
                                     : int64_t(c.d_model));
    EXPECT_GT(c.n_params(), 0);
  }
  EXPECT_GE(n, 5);
}

TEST(HostileFiles, ManifestReproducersAreRefusedByCaptureStore) {
  const std::vector<Case> cases = {
      {"format_not_string", "not an attnscope capture manifest"},
      {"negative_layers", "\"layers\" = -3 is outside 1..2147483647"},
      {"layers_huge_float", "\"layers\" is not an integer"},
      {"seq_len_wraps", "\"seq_len\" = 4294967328 is outside 2..2147483647"},
      {"kv_heads_not_dividing", "model.n_head = 8 is not a multiple of model.n_kv_head = 3"},
      {"tokenizer_path_number", "\"tokenization.tokenizer_path\" is not a string"},
      {"model_path_number", "\"model.path\" is not a string"},
      {"kv_heads_zero", "\"model.n_kv_head\" = 0 is outside 1..2147483647"},
  };
  expect_cases_cover_corpus("capture_manifest", cases);
  for (const Case& c : cases) {
    // A capture directory with that manifest and every layer file it could ask for.
    const std::string dir = test::temp_dir(std::string("hostile_manifest_") + c.file);
    fs::copy_file(corpus("capture_manifest") + "/crash_" + c.file + ".json", dir + "/manifest.json");
    for (int s = 0; s < 8; ++s) std::ofstream(dir + "/layer_" + std::to_string(s) + ".safetensors");
    expect_refused(error_of([&] { CaptureStore st(dir); }), (fs::path(dir) / "manifest.json").string(), c);
  }
}

TEST(HostileFiles, ManifestSeedsParseWithTheirValues) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(corpus("capture_manifest"))) {
    if (e.path().filename().string().rfind("valid_", 0) != 0) continue;
    ++n;
    const std::string text = read_text(e.path().string());
    const nlohmann::json j = nlohmann::json::parse(text);
    const CaptureManifest m = parse_capture_manifest(text, e.path().string());
    // Version 1 (or none) names the shape n_layer-style; version 2 as `info` does.
    const bool v1 = j.value("version", 1) == 1;
    EXPECT_EQ(m.n_layer, v1 ? j["layers"].get<int>() : j["model"]["layers"].get<int>());
    EXPECT_EQ(m.n_head, j["model"][v1 ? "n_head" : "heads"].get<int>());
    EXPECT_EQ(m.n_kv_head, j["model"][v1 ? "n_kv_head" : "kv_heads"].get<int>());
    EXPECT_EQ(m.model_path, j["model"].value("path", std::string()));
    EXPECT_EQ(m.head_dim, j["model"]["head_dim"].get<int>());
    EXPECT_EQ(m.vocab_size, j["model"]["vocab_size"].get<int>());
    EXPECT_EQ(m.seq_len, j["seq_len"].get<int>());
    EXPECT_EQ(m.num_seqs, j["num_seqs"].get<int>());
    EXPECT_EQ(m.tokenizer_kind, j["tokenization"]["tokenizer"].get<std::string>());
    EXPECT_EQ(m.tokenizer_path, j["tokenization"].value("tokenizer_path", std::string()));
  }
  EXPECT_GE(n, 3);
  // The version, when present, must be the one this build writes.
  const std::string text = read_text(corpus("capture_manifest") + "/valid_llama2c.json");
  nlohmann::json j = nlohmann::json::parse(text);
  j["version"] = kCaptureFormatVersion + 1;
  EXPECT_NE(error_of([&] { parse_capture_manifest(j.dump(), "m.json"); })
                .find("version " + std::to_string(kCaptureFormatVersion + 1) + " is not supported"),
            std::string::npos);
}

TEST(HostileFiles, TokenizerReproducersAreRefused) {
  const std::vector<Case> cases = {
      {"huge_id", "out-of-range id 16777215"},
      {"gpt2_huge_added_id", "out-of-range id 16777215"},
  };
  expect_cases_cover_corpus("tokenizer", cases);
  for (const Case& c : cases) {
    const std::string dir = test::temp_dir(std::string("hostile_tokenizer_") + c.file);
    fs::copy_file(corpus("tokenizer") + "/crash_" + c.file + ".json", dir + "/tokenizer.json");
    expect_refused(error_of([&] { load_hf_tokenizer(dir); }), (fs::path(dir) / "tokenizer.json").string(), c);
  }
  // A gap in the ids up to 65536 is still fine: ids need not be dense.
  nlohmann::json j = nlohmann::json::parse(read_text(corpus("tokenizer") + "/valid_sp_metaspace_unk.json"));
  const int64_t n = int64_t(j["model"]["vocab"].size() + j["added_tokens"].size());
  j["model"]["vocab"]["zz"] = n + 65535;
  EXPECT_EQ(parse_hf_tokenizer_json(j.dump(), "t.json")->vocab_size(), n + 65536);
  j["model"]["vocab"]["zz"] = n + 65536 + 1;
  EXPECT_NE(error_of([&] { parse_hf_tokenizer_json(j.dump(), "t.json"); }).find("out-of-range id"),
            std::string::npos);
}

// The valid seeds load as the flavour their name says, and (the byte-level ones, which have no
// <unk>) give back the exact bytes of a text.
TEST(HostileFiles, TokenizerSeedsLoadAndRoundTrip) {
  const std::string text = "Hello, world! the 42 \xC3\xBC";
  struct Seed {
    const char* file;
    const char* kind;
    bool round_trip;
  };
  for (const Seed& s : {Seed{"valid_gpt2_bytelevel.json", "gpt2-bpe", true},
                        Seed{"valid_gpt2_pairs_prefix_nfc.json", "gpt2-bpe", false},  // adds " "
                        Seed{"valid_gpt2_split_regex.json", "gpt2-bpe", true},
                        Seed{"valid_sp_prepend_bytefallback.json", "sentencepiece-bpe", true},
                        Seed{"valid_sp_metaspace_unk.json", "sentencepiece-bpe", false}}) {
    const auto tok = parse_hf_tokenizer_json(read_text(corpus("tokenizer") + "/" + s.file), s.file);
    EXPECT_EQ(tok->kind(), s.kind) << s.file;
    const std::vector<int64_t> ids = tok->encode(text);
    EXPECT_FALSE(ids.empty());
    if (s.round_trip) {
      EXPECT_EQ(tok->decode(ids), text) << s.file;
    }
  }
  // vocab.json NUL merges.txt, as the fuzz target splits it.
  const std::string both = read_text(corpus("tokenizer") + "/valid_vocab_merges");
  const auto nul = both.find('\0');
  ASSERT_NE(nul, std::string::npos);
  const auto tok = parse_gpt2_tokenizer(std::string_view(both).substr(0, nul),
                                        std::string_view(both).substr(nul + 1), "vocab.json", "merges.txt");
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
  // " the" is one token: merges "Ġ t", "h e", "Ġt he".
  EXPECT_EQ(tok->encode(" the").size(), 1u);
  EXPECT_EQ(tok->piece(tok->encode(" the")[0]), " the");
}

}  // namespace test_hostile_files

// The `attnscope` command line: exit codes (0 ok, 1 error, 2 usage), clear messages naming the
// file and problem, outputs that match the library, and no half-written outputs on failure.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/model/model.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/tokenize/tokenizer.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_cli {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

std::string cli() { return test::cli_path(); }

int run(const std::string& args, std::string* out) { return test::run_command(cli() + " " + args, out); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string tiny_gpt2_dir() { return test::tiny_gpt2_dir(); }

}  // namespace

TEST(Cli, UsageErrorsExitTwo) {
  std::string out;
  EXPECT_EQ(run("", &out), 2);
  EXPECT_EQ(run("info --no-such-flag", &out), 2);
  EXPECT_EQ(run("capture --model x", &out), 2) << "missing required --text/--out";
  EXPECT_EQ(run("--help", &out), 0);
  EXPECT_TRUE(contains(out, "capture"));
}

TEST(Cli, MissingAndBrokenModelsExitOneWithTheFileNamed) {
  std::string out;
  EXPECT_EQ(run("info --model /nonexistent/model/dir", &out), 1);
  EXPECT_TRUE(contains(out, "/nonexistent/model/dir")) << out;

  const std::string dir = test::temp_dir("cli_bad");
  { std::ofstream(dir + "/config.json") << R"({"architectures": ["BertForMaskedLM"], "hidden_size": 8})"; }
  { std::ofstream(dir + "/model.safetensors") << "x"; }
  EXPECT_EQ(run("info --model " + dir, &out), 1);
  EXPECT_TRUE(contains(out, "BertForMaskedLM")) << out;
  EXPECT_TRUE(contains(out, "config.json")) << out;

  const std::string pk = test::temp_dir("cli_pickle");
  { std::ofstream(pk + "/config.json") << R"({"architectures": ["GPT2LMHeadModel"]})"; }
  { std::ofstream(pk + "/pytorch_model.bin") << "PK\x03\x04 not really"; }
  EXPECT_EQ(run("info --model " + pk, &out), 1);
  EXPECT_TRUE(contains(out, "pickle")) << out;
  EXPECT_TRUE(contains(out, "pytorch_model.bin")) << out;
}

TEST(Cli, TruncatedWeightsFailInInfo) {
  const std::string src = tiny_gpt2_dir(), dir = test::temp_dir("cli_trunc");
  for (const char* f : {"config.json", "tokenizer.json"}) fs::copy_file(src + "/" + f, dir + "/" + f);
  const auto size = fs::file_size(src + "/model.safetensors");
  fs::copy_file(src + "/model.safetensors", dir + "/model.safetensors");
  fs::resize_file(dir + "/model.safetensors", size - 100);
  std::string out;
  EXPECT_EQ(run("info --model " + dir, &out), 1);
  EXPECT_TRUE(contains(out, "model.safetensors")) << out;
}

TEST(Cli, MissingTokenizerIsNamed) {
  const std::string src = tiny_gpt2_dir(), dir = test::temp_dir("cli_notok");
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src + "/" + f, dir + "/" + f);
  std::string out;
  EXPECT_EQ(run("info --model " + dir, &out), 1);
  EXPECT_TRUE(contains(out, dir)) << out;
  EXPECT_TRUE(contains(out, "tokenizer")) << out;
}

TEST(Cli, InfoJsonDescribesTheModel) {
  std::string out;
  ASSERT_EQ(run("info --json --model " + tiny_gpt2_dir() + " 2>/dev/null", &out), 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j["architecture"], "GPT2LMHeadModel");
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["heads"], 2);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["context_length"], 64);
  EXPECT_EQ(j["tokenizer"]["kind"], "gpt2-bpe");
  // 320*16 + 64*16 + 2 * (4*16*16 + 4*16 + 2*16*64 + 64 + 16 + 4*16) + 2*16
  EXPECT_EQ(j["parameters"], 320 * 16 + 64 * 16 + 2 * (4 * 256 + 64 + 2 * 1024 + 80 + 64) + 32);
}

TEST(Cli, LogitsFileMatchesForwardPass) {
  const std::string dir = tiny_gpt2_dir(), out_file = test::temp_dir("cli_logits") + "/l.safetensors";
  std::string out;
  ASSERT_EQ(run("logits --model " + dir + " --ids 5,17,250,3 --out " + out_file, &out), 0) << out;
  SafetensorsFile f(out_file);
  at::Tensor ids = f.tensor("ids"), logits = f.tensor("logits");
  EXPECT_EQ(ids.sizes().vec(), (std::vector<int64_t>{4}));
  EXPECT_EQ(logits.sizes().vec(), (std::vector<int64_t>{4, 320}));
  LoadedModel m = load_model(dir);
  at::Tensor want = m.model->forward(at::tensor(std::vector<int64_t>{5, 17, 250, 3}).view({1, 4})).squeeze(0);
  EXPECT_TRUE(at::allclose(logits, want, 1e-5, 1e-6));

  EXPECT_EQ(run("logits --model " + dir + " --ids 5,999 --out " + out_file, &out), 1);
  EXPECT_TRUE(contains(out, "999")) << out;
  EXPECT_EQ(run("logits --model " + dir + " --ids 5,x --out " + out_file, &out), 1);
  // The earlier good output is still there and intact.
  EXPECT_EQ(SafetensorsFile(out_file).tensor("logits").size(0), 4);
}

TEST(Cli, CaptureRejectsBadInputWithoutTouchingOutput) {
  const std::string dir = tiny_gpt2_dir(), work = test::temp_dir("cli_cap");
  const std::string empty = work + "/empty.txt", outdir = work + "/cap";
  { std::ofstream(empty) << "  \n"; }
  fs::create_directories(outdir);
  { std::ofstream(outdir + "/marker") << "keep"; }
  std::string out;
  EXPECT_EQ(run("capture --model " + dir + " --text " + empty + " --out " + outdir, &out), 1);
  EXPECT_TRUE(contains(out, "empty")) << out;
  EXPECT_EQ(run("capture --model " + dir + " --text " + work + "/missing.txt --out " + outdir, &out), 1);
  EXPECT_TRUE(contains(out, "missing.txt")) << out;
  const std::string text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  EXPECT_EQ(run("capture --model " + dir + " --text " + text + " --seq-len 65 --out " + outdir, &out), 1);
  EXPECT_TRUE(contains(out, "context length")) << out;
  EXPECT_EQ(run("capture --model " + dir + " --text " + text + " --seq-len 64 --num-seqs 100000 --out " + outdir, &out), 1);
  EXPECT_TRUE(fs::exists(outdir + "/marker"));

  // A good capture from .jsonl replaces the directory.
  const std::string jsonl = work + "/t.jsonl";
  {
    std::ifstream in(text);
    std::string body(std::istreambuf_iterator<char>(in), {});
    std::ofstream f(jsonl);
    f << nlohmann::json{{"text", body}}.dump() << "\n" << nlohmann::json{{"text", body}}.dump() << "\n";
  }
  ASSERT_EQ(run("capture --model " + dir + " --text " + jsonl + " --seq-len 32 --num-seqs 4 --out " + outdir, &out), 0)
      << out;
  EXPECT_FALSE(fs::exists(outdir + "/marker"));
  EXPECT_TRUE(fs::exists(outdir + "/layer_1.safetensors"));
  EXPECT_TRUE(fs::exists(outdir + "/ids.safetensors"));

  { std::ofstream(work + "/bad.jsonl") << "{\"txt\": 1}\n"; }
  EXPECT_EQ(run("capture --model " + dir + " --text " + work + "/bad.jsonl --out " + outdir, &out), 1);
  EXPECT_TRUE(contains(out, "bad.jsonl:1")) << out;
}

// Issue 26: `capture` without --num-seqs takes the windows a short text has and says so; an explicit
// --num-seqs is exact, and its error says what would fit. Without a terminal, a job's progress is a
// plain line every ATTNSCOPE_PROGRESS_SECONDS (30 by default), so a log is never silent.
TEST(Cli, CaptureOfAShortTextTakesItsWindowsUnlessTheNumberIsGiven) {
  const std::string work = test::temp_dir("cli_short"), model = test::source_dir() + "/resources/models/brown-gpt2-mini";
  const std::string text = test::source_dir() + "/resources/texts/brown_fiction_ck29.txt";
  std::string out;
  ASSERT_EQ(run("capture --model " + model + " --text " + text + " --seq-len 256 --out " + work + "/cap", &out), 0) << out;
  EXPECT_TRUE(contains(out, "4 x 256 tokens")) << out;
  EXPECT_TRUE(contains(out, "4 windows of 256 tokens: the text is short")) << out;
  std::ifstream manifest(work + "/cap/manifest.json");
  EXPECT_EQ(nlohmann::json::parse(manifest)["num_seqs"], 4);

  EXPECT_EQ(run("capture --model " + model + " --text " + text + " --seq-len 256 --num-seqs 8 --out " + work + "/exact", &out), 1);
  EXPECT_TRUE(contains(out, "brown_fiction_ck29.txt")) << out;
  EXPECT_TRUE(contains(out, "4 windows fit")) << out;
  EXPECT_FALSE(fs::exists(work + "/exact"));

  // The progress lines of a job without a terminal (run_command's output is a pipe).
  ASSERT_EQ(test::run_command("ATTNSCOPE_PROGRESS_SECONDS=0.01 " + cli() + " dof --capture " + work + "/cap --out " +
                                  work + "/spectra.safetensors",
                              &out),
            0)
      << out;
  EXPECT_TRUE(contains(out, "dof: ")) << out;
  EXPECT_TRUE(contains(out, "%")) << out;
  EXPECT_EQ(test::run_command("ATTNSCOPE_PROGRESS_SECONDS=soon " + cli() + " dof --capture " + work + "/cap --out " +
                                  work + "/spectra2.safetensors",
                              &out),
            1)
      << out;
  EXPECT_TRUE(contains(out, "ATTNSCOPE_PROGRESS_SECONDS=soon")) << out;
  EXPECT_FALSE(fs::exists(work + "/spectra2.safetensors"));
}

TEST(Cli, EvalReportsPerplexityConsistentWithLoss) {
  std::string out;
  const std::string text = test::source_dir() + "/resources/texts/brown_news_ca44.txt";
  ASSERT_EQ(run("eval --json --model " + tiny_gpt2_dir() + " --text " + text + " --seq-len 64 2>/dev/null", &out), 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_NEAR(std::exp(j["loss"].get<double>()), j["perplexity"].get<double>(), 1e-6 * j["perplexity"].get<double>());
  EXPECT_GT(j["tokens"].get<int>(), 500);
}

}  // namespace test_cli

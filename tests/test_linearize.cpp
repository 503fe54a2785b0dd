// `attnscope linearize` (linearize.h) end to end with tiny settings on the bundled model: every
// stage's output, a report whose numbers equal an independent evaluation of the models it names,
// a run killed mid-way that resumes to the uninterrupted result, and bad input refused before any
// work with nothing left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "attnscope/io/safetensors.h"
#include "attnscope/io/text_source.h"
#include "attnscope/convert/faithfulness.h"
#include "attnscope/model/model.h"
#include "attnscope/pipeline/linearize.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

std::string texts() {
  std::string t;
  for (const auto& e : fs::directory_iterator(test::source_dir() + "/resources/texts"))
    if (e.path().extension() == ".txt") t += " --text " + e.path().string();
  return t;
}

const std::string kTiny = " --model " + test::source_dir() + "/resources/models/brown-gpt2-mini" +
                          " --seq-len 64 --window 16 --max-windows 8 --steps 6 --finetune-steps 4 --batch 2 --rank 2 --seed 3";

int linearize_cli(const std::string& args, std::string* out) {
  return test::run_command(test::cli_path() + " linearize" + args + " 2>&1", out);
}

}  // namespace

TEST(Linearize, RunsEveryStageAndItsReportMatchesAnIndependentEvaluation) {
  const std::string out = test::temp_dir("linearize") + "/out";
  std::string log;
  ASSERT_EQ(linearize_cli(texts() + kTiny + " --out " + out, &log), 0) << log;
  for (const char* f : {"job.json", "texts/train.txt", "texts/heldout.txt", "capture/manifest.json", "stage1/report.json",
                        "converted/config.json", "stage2/report.json", "stage2/model/config.json", "linearize.md",
                        "linearize.json", "report.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  EXPECT_FALSE(fs::exists(out + "/running"));
  const auto j = nlohmann::json::parse(test::read_file(out + "/linearize.json"));
  ASSERT_EQ(j["lengths"].size(), 3u);  // 64 / 4, 64 / 2, 64
  // Independent: the held-out text as eval reads it, each model's mean loss at 64 tokens.
  const std::vector<int64_t> ids = [&] {
    LoadedModel m = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
    return encode_documents(*m.tokenizer, read_text_documents({out + "/texts/heldout.txt"}));
  }();
  const auto& at64 = j["lengths"].back();
  ASSERT_EQ(at64["seq_len"], 64);
  EXPECT_NEAR(load_model(test::source_dir() + "/resources/models/brown-gpt2-mini").model->mean_loss(ids, 64),
              at64["original_loss"].get<double>(), 1e-6);
  EXPECT_NEAR(load_model(out + "/converted").model->mean_loss(ids, 64), at64["stage1_loss"].get<double>(), 1e-6);
  EXPECT_NEAR(load_model(out + "/stage2/model").model->mean_loss(ids, 64), at64["final_loss"].get<double>(), 1e-6);
  // Issue 26 item 2: the final model has a stable name, OUT/model, and OUT itself stands for it.
  EXPECT_EQ(j["final_model"], out + "/model");
  EXPECT_EQ(fs::canonical(out + "/model"), fs::canonical(out + "/stage2/model"));
  const LoadedModel run_as_model = load_model(out);
  EXPECT_EQ(fs::canonical(run_as_model.path), fs::canonical(out + "/stage2/model"));
  EXPECT_NE(run_as_model.note.find("is a linearize run"), std::string::npos) << run_as_model.note;
  EXPECT_NEAR(run_as_model.model->mean_loss(ids, 64), at64["final_loss"].get<double>(), 1e-6);
  // Recall and generation (faithfulness.h, checked against logits there) of the final model against
  // the original itself, not the same weights with softmax: recomputed here from the two models.
  {
    const LoadedModel orig = load_model(test::source_dir() + "/resources/models/brown-gpt2-mini");
    const LoadedModel fin = load_model(out + "/model");
    RecallOptions ro;
    ro.seq_len = 64;
    ro.seed = 3;
    const auto recall = recall_at_distance(*orig.model, *fin.model, ids, ro);
    ASSERT_EQ(j["recall"].size(), recall.size());
    for (size_t i = 0; i < recall.size(); ++i) {
      EXPECT_EQ(j["recall"][i]["lag"], recall[i].lag);
      EXPECT_NEAR(j["recall"][i]["final_kept"].get<double>(), recall[i].kept(), 1e-9);
      EXPECT_TRUE(j["recall"][i]["adapted_kept"].is_number());
    }
    GenerationOptions go;
    go.new_tokens = 32;  // 64 tokens less the 32 of the prompt
    const GenerationAgreement g = generation_agreement(*orig.model, *fin.model, ids, go);
    EXPECT_NEAR(j["generation"]["final"]["token_match"].get<double>(), g.token_match, 1e-12);
    EXPECT_NEAR(j["generation"]["final"]["free_running_kl"].get<double>(), g.free_running_kl, 1e-9);
    EXPECT_TRUE(j["generation"]["adapted"]["token_match"].is_number());
  }
  const std::string md = test::read_file(out + "/linearize.md");
  EXPECT_NE(md.find("Recall at distance"), std::string::npos);
  EXPECT_NE(md.find("Generation against the original"), std::string::npos);
  EXPECT_NE(md.find("Held-out perplexity by length"), std::string::npos);
  EXPECT_NE(md.find("by position"), std::string::npos);
  // Issue 26 item 4: every phase this process ran, with its time, in the report and the log.
  std::vector<std::string> phases;
  for (const auto& p : j["phases"]) phases.push_back(p["phase"]);
  for (const char* want : {"capture", "stage 1 (distill)", "convert", "stage 2 (finetune)",
                           "the anchor: the original finetuned the same way (softmax)", "speed at 64 tokens"})
    EXPECT_NE(std::find(phases.begin(), phases.end(), want), phases.end()) << want << " in " << j["phases"];
  EXPECT_NE(md.find("Where the time went"), std::string::npos);
  EXPECT_NE(test::read_file(out + "/log.txt").find("speed at 64 tokens: started"), std::string::npos);
  // `jobs` reads any run (issue 25: the status words are run_status.h's): the linearize run and its
  // stage 2, a finetune run; the CLI says which model a run directory stands for.
  ASSERT_EQ(test::run_command(test::cli_path() + " jobs " + out + " " + out + "/stage2 2>&1", &log), 0) << log;
  EXPECT_NE(log.find("| linearize | learned-prf | stage 2: 4/4 | finished |"), std::string::npos) << log;
  EXPECT_NE(log.find("| finetune |  | 4/4 | finished |"), std::string::npos) << log;
  char ppl[32];
  std::snprintf(ppl, sizeof ppl, "%.2f", std::exp(at64["final_loss"].get<double>()));
  EXPECT_NE(log.find(out + ": Finished: held-out perplexity " + ppl + " at 64 tokens"), std::string::npos) << log;
  EXPECT_NE(log.find(out + "/stage2: Finished: 4 steps"), std::string::npos) << log;
  ASSERT_EQ(test::run_command(test::cli_path() + " info --model " + out + " 2>&1", &log), 0) << log;
  EXPECT_NE(log.find(out + " is a linearize run: its final model"), std::string::npos) << log;
  // A finished run is not resumed.
  EXPECT_EQ(linearize_cli(" --resume " + out, &log), 1) << log;
}

// A run directory that has not finished is named as such where a model is expected, with the
// path its model will have and how to continue it; --no-speed leaves the speed out of the report.
TEST(Linearize, AnUnfinishedRunIsNotAModelAndNoSpeedSkipsTheSpeed) {
  const std::string dir = test::temp_dir("linearize_unfinished");
  std::ofstream(dir + "/job.json") << R"({"kind": "linearize"})";
  const std::string msg = test::error_of([&] { load_model(dir); });
  EXPECT_NE(msg.find("has not finished"), std::string::npos) << msg;
  EXPECT_NE(msg.find(dir + "/model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("attnscope linearize --resume " + dir), std::string::npos) << msg;
  const std::string out = test::temp_dir("linearize_nospeed") + "/out";
  std::string log;
  std::string args = kTiny;
  args.replace(args.find(" --finetune-steps 4"), std::string(" --finetune-steps 4").size(), " --finetune-steps 0");
  ASSERT_EQ(linearize_cli(texts() + args + " --no-speed --out " + out, &log), 0) << log;
  const auto j = nlohmann::json::parse(test::read_file(out + "/linearize.json"));
  EXPECT_TRUE(j["speed"].empty()) << j["speed"];
  EXPECT_NE(test::read_file(out + "/linearize.md").find("Not measured (--no-speed)"), std::string::npos);
  // Without stage 2 the final model is the stage-1 conversion, under the same name.
  EXPECT_EQ(fs::canonical(out + "/model"), fs::canonical(out + "/converted"));
}

TEST(Linearize, AKilledRunResumesToTheUninterruptedResult) {
  const std::string root = test::temp_dir("linearize_kill");
  std::string log;
  ASSERT_EQ(linearize_cli(texts() + kTiny + " --out " + root + "/whole", &log), 0) << log;
  const std::string cmd = "exec " + test::cli_path() + " linearize" + texts() + kTiny + " --out " + root + "/killed > /dev/null 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  // Killed inside stage 1 (its first checkpoint written), or as soon after as the machine allows.
  const auto start = std::chrono::steady_clock::now();
  while (!fs::exists(root + "/killed/stage1/checkpoints/checkpoint.safetensors") &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  if (fs::exists(root + "/killed/report.json")) GTEST_SKIP() << "the run finished before the kill";
  ASSERT_EQ(linearize_cli(" --resume " + root + "/killed", &log), 0) << log;
  const auto a = nlohmann::json::parse(test::read_file(root + "/whole/linearize.json"));
  const auto b = nlohmann::json::parse(test::read_file(root + "/killed/linearize.json"));
  for (size_t i = 0; i < a["lengths"].size(); ++i)
    for (const char* k : {"original_loss", "untrained_loss", "stage1_loss", "final_loss"})
      EXPECT_NEAR(a["lengths"][i][k].get<double>(), b["lengths"][i][k].get<double>(), 1e-5) << k;
}

TEST(Linearize, BadInputIsRefusedBeforeAnyWork) {
  const std::string root = test::temp_dir("linearize_bad");
  std::ofstream(root + "/short.txt") << "A text far too short for one window of sixty-four tokens.";
  struct Case {
    std::string args, says;
    int rc;
  };
  const std::string base = texts() + " --model " + test::source_dir() + "/resources/models/brown-gpt2-mini --steps 2 --window 16";
  for (const Case& c : {Case{base + " --seq-len 100000", "sequence length", 1},
                        // Issue 25: every option's range is its definition's, checked as it is parsed: a
                        // usage error naming the flag, as --heldout-share (was exit 1 at the run's start).
                        Case{base + " --seq-len 64 --rank 0", "--rank", 2},
                        Case{texts() + " --model " + test::source_dir() + "/resources/models/brown-gpt2-mini --seq-len 64 --window 64", "window", 1},
                        Case{" --text " + root + "/short.txt" + kTiny, "fewer than four windows", 1},
                        Case{texts() + kTiny + " --heldout-share 1.5", "--heldout-share", 2},
                        Case{texts() + kTiny + " --loss direct", "--loss", 2}}) {
    std::string log;
    EXPECT_EQ(linearize_cli(c.args + " --out " + root + "/out", &log), c.rc) << c.args << "\n" << log;
    EXPECT_NE(log.find(c.says), std::string::npos) << c.args << "\n" << log;
    EXPECT_FALSE(fs::exists(root + "/out")) << c.args;
  }
}

// OUT/linearize.json by core's one reader (the workbench's final table reads it): hand-written files,
// a run without stage 2 (adapted_loss null), and files that do not read, named.
TEST(Linearize, ReportReaderReadsTheJsonAndNamesABadFile) {
  const std::string dir = test::temp_dir("linearize_report");
  EXPECT_FALSE(read_linearize_report(dir).has_value());  // not written yet
  const std::string file = dir + "/linearize.json";
  std::ofstream(file) << R"({"seq_len": 64, "final_model": "/x/stage2/model", "heldout_tokens": 1234, "heldout_share": 0.15,
    "lengths": [{"seq_len": 16, "original_loss": 3.5, "untrained_loss": 6.25, "stage1_loss": 4.5, "final_loss": 3.75,
                 "adapted_loss": 3.25, "original_perplexity": 33.1, "final_perplexity": 42.5},
                {"seq_len": 64, "original_loss": 3.0, "untrained_loss": 6.0, "stage1_loss": 4.0, "final_loss": 3.5,
                 "adapted_loss": null}],
    "positions": [], "layers": [{"layer": 0, "dims": [8], "attention_kl": 0.125}, {"layer": 1, "dims": [8], "attention_kl": 0.25}],
    "speed": [], "seconds": 2.5,
    "recall": [{"lag": 16, "sequences": 12, "original_drop": 2.0, "final_drop": 1.5, "final_kept": 0.75, "adapted_kept": 0.5},
               {"lag": 47, "sequences": 12, "original_drop": 2.0, "final_drop": 1.0, "final_kept": 0.5, "adapted_kept": null}],
    "generation": {"final": {"prompts": 8, "new_tokens": 32, "token_match": 0.625, "first_divergence": 7.5, "free_running_kl": 0.25},
                   "adapted": null}})";
  const auto r = read_linearize_report(dir);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->seq_len, 64);
  EXPECT_EQ(r->heldout_tokens, 1234);
  EXPECT_DOUBLE_EQ(r->heldout_share, 0.15);
  EXPECT_EQ(r->final_model, "/x/stage2/model");
  ASSERT_EQ(r->lengths.size(), 2u);
  EXPECT_EQ(r->lengths[0].seq_len, 16);
  EXPECT_DOUBLE_EQ(r->lengths[0].original_loss, 3.5);
  EXPECT_DOUBLE_EQ(r->lengths[0].untrained_loss, 6.25);
  EXPECT_DOUBLE_EQ(r->lengths[0].stage1_loss, 4.5);
  EXPECT_DOUBLE_EQ(r->lengths[0].final_loss, 3.75);
  EXPECT_DOUBLE_EQ(r->lengths[0].adapted_loss, 3.25);
  EXPECT_TRUE(std::isnan(r->lengths[1].adapted_loss));
  EXPECT_EQ(r->layer_kl, (std::vector<double>{0.125, 0.25}));
  EXPECT_DOUBLE_EQ(r->seconds, 2.5);
  ASSERT_EQ(r->recall.size(), 2u);
  EXPECT_EQ(r->recall[1].lag, 47);
  EXPECT_DOUBLE_EQ(r->recall[0].final_kept, 0.75);
  EXPECT_DOUBLE_EQ(r->recall[0].adapted_kept, 0.5);
  EXPECT_TRUE(std::isnan(r->recall[1].adapted_kept));
  ASSERT_TRUE(r->final_generation.has_value());
  EXPECT_DOUBLE_EQ(r->final_generation->token_match, 0.625);
  EXPECT_DOUBLE_EQ(r->final_generation->first_divergence, 7.5);
  EXPECT_DOUBLE_EQ(r->final_generation->free_running_kl, 0.25);
  EXPECT_EQ(r->final_generation->new_tokens, 32);
  EXPECT_FALSE(r->adapted_generation.has_value());

  // The one JSON reader's words (issue 25: this file had a reader of its own).
  const std::pair<std::string, std::string> bad[] = {
      {"{\"seq_len\": 64", "is not valid JSON"},
      {R"({"seq_len": 64, "final_model": "m", "heldout_tokens": 5, "lengths": [], "layers": []})", "'lengths' must be a list"},
      {R"({"seq_len": 64, "final_model": "m", "heldout_tokens": 5, "layers": [],
          "lengths": [{"seq_len": 8, "original_loss": "3", "untrained_loss": 1, "stage1_loss": 1, "final_loss": 1, "adapted_loss": 1}]})",
       "'lengths.original_loss' must be a finite number"},
      {R"({"seq_len": 64, "heldout_tokens": 5, "lengths": [], "layers": []})", "has no 'final_model'"},
  };
  for (const auto& [text, expect] : bad) {
    std::ofstream(file) << text;
    const std::string msg = test::error_of([&] { read_linearize_report(dir); });
    EXPECT_EQ(msg.rfind(file, 0), 0u) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
  // A run folder is known by its job.json.
  EXPECT_FALSE(is_linearize_run(dir));
  std::ofstream(dir + "/job.json") << R"({"kind": "linearize"})";
  EXPECT_TRUE(is_linearize_run(dir));
  std::ofstream(dir + "/job.json") << R"({"model": "m"})";
  EXPECT_FALSE(is_linearize_run(dir));
}

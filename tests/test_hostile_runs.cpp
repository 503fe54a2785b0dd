// Issue 19's hostile cases against run directories: what a second command, a kill, a corrupt file or
// a bad number does to a distillation run. Every case checks the exit code, the message (the file
// or the option named) and what is left on disk: nothing the user made is overwritten or mixed,
// and a refused command leaves no run directory behind.
#include <gtest/gtest.h>
#include <ATen/ATen.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/model/model.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/io/safetensors.h"
#include "test_support.h"
#include "tiny_models.h"

namespace fs = std::filesystem;
using namespace attnscope;

namespace {

const std::string kArgs = " --feature-map learned-prf --features 8 --batch 2 --seed 4";

std::string cli() { return test::cli_path(); }

// `attnscope distill ...`; returns the exit code, output in *out.
int distill_cli(const std::string& args, std::string* out) { return test::run_command(cli() + " distill " + args + " 2>&1", out); }

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A finished run of `steps` steps in a fresh directory.
std::string finished_run(const std::string& tag, int steps = 4) {
  const std::string run = test::temp_dir(tag) + "/run";
  std::string out;
  EXPECT_EQ(distill_cli("--capture " + test::bundled_capture() + kArgs + " --steps " + std::to_string(steps) +
                            " --checkpoint-every 2 --out " + run,
                        &out),
            0)
      << out;
  return run;
}

// A copy of the bundled capture with layer 1's q replaced by `q` (same header otherwise).
std::string capture_with_layer1_q(const std::string& tag, const at::Tensor& q) {
  const std::string dir = test::temp_dir(tag) + "/cap";
  fs::copy(test::bundled_capture(), dir, fs::copy_options::recursive);
  const std::string layer = dir + "/layer_1.safetensors";
  SafetensorsFile f(layer);
  NamedTensors tensors;
  for (const auto& e : f.entries()) tensors.emplace_back(e.name, e.name == "q" ? q : f.tensor(e.name).clone());
  const auto meta = f.metadata();
  write_safetensors(layer, tensors, meta);
  return dir;
}

std::string layer1_file(const std::string& capture) { return capture + "/layer_1.safetensors"; }

}  // namespace

// 3. distill onto an existing run is refused; the run is unchanged (job.json, metrics, maps).
TEST(HostileRuns, DistillOntoAnExistingRunIsRefused) {
  const std::string run = finished_run("hostile_overwrite");
  const std::string job = test::read_file(run + "/job.json"), metrics = test::read_file(run + "/metrics.jsonl");
  const std::string maps = test::read_file(run + "/feature_maps.safetensors");
  std::string out;
  EXPECT_EQ(distill_cli("--capture " + test::bundled_capture() + kArgs + " --steps 3 --out " + run, &out), 1) << out;
  EXPECT_TRUE(has(out, run) && has(out, "is not empty")) << out;
  EXPECT_EQ(test::read_file(run + "/job.json"), job);
  EXPECT_EQ(test::read_file(run + "/metrics.jsonl"), metrics);
  EXPECT_EQ(test::read_file(run + "/feature_maps.safetensors"), maps);
  // A finished run is not resumed either.
  EXPECT_EQ(distill_cli("--resume " + run, &out), 1) << out;
  EXPECT_TRUE(has(out, "has finished")) << out;
}

// 4. A run directory has one writer: a second distill to the same --out while the first trains,
// and a resume of a run whose process still trains, are refused; the first run finishes whole.
TEST(HostileRuns, ASecondWriterOfALiveRunIsRefused) {
  const std::string run = test::temp_dir("hostile_lock") + "/run";
  const std::string first = cli() + " distill --capture " + test::bundled_capture() + kArgs +
                            " --steps 400 --checkpoint-every 50 --out " + run + " > " + run + ".log 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", first.c_str(), (char*)nullptr);
    _exit(127);
  }
  // Wait until the run has its checkpoint (it is live and resumable-looking).
  const auto start = std::chrono::steady_clock::now();
  while (!fs::exists(run + "/checkpoints/checkpoint.safetensors") &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(fs::exists(run + "/checkpoints/checkpoint.safetensors"));
  EXPECT_TRUE(run_is_live(run));
  EXPECT_EQ(run_state(run), RunState::Running);
  std::string out;
  const int resume_rc = distill_cli("--resume " + run, &out);
  const std::string resume_out = out;
  const int second_rc = distill_cli("--capture " + test::bundled_capture() + kArgs + " --steps 3 --out " + run, &out);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::read_file(run + ".log");
  EXPECT_EQ(resume_rc, 1) << resume_out;
  EXPECT_TRUE(has(resume_out, "in use")) << resume_out;
  EXPECT_EQ(second_rc, 1) << out;
  EXPECT_TRUE(has(out, run)) << out;
  // The first run is whole and its own: 400 steps, every layer's line once per step.
  EXPECT_EQ(run_state(run), RunState::Finished);
  EXPECT_FALSE(run_is_live(run));
  const auto job = nlohmann::json::parse(test::read_file(run + "/job.json"));
  EXPECT_EQ(job["steps"], 400);
  int lines = 0;
  std::istringstream in(test::read_file(run + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (nlohmann::json::parse(line).contains("loss")) ++lines;
  EXPECT_EQ(lines, 400 * 4);
}

// 6. Inputs are checked before the run directory exists: NaN in the capture, a q/k shape that does
// not match, a validation capture of another model, a bad number: no directory is left.
TEST(HostileRuns, BadInputsLeaveNoRunDirectory) {
  const std::string root = test::temp_dir("hostile_inputs");
  const std::string cap = test::bundled_capture();
  SafetensorsFile layer(layer1_file(cap));
  at::Tensor q = layer.tensor("q").clone();
  q.view({-1})[17] = std::nanf("");
  const std::string nan_cap = capture_with_layer1_q("hostile_nan", q);
  const std::string shape_cap = capture_with_layer1_q("hostile_shape", layer.tensor("q").narrow(3, 0, 8).contiguous());
  const std::string other = test::temp_dir("hostile_other") + "/cap";
  {
    LoadedModel m = load_model(test::tiny_gpt2_dir());
    CaptureOptions o;
    o.seq_len = 16;
    o.num_seqs = 2;
    capture_to_dir(m, test::sample_documents(), o, other);
  }
  struct Case {
    std::string args, says;
    int rc;
  };
  const std::vector<Case> cases = {
      {"--capture " + nan_cap + kArgs, "NaN", 1},
      {"--capture " + shape_cap + kArgs, "shape", 1},
      {"--capture " + cap + " --val-capture " + other + kArgs, other, 1},
      {"--capture " + cap + kArgs + " --lr inf", "--lr", 2},
      {"--capture " + cap + kArgs + " --lr-alpha nan", "--lr-alpha", 2},
      {"--capture " + cap + kArgs + " --weight-decay nan", "--weight-decay", 2},
      {"--capture " + cap + kArgs + " --weight-decay -1", "--weight-decay", 2},
      {"--capture " + cap + " --feature-map learned-prf --features 1000000000", "--features", 2},
      {"--capture " + cap + " --feature-map learned-prf --strategy dof --budget 9223372036854775807", "--budget", 2},
      {"--capture " + cap + kArgs + " --steps 0", "--steps", 2},
      {"--capture " + cap + kArgs + " --batch 1e9", "--batch", 2},
      {"--capture " + cap + kArgs + " --val-share 1", "--val-share", 2},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string run = root + "/run" + std::to_string(i);
    std::string out;
    EXPECT_EQ(distill_cli(cases[i].args + " --out " + run, &out), cases[i].rc) << cases[i].args << "\n" << out;
    EXPECT_TRUE(has(out, cases[i].says)) << cases[i].args << "\n" << out;
    EXPECT_FALSE(has(out, "Traceback") || has(out, "terminate") || has(out, "Exception raised")) << out;
    EXPECT_FALSE(fs::exists(run)) << cases[i].args;
  }
  // An allocation file with M = 1e9, and a per-head row of the wrong length whose values agree.
  std::ofstream(root + "/huge.json") << "{\"dims\": [1000000000, 8, 8, 8]}";
  std::ofstream(root + "/short.json") << "{\"dims\": [[8, 8, 8], 8, 8, 8]}";
  for (const std::string& file : {root + "/huge.json", root + "/short.json"}) {
    std::string out;
    EXPECT_EQ(distill_cli("--capture " + cap + " --feature-map learned-prf --allocation " + file + " --out " + root + "/alloc", &out), 1)
        << out;
    EXPECT_TRUE(has(out, file)) << out;
    EXPECT_FALSE(fs::exists(root + "/alloc"));
  }
  // `allocate` refuses a budget it cannot hold instead of printing nonsense.
  std::string out;
  EXPECT_NE(test::run_command(cli() + " allocate --capture " + cap + " --budget 9223372036854775807 2>&1", &out), 0) << out;
  EXPECT_TRUE(has(out, "budget")) << out;
}

// 8. --resume checks the checkpoint against its job: NaN or integer tensors, another run's
// checkpoint (another seed), a step outside 0..steps. Each is refused naming the checkpoint.
TEST(HostileRuns, ResumeChecksTheCheckpoint) {
  const std::string good = test::temp_dir("hostile_ckpt") + "/run";
  std::string out;
  // Stopped after its step-2 checkpoint (20 steps, checkpoint every 2, cancelled at step 3).
  {
    DistillOptions o;
    o.capture = test::bundled_capture();
    o.features = 8;
    o.batch = 2;
    o.seed = 4;
    o.steps = 20;
    o.checkpoint_every = 2;
    const ProgressFn stop = [](double, const std::string& what) {
      if (what.rfind("step 3/", 0) == 0) throw Cancelled();
    };
    EXPECT_THROW(distill(o, good, stop), Cancelled);
  }
  const std::string ck = good + "/checkpoints/checkpoint.safetensors";
  SafetensorsFile f(ck);
  const auto meta = f.metadata();
  NamedTensors base;
  for (const auto& e : f.entries()) base.emplace_back(e.name, f.tensor(e.name).clone());
  const auto variant = [&](const std::string& tag, auto&& change_tensors, auto&& change_meta) {
    const std::string run = test::temp_dir("hostile_ckpt_" + tag) + "/run";
    fs::copy(good, run, fs::copy_options::recursive);
    NamedTensors t;
    for (const auto& [name, tensor] : base) t.emplace_back(name, tensor.clone());
    auto m = meta;
    change_tensors(t);
    change_meta(m);
    write_safetensors(run + "/checkpoints/checkpoint.safetensors", t, m);
    return run;
  };
  const auto same = [](auto&) {};
  struct Case {
    std::string run, says;
  };
  const std::vector<Case> cases = {
      {variant("nan", [](NamedTensors& t) { t[0].second.fill_(std::nan("")); }, same), "NaN"},
      {variant("int", [](NamedTensors& t) { t[0].second = t[0].second.to(at::kLong); }, same), "float32"},
      {variant("seed", same, [](std::map<std::string, std::string>& m) { m["seed"] = "7"; }), "seed"},
      {variant("late", same, [](std::map<std::string, std::string>& m) { m["step"] = "1000000"; }), "step"},
      {variant("early", same, [](std::map<std::string, std::string>& m) { m["step"] = "-5"; }), "step"},
      {variant("word", same, [](std::map<std::string, std::string>& m) { m["step"] = "ten"; }), "not a number"},
      {variant("extra", [](NamedTensors& t) { t.emplace_back("layers.9.z", at::zeros({2})); }, same), "another job"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(distill_cli("--resume " + c.run, &out), 1) << c.run << "\n" << out;
    EXPECT_TRUE(has(out, c.run + "/checkpoints/checkpoint.safetensors")) << out;
    EXPECT_TRUE(has(out, c.says)) << c.says << "\n" << out;
    EXPECT_FALSE(fs::exists(c.run + "/report.json"));
  }
  // The untouched run resumes and finishes.
  EXPECT_EQ(distill_cli("--resume " + good, &out), 0) << out;
}

// 10 and 12. job.json holds resolved paths, so a run started with relative paths resumes from any
// directory; a run killed before its first checkpoint resumes from step 0 to the uninterrupted
// result.
TEST(HostileRuns, RelativePathsAndNoCheckpointYetResume) {
  const std::string root = test::temp_dir("hostile_relative");
  fs::copy(test::bundled_capture(), root + "/cap", fs::copy_options::recursive);
  std::string out;
  const std::string args = kArgs + " --steps 6 --checkpoint-every 4";
  ASSERT_EQ(test::run_command("cd " + root + " && " + cli() + " distill --capture cap" + args + " --out whole 2>&1", &out), 0) << out;
  // Killed at once: SIGKILL as soon as job.json exists, before the first checkpoint.
  const std::string cmd = "cd " + root + " && exec " + cli() + " distill --capture cap" + args + " --out killed > /dev/null 2>&1";
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  }
  while (!fs::exists(root + "/killed/job.json")) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  if (fs::exists(root + "/killed/checkpoints/checkpoint.safetensors") || fs::exists(root + "/killed/report.json"))
    GTEST_SKIP() << "the run reached its checkpoint before the kill";
  const auto job = nlohmann::json::parse(test::read_file(root + "/killed/job.json"));
  EXPECT_TRUE(fs::path(job["capture"].get<std::string>()).is_absolute()) << job["capture"];
  EXPECT_EQ(run_state(root + "/killed"), RunState::Killed);
  ASSERT_EQ(test::run_command("cd / && " + cli() + " distill --resume " + root + "/killed 2>&1", &out), 0) << out;
  EXPECT_EQ(test::read_file(root + "/killed/feature_maps.safetensors").size(),
            test::read_file(root + "/whole/feature_maps.safetensors").size());
  SafetensorsFile a(root + "/whole/feature_maps.safetensors"), b(root + "/killed/feature_maps.safetensors");
  for (const auto& e : a.entries()) EXPECT_TRUE(at::equal(a.tensor(e.name), b.tensor(e.name))) << e.name;
}

// 13 and 15. What a kill leaves is swept by the next writer and named by `jobs`; malformed files
// get messages naming the file, not a library's.
TEST(HostileRuns, DebrisIsSweptAndMalformedFilesAreNamed) {
  const std::string run = finished_run("hostile_debris", 2);
  const std::string folder = fs::path(run).parent_path().string();
  fs::create_directories(folder + "/out.partial-99999999/x");
  std::ofstream(run + "/checkpoints/checkpoint.safetensors.tmp") << "half";
  std::string out;
  ASSERT_EQ(test::run_command(cli() + " jobs " + run + " 2>&1", &out), 0) << out;
  EXPECT_TRUE(has(out, "out.partial-99999999")) << out;
  EXPECT_TRUE(has(out, "checkpoint.safetensors.tmp")) << out;
  // A metrics line of a layer the job does not have is not shown as one.
  std::ofstream(run + "/metrics.jsonl", std::ios::app) << "{\"step\": 2, \"layer\": 9, \"loss\": 123.5}\n";
  ASSERT_EQ(test::run_command(cli() + " jobs " + run + " 2>&1", &out), 0) << out;
  EXPECT_FALSE(has(out, "123.5")) << out;
  EXPECT_TRUE(has(out, "outside 0..3")) << out;
  // The next writer in the folder sweeps the killed one's partial output.
  EXPECT_EQ(distill_cli("--capture " + test::bundled_capture() + kArgs + " --steps 1 --out " + folder + "/next", &out), 0) << out;
  EXPECT_FALSE(fs::exists(folder + "/out.partial-99999999"));
  // Wrong-typed job.json: the file and the key, not "[json.exception.type_error.302]".
  auto job = nlohmann::json::parse(test::read_file(run + "/job.json"));
  job["steps"] = "four";
  std::ofstream(run + "/job.json") << job.dump();
  for (const std::string& cmd : {" jobs " + run, " convert --job " + run + " --out " + folder + "/converted"}) {
    EXPECT_EQ(test::run_command(cli() + cmd + " 2>&1", &out), 1) << out;
    EXPECT_TRUE(has(out, run + "/job.json") && has(out, "'steps'")) << out;  // the one JSON reader's quotes (issue 25)
    EXPECT_FALSE(has(out, "json.exception")) << out;
  }
  job["steps"] = 2;
  job["dims"] = {0, 8, 8, 8};
  std::ofstream(run + "/job.json") << job.dump();
  EXPECT_EQ(test::run_command(cli() + " jobs " + run + " 2>&1", &out), 1) << out;
  EXPECT_TRUE(has(out, run + "/job.json") && has(out, "feature dimension 0")) << out;
}

// `attnscope bench scale`: what a model of real size costs. Writes random-weight checkpoints shaped like
// GPT-2 small, Llama-3.2-1B and Llama-3-8B (core: scale_bench.h), then runs attnscope's own commands on
// each as child processes (info, capture, spectra, metrics, one distill step, eval) and reports each
// one's wall time and peak resident memory (the kernel's ru_maxrss of that process: mapped file pages it
// touched count, as they do for any reader of the model), beside the checkpoint's size.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "attnscope/bench/scale_bench.h"
#include "attnscope/base/file_tree.h"
#include "attnscope/base/table.h"
#include "attnscope/io/text_source.h"
#include "common.h"

namespace fs = std::filesystem;

namespace attnscope::cli {
namespace {

struct StepResult {
  std::string step;
  std::string status;  // "ok", "failed (exit N)", "timeout after S s"
  double seconds = 0;
  int64_t peak_rss_bytes = 0;
  std::string log;  // the child's stdout + stderr
};

// Runs `attnscope ARGS` (this executable) with stdout/stderr into `log`; kills it after `timeout_s`.
StepResult run_child(const std::string& step, const std::vector<std::string>& args, const std::string& log, double timeout_s) {
  StepResult r{step, "ok", 0, 0, log};
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) fail("bench scale", "fork failed");
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) ::dup2(fd, 1), ::dup2(fd, 2);
    std::vector<std::string> all = {"attnscope"};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage ru {};
  bool killed = false;
  for (;;) {
    const pid_t done = ::wait4(pid, &status, WNOHANG, &ru);
    if (done == pid) break;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!killed && timeout_s > 0 && s > timeout_s) {
      ::kill(pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_rss_bytes = int64_t(ru.ru_maxrss) * 1024;
  if (killed) r.status = "timeout after " + fmt_number(timeout_s, 0) + " s";
  else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    r.status = "failed (" + (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status)) : "signal " + std::to_string(WTERMSIG(status))) +
               "; see " + log + ")";
  return r;
}

struct ScaleOptions {
  std::vector<std::string> shapes{"gpt2-small", "llama-3.2-1b"};
  std::vector<std::string> steps{"info", "capture", "spectra", "metrics", "distill", "eval"};
  std::string dir;
  int seq_len = 0, num_seqs = 0;  // 0: per shape (gpt2-small 1024 x 8, Llama 256 x 2)
  int eval_chars = 2000;          // eval reads this many characters of the sample text
  double timeout = 1800;
  bool reuse = false;
  bool json = false;
};

const std::vector<std::string> kSteps = {"info", "capture", "spectra", "metrics", "distill", "eval"};

}  // namespace

void register_scale_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "scale", "Time and peak resident memory of info, capture, spectra, metrics, one distill step and eval on "
               "random-weight checkpoints shaped like GPT-2 small, Llama-3.2-1B and Llama-3-8B (stored dtype as published)");
  auto o = std::make_shared<ScaleOptions>();
  cmd->add_option("--shapes", o->shapes, "model shapes")->delimiter(',')->check(CLI::IsMember(model_shape_names()))->capture_default_str();
  cmd->add_option("--steps", o->steps, "what to run on each")->delimiter(',')->check(CLI::IsMember(kSteps))->capture_default_str();
  cmd->add_option("-d,--dir", o->dir, "folder for the checkpoints (several GB; 16 GB for llama-3-8b) and outputs")->required();
  cmd->add_option("-L,--seq-len", o->seq_len, "capture window (default: 1024 for gpt2-small, 256 for Llama shapes)");
  cmd->add_option("-T,--num-seqs", o->num_seqs, "capture windows (default: 8 for gpt2-small, 2 for Llama shapes)");
  cmd->add_option("--eval-chars", o->eval_chars, "characters of the sample text eval reads")->capture_default_str();
  cmd->add_option("--timeout", o->timeout, "seconds before a step is stopped and reported as such")->capture_default_str();
  cmd->add_flag("--reuse", o->reuse, "keep a checkpoint already written in the folder instead of writing it again");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o] {
    fs::create_directories(o->dir);
    const std::string dir = fs::absolute(o->dir).string();
    const std::string tokenizer = default_model() + "/tokenizer.json";
    // The capture text: the sample texts one after another, repeated until there are ~5 characters
    // per token of the largest capture (they hold ~5K tokens together; a cost benchmark may repeat
    // them). The eval text: its first eval_chars characters (eval on an 8B model on a CPU costs
    // minutes per thousand tokens).
    const std::string text = dir + "/bench_text.txt", eval_text = dir + "/eval_text.txt";
    {
      std::string all;
      for (const std::string& f : default_texts()) {
        std::ifstream in(f);
        all += std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) + "\n";
      }
      const size_t want = size_t(5) * size_t(o->seq_len ? o->seq_len : 1024) * size_t(o->num_seqs ? o->num_seqs : 8);
      std::string body = all;
      while (body.size() < want) body += all;
      std::ofstream(text) << body;
      std::ofstream(eval_text) << body.substr(0, size_t(o->eval_chars));
    }
    nlohmann::json out = {{"benchmark", "scale"}, {"rows", nlohmann::json::array()}};
    Table t;
    t.caption = "bench scale: random-weight checkpoints of real shapes; peak RSS = the process's ru_maxrss";
    t.header = {"shape", "stored", "file GB", "step", "seconds", "peak RSS GB", "RSS / file", "status"};
    for (const std::string& name : o->shapes) {
      const ModelShape shape = parse_model_shape(name);
      const std::string model = dir + "/" + name;
      const bool llama = shape != ModelShape::Gpt2Small;
      const int L = o->seq_len ? o->seq_len : llama ? 256 : 1024, T = o->num_seqs ? o->num_seqs : llama ? 2 : 8;
      ShapedCheckpoint ck;
      if (o->reuse && fs::exists(model + "/config.json")) {
        // What is there, from its headers (as `info` reads them), not assumed from the shape.
        const ModelInfo info = inspect_model(model);
        ck.dir = model;
        ck.shards = int(info.weight_files.size());
        for (const auto& [dtype, bytes] : info.stored_bytes) {
          ck.weight_bytes += bytes;
          ck.dtype += (ck.dtype.empty() ? "" : "+") + dtype;
        }
      } else {
        const auto t0 = std::chrono::steady_clock::now();
        ck = write_shaped_checkpoint(shape, model, tokenizer, 0, terminal_progress("write " + name));
        std::cerr << name << ": wrote " << ck.weight_bytes / 1000000 << " MB in " << ck.shards << " file(s), "
                  << fmt_number(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1) << " s\n";
      }
      const std::string cap = dir + "/" + name + ".capture", run = dir + "/" + name + ".distill";
      for (const std::string& step : o->steps) {
        std::vector<std::string> args;
        if (step == "info") args = {"info", "--model", model};
        if (step == "capture")
          args = {"capture", "--model", model, "--text", text, "--seq-len", std::to_string(L), "--num-seqs", std::to_string(T),
                  "--batch", "1", "--out", cap};
        if (step == "spectra") args = {"dof", "--capture", cap, "--out", dir + "/" + name + ".spectra.safetensors"};
        if (step == "metrics") args = {"metrics", "--capture", cap, "--json"};
        if (step == "distill") {
          remove_tree(run);
          args = {"distill", "--capture", cap, "--features", "64", "--steps", "1", "--out", run};
        }
        if (step == "eval") args = {"eval", "--model", model, "--text", eval_text, "--seq-len", std::to_string(L)};
        std::cerr << name << ": " << step << " ...\n";
        const StepResult r = run_child(step, args, dir + "/" + name + "." + step + ".log", o->timeout);
        const double file_gb = double(ck.weight_bytes) / 1e9;
        t.add_row({name, ck.dtype, fmt_number(file_gb, 2), step, fmt_number(r.seconds, 1),
                   fmt_number(double(r.peak_rss_bytes) / 1e9, 2), fmt_number(double(r.peak_rss_bytes) / 1e9 / file_gb, 2),
                   r.status});
        out["rows"].push_back({{"shape", name}, {"stored_dtype", ck.dtype}, {"weight_bytes", ck.weight_bytes},
                               {"shards", ck.shards}, {"step", step}, {"command", args}, {"seconds", r.seconds},
                               {"peak_rss_bytes", r.peak_rss_bytes}, {"status", r.status}, {"seq_len", L}, {"num_seqs", T}});
      }
    }
    if (o->json)
      std::cout << out.dump(2) << "\n";
    else
      std::cout << to_markdown(t);
  });
}

}  // namespace attnscope::cli

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

#include "attnscope/analysis/analysis_options.h"
#include "attnscope/analysis/dof_options.h"
#include "attnscope/bench/scale_bench.h"
#include "attnscope/capture/capture_options.h"
#include "attnscope/convert/convert_options.h"
#include "attnscope/distill/distill_options.h"
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

}  // namespace

void register_scale_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand(
      "scale", "Time and peak resident memory of info, capture, spectra, metrics, one distill step and eval on "
               "random-weight checkpoints shaped like GPT-2 small, Llama-3.2-1B and Llama-3-8B (stored dtype as published)");
  auto o = std::make_shared<ScaleBenchOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, scale_bench_option_table(), o);
  require(cmd, "--dir");
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([o, fmt] {
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
        // Each child's command line, written from its command's option table.
        std::vector<std::string> args;
        const auto command = [&args](const char* name, std::vector<std::string> options,
                                     const std::vector<std::string>& tail = {}) {
          args = {name};
          args.insert(args.end(), options.begin(), options.end());
          args.insert(args.end(), tail.begin(), tail.end());
        };
        ModelOptions mo;
        mo.model = model;
        if (step == "info") command("info", option_args(model_source_option_table(), mo));
        if (step == "capture") {
          CaptureCommand c;
          c.model = mo;
          c.texts = {text};
          c.capture.seq_len = L;
          c.capture.num_seqs = T;
          c.capture.batch = 1;
          command("capture", option_args(capture_command_option_table(), c), out_args(cap));
        }
        if (step == "spectra") {
          DofCommand d;
          d.capture = cap;
          command("dof", option_args(dof_command_option_table(), d), out_args(dir + "/" + name + ".spectra.safetensors"));
        }
        if (step == "metrics") {
          MetricsCommand m;
          m.capture = cap;
          command("metrics", option_args(metrics_command_option_table(), m), format_args(OutputFormat::Json));
        }
        if (step == "distill") {
          remove_tree(run);
          DistillOptions d;
          d.capture = cap;
          d.features = 64;
          d.steps = 1;
          command("distill", option_args(distill_option_table(), d), out_args(run));
        }
        if (step == "eval") {
          EvalOptions e;
          e.model = mo;
          e.texts = {eval_text};
          e.seq_lens = {L};
          command("eval", option_args(eval_option_table(), e));
        }
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
    if (fmt->format == OutputFormat::Json)
      std::cout << out.dump(2) << "\n";
    else
      std::cout << to_markdown(t);
  });
}

}  // namespace attnscope::cli

// `attnscope jobs RUN...`: a status table of run directories (SPEC 6), read from their files only,
// so it works on runs of other processes, finished or killed.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/run/run_metrics.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string num(double v) {
  std::ostringstream s;
  s.precision(4);
  s << v;
  return s.str();
}

}  // namespace

void register_jobs(CLI::App& app) {
  auto* cmd = app.add_subcommand("jobs", "Status of job run directories: map, step, state, losses");
  auto runs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("runs", *runs, "run directories")->required();
  cmd->callback([runs] {
    Table t;
    t.header = {"run", "feature map", "step", "state", "last loss per layer", "val KL"};
    std::vector<std::string> notes;
    for (const std::string& run : *runs) {
      const DistillJob job = read_distill_job(run);  // Error naming job.json for anything malformed
      const int layers = int(job.dims.size());
      // The last value of each layer (a line cut by a kill is skipped by the reader); direct
      // training's lines are the whole model's, layer -1, shown first. A line of a layer the job
      // does not have is not this job's: left out, and said.
      const RunMetrics metrics = read_run_metrics(run);
      std::map<int, double> loss, val_kl;
      int foreign = 0;
      for (const TrainingPoint& p : metrics.training) {
        if (p.layer < -1 || p.layer >= layers) ++foreign;
        else loss[p.layer] = p.loss;
      }
      for (const ValidationPoint& p : metrics.validation) {
        if (p.layer < -1 || p.layer >= layers) ++foreign;
        else val_kl[p.layer] = p.val_kl;
      }
      if (foreign)
        notes.push_back(run + "/metrics.jsonl: " + std::to_string(foreign) + " lines name a layer outside 0.." +
                        std::to_string(layers - 1) + " (not shown)");
      if (fs::exists(run + "/checkpoints/checkpoint.safetensors.tmp"))
        notes.push_back(run + ": a half-written checkpoint of a killed run (checkpoints/checkpoint.safetensors.tmp) is "
                              "removed when the run is resumed");
      for (const std::string& d : killed_writer_debris(run))
        notes.push_back(d + ": what a killed writer left (swept by the next write in that folder)");
      const int64_t step = metrics.last_step();
      const std::string state = run_state_name(run_state(run));
      std::string losses, kls;
      for (const auto& [l, v] : loss) losses += (losses.empty() ? "" : " ") + num(v);
      for (const auto& [l, v] : val_kl) kls += (kls.empty() ? "" : " ") + num(v);
      t.add_row({run, job.options.feature_map, std::to_string(step) + "/" + std::to_string(job.options.steps), state,
                 losses, kls});
    }
    std::cout << to_markdown(t);
    for (const std::string& n : notes) std::cout << "note: " << n << "\n";
  });
}

}  // namespace attnscope::cli

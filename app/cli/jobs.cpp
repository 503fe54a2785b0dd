// `attnscope jobs RUN...`: a status table of run directories (SPEC 6; distill, finetune and linearize runs), read from their files only,
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
#include "attnscope/pipeline/linearize.h"
#include "attnscope/workbench/run_status.h"
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
  auto* cmd = app.add_subcommand("jobs", "Status of run directories (distill, finetune, linearize): map, step, state, losses");
  auto runs = std::make_shared<std::vector<std::string>>();
  cmd->add_option("runs", *runs, "run directories")->required();
  cmd->callback([runs] {
    Table t;
    t.header = {"run", "job", "feature map", "step", "state", "last loss per layer", "val KL"};
    std::vector<std::string> notes, statuses;
    for (const std::string& run : *runs) {
      // The words every front end uses for where a run stands (run_status.h), for any kind of job.
      const RunStatus status = read_run_status(run);  // Error naming the file for anything malformed
      if (!status.state) fail(run, "is not a run directory (no job.json)");
      statuses.push_back(run + ": " + run_status_text(status));
      const std::string state = run_state_name(*status.state);
      for (const std::string& d : killed_writer_debris(run))
        notes.push_back(d + ": what a killed writer left (swept by the next write in that folder)");
      if (status.linearize) {
        const LinearizeOptions o = read_linearize_job(run);
        const std::string step = status.finetune_step > 0
                                     ? "stage 2: " + std::to_string(status.finetune_step) + "/" + std::to_string(status.finetune_steps)
                                     : "stage 1: " + std::to_string(status.step) + "/" + std::to_string(status.steps);
        t.add_row({run, "linearize", o.stage1.feature_map, step, state, "", ""});
        continue;
      }
      if (status.finetune) {
        t.add_row({run, "finetune", "", std::to_string(status.step) + "/" + std::to_string(status.steps), state, "", ""});
        continue;
      }
      const DistillJob job = read_distill_job(run);
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
      std::string losses, kls;
      for (const auto& [l, v] : loss) losses += (losses.empty() ? "" : " ") + num(v);
      for (const auto& [l, v] : val_kl) kls += (kls.empty() ? "" : " ") + num(v);
      t.add_row({run, "distill", job.options.feature_map,
                 std::to_string(metrics.last_step()) + "/" + std::to_string(job.options.steps), state, losses, kls});
    }
    std::cout << to_markdown(t);
    for (const std::string& s : statuses) std::cout << s << "\n";
    for (const std::string& n : notes) std::cout << "note: " << n << "\n";
  });
}

}  // namespace attnscope::cli

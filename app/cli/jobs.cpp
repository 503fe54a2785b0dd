// `attnscope jobs RUN...`: a status table of run directories (SPEC 6), read from their files only,
// so it works on runs of other processes, finished or killed.
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/base/error.h"
#include "attnscope/distill/run_dir.h"
#include "attnscope/distill/run_metrics.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {
namespace {

using json = nlohmann::json;

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
    for (const std::string& run : *runs) {
      std::ifstream jf(run + "/job.json");
      if (!jf) fail(run, "is not a run directory (no job.json)");
      json job;
      try {
        job = json::parse(jf);
      } catch (const std::exception& e) {
        fail(run + "/job.json", std::string("is not JSON: ") + e.what());
      }
      const int64_t steps = job.value("steps", int64_t(0));
      // The last value of each layer (a line cut by a kill is skipped by the reader); direct
      // training's lines are the whole model's, layer -1, shown first.
      const RunMetrics metrics = read_run_metrics(run);
      std::map<int, double> loss, val_kl;
      for (const TrainingPoint& p : metrics.training) loss[p.layer] = p.loss;
      for (const ValidationPoint& p : metrics.validation) val_kl[p.layer] = p.val_kl;
      const int64_t step = metrics.last_step();
      const std::string state = run_state(run);
      std::string losses, kls;
      for (const auto& [l, v] : loss) losses += (losses.empty() ? "" : " ") + num(v);
      for (const auto& [l, v] : val_kl) kls += (kls.empty() ? "" : " ") + num(v);
      const std::string map = job.contains("feature_map") ? job["feature_map"].value("name", "?") : "?";
      t.add_row({run, map, std::to_string(step) + "/" + std::to_string(steps), state, losses, kls});
    }
    std::cout << to_markdown(t);
  });
}

}  // namespace attnscope::cli

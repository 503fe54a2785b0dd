// `attnscope jobs RUN...`: a status table of run directories (SPEC 6), read from their files only,
// so it works on runs of other processes, finished or killed.
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "attnscope/error.h"
#include "attnscope/run_dir.h"
#include "attnscope/table.h"
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
      std::map<int, double> loss, val_kl;
      int64_t step = 0;
      std::ifstream mf(run + "/metrics.jsonl");
      std::string line;
      while (std::getline(mf, line)) {
        const json m = json::parse(line, nullptr, false);
        if (m.is_discarded() || !m.contains("step")) continue;  // a line cut by a kill
        // Direct training's lines are the whole model's (no "layer"): shown first, as layer -1.
        const int layer = m.contains("layer") ? m["layer"].get<int>() : -1;
        if (m.contains("loss")) {
          loss[layer] = m["loss"].get<double>();
          step = std::max(step, m["step"].get<int64_t>());
        }
        if (m.contains("val_kl")) val_kl[layer] = m["val_kl"].get<double>();
      }
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

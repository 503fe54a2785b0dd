// `attnscope bench attention`: causal linear attention through kernels/ against the forms it
// replaces (the previous chunked LibTorch expression, the cumsum form) and against softmax
// attention, time and peak memory per length (core: attention_bench.h). A Markdown table, or --json.
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/bench/attention_bench.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {

void register_attention_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("attention", "Causal linear attention kernel against the chunked LibTorch form, the "
                                                 "cumsum form and softmax attention: ms and peak MB per length");
  auto o = std::make_shared<AttentionBenchOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, attention_bench_option_table(), o);
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([=] {
    const auto rows = bench_attention(*o, terminal_progress("bench attention"));
    if (fmt->format == OutputFormat::Json) {
      nlohmann::json out = {{"benchmark", "attention"}, {"batch", o->batch},      {"heads", o->heads},
                            {"head_dim", o->head_dim},  {"features", o->features}, {"dtype", o->dtype},
                            {"device", o->device},      {"backward", o->backward}, {"rows", nlohmann::json::array()}};
      for (const auto& r : rows) {
        nlohmann::json row = {{"length", r.length}};
        for (const auto& f : r.forms)
          row[attention_form_name(f.form)] =
              f.ran ? nlohmann::json{{"ms", f.ms}, {"peak_bytes", f.peak_bytes}, {"max_rel_diff", f.max_rel_diff}}
                    : nlohmann::json(nullptr);
        out["rows"].push_back(row);
      }
      std::cout << out.dump(2) << "\n";
      return;
    }
    Table t;
    t.caption = std::string("Causal attention ") + (o->backward ? "forward + backward" : "forward") + ", B " +
                std::to_string(o->batch) + " H " + std::to_string(o->heads) + " d " + std::to_string(o->head_dim) +
                " M " + std::to_string(o->features) + ", " + o->dtype + ", device " + o->device +
                " (ms: best of " + std::to_string(o->repeats) + "; MB: extra tensor memory at the peak)";
    t.header = {"L"};
    for (const auto& f : rows.front().forms) {
      t.header.push_back(std::string(attention_form_name(f.form)) + " ms");
      t.header.push_back(std::string(attention_form_name(f.form)) + " MB");
    }
    t.header.push_back("kernel speedup vs chunked-aten");
    t.header.push_back("vs cumsum");
    t.header.push_back("vs softmax");
    for (const auto& r : rows) {
      std::vector<std::string> cells{std::to_string(r.length)};
      for (const auto& f : r.forms) {
        cells.push_back(f.ran ? fmt_number(f.ms, 3) : "skipped");
        cells.push_back(f.ran ? fmt_number(double(f.peak_bytes) / 1e6, 1) : "");
      }
      for (size_t i = 1; i < r.forms.size(); ++i)
        cells.push_back(r.forms[i].ran ? fmt_number(r.forms[i].ms / r.forms[0].ms, 2) + "x" : "");
      t.add_row(cells);
    }
    std::cout << to_markdown(t);
  });
}

}  // namespace attnscope::cli

// `attnscope compare`: fix, dof and dof-clip end to end at one budget (capture -> spectra ->
// allocation -> distillation -> conversion -> evaluation on held-out text), tables in the shape of
// paper 000's Tables 3-5 and 7 (core: compare.h).
#include <cmath>
#include <iostream>

#include "attnscope/pipeline/compare.h"
#include "attnscope/distill/distill.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {

void register_compare(CLI::App& app) {
  auto* cmd = app.add_subcommand("compare", "Run fix, dof and dof-clip end to end at one budget and write paper-style "
                                            "tables (Markdown, LaTeX, CSV, JSON)");
  auto o = std::make_shared<CompareOptions>();
  auto output = std::make_shared<OutputOptions>();
  add_option_table(cmd, compare_option_table(), o);
  require(cmd, "--text");
  require(cmd, "--budget");
  add_out_option(cmd, output, "output directory (written whole or not at all)", true);
  cmd->callback([=] {
    const std::string* out = &output->out;
    if (o->model.empty()) o->model = default_model();
    o->python_module = resources_dir() + "/python/attnscope_linear.py";
    const Comparison c = compare(*o, *out, terminal_progress("compare"));
    Table t;
    t.header = {"strategy", "dims", "held-out loss", "perplexity", "attention KL", "train ms/sample"};
    for (const auto& s : c.strategies) {
      std::string dims;
      for (int64_t d : s.dims) dims += (dims.empty() ? "" : " ") + std::to_string(d);
      t.add_row({s.strategy, dims, fmt_number(s.eval.converted_loss, 4), fmt_number(std::exp(s.eval.converted_loss), 2),
                 fmt_number(s.mean_attention_kl(), 4), fmt_number(s.train_ms_per_sample, 1)});
    }
    std::cout << "original held-out loss " << fmt_number(c.strategies.front().eval.original_loss, 4) << "\n"
              << to_markdown(t) << "tables in " << *out << "\n";
  });
}

}  // namespace attnscope::cli

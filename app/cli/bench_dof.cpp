// `attnscope bench dof`: per head of one layer of a capture, the time of LAPACK dsyevd (eigenvalues
// only), LibTorch's eigvalsh and the certified fast path on the same Gram, the fast path's bounds,
// and every head of the layer batched on --device (core: dof_bench.h). A Markdown table, or --json.
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/bench/dof_bench.h"
#include "attnscope/base/table.h"
#include "common.h"

namespace attnscope::cli {

void register_dof_bench(CLI::App* bench) {
  auto* cmd = bench->add_subcommand("dof", "DoF spectra of one layer, per head: dsyevd, eigvalsh, the certified fast "
                                           "path with its bounds, and the layer batched on a device");
  auto o = std::make_shared<DofBenchOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  o->settings.samples = 4096;  // bench dof's default J (the fast path's regime)
  add_option_table(cmd, dof_bench_option_table(), o);
  require(cmd, "--capture");
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([=] {
    const std::string normalize = dof_normalize_name(o->settings.normalize);
    const DofBenchResult r = bench_dof(*o, terminal_progress("bench dof"));
    double dsyevd = 0, fast = 0;
    int fallbacks = 0;
    for (const auto& h : r.heads) dsyevd += h.dsyevd_ms, fast += h.fast_ms, fallbacks += h.fallback;
    if (fmt->format == OutputFormat::Json) {
      nlohmann::json out = {{"benchmark", "dof"},        {"capture", o->capture_dir},
                            {"layer", o->layer},         {"samples", o->settings.samples},
                            {"lambda", o->settings.lambda}, {"tolerance", o->settings.tolerance},
                            {"top_k", o->settings.top_k}, {"block", o->settings.block},
                            {"normalize", normalize},   {"cpu_threads", r.cpu_threads},
                            {"device", r.device},        {"batched_ms", r.batched_ms},
                            {"dsyevd_ms_total", dsyevd}, {"fast_ms_total", fast},
                            {"fallback_heads", fallbacks}, {"heads", nlohmann::json::array()}};
      for (const auto& h : r.heads)
        out["heads"].push_back({{"head", h.head}, {"samples", h.samples}, {"gram_ms", h.gram_ms},
                                {"dsyevd_ms", h.dsyevd_ms}, {"eigvalsh_ms", h.eigvalsh_ms}, {"fast_ms", h.fast_ms},
                                {"dof", h.dof}, {"lower", h.fast.lower}, {"upper", h.fast.upper},
                                {"relative_width", (h.fast.upper - h.fast.lower) / h.fast.value},
                                {"ritz_values", h.ritz_values}, {"fallback", h.fallback}});
      std::cout << out.dump(2) << "\n";
      return;
    }
    Table t;
    t.caption = "DoF spectra, layer " + std::to_string(o->layer) + " of " + o->capture_dir + ", J = " +
                std::to_string(o->settings.samples) + ", lambda " + fmt_lambda(o->settings.lambda) + ", tolerance " +
                fmt_number(100 * o->settings.tolerance, 2) + "%, " + fmt_number(r.cpu_threads, 0) + " CPU thread(s)";
    t.header = {"head", "J", "Gram ms", "dsyevd ms", "eigvalsh ms", "fast ms", "speedup", "DoF", "lower", "upper",
                "width %", "Ritz values"};
    for (const auto& h : r.heads)
      t.add_row({std::to_string(h.head), std::to_string(h.samples), fmt_number(h.gram_ms, 1), fmt_number(h.dsyevd_ms, 1),
                 h.eigvalsh_ms > 0 ? fmt_number(h.eigvalsh_ms, 1) : "-", fmt_number(h.fast_ms, 1),
                 fmt_number(h.dsyevd_ms / h.fast_ms, 1), fmt_number(h.dof, 3), fmt_number(h.fast.lower, 3),
                 fmt_number(h.fast.upper, 3), fmt_number(100 * (h.fast.upper - h.fast.lower) / h.fast.value, 3),
                 h.fallback ? "fallback" : std::to_string(h.ritz_values)});
    std::cout << to_markdown(t);
    std::cout << "\nall " << r.heads.size() << " heads: dsyevd " << fmt_number(dsyevd, 0) << " ms, fast path "
              << fmt_number(fast, 0) << " ms (" << fmt_number(dsyevd / fast, 1) << "x, " << fallbacks
              << " fallback(s)); batched on " << r.device << " (J and J/2 spectra, sampling included): "
              << fmt_number(r.batched_ms, 0) << " ms\n";
  });
}

}  // namespace attnscope::cli

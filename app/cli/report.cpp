// `attnscope report`: the whole analysis of a model in one directory a researcher can read or
// paste from: capture, DoF spectra, Algorithm 1 for every strategy (Table 1), the head DoF grid
// (Table 2), every head metric, and the maps of the most and least complex heads.
//
//   DIR/index.md                      what is where, with the two tables inline
//   DIR/capture/                      the capture store (attnscope capture)
//   DIR/spectra.safetensors           kept eigenvalues: `dof --spectra` / `allocate --spectra` reuse them
//   DIR/dof.json                      the `dof --json` document
//   DIR/table1_allocation.{md,tex,csv}, DIR/allocation.json
//   DIR/table2_dof.{md,tex,csv}, DIR/per_head_dims.{md,tex,csv}
//   DIR/metrics.{json,csv,md}
//   DIR/figures/*.png                 DoF per head, layer DoF against lambda, entropy against DoF
//   DIR/maps/{most,least}_complex_*   softmax / linear / difference maps (CSV + PNG)
//
// Everything is written under DIR.partial and renamed at the end: a failed report leaves no
// half-written directory, and an existing DIR is replaced only by a complete one.
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "attnscope/allocation.h"
#include "attnscope/allocation_tables.h"
#include "attnscope/capture.h"
#include "attnscope/dof.h"
#include "attnscope/error.h"
#include "attnscope/head_analysis.h"
#include "attnscope/table.h"
#include "attnscope/text_file.h"
#include "common.h"
#ifdef ATTNSCOPE_HAVE_GUI
#include "figure_export.h"
#endif

namespace fs = std::filesystem;

namespace attnscope::cli {

namespace {

struct ReportArgs {
  ModelArgs model;
  std::vector<std::string> texts;
  CaptureOptions capture;
  DofArgs dof;
  AnalysisArgs analysis;
  int64_t budget = 64;
  int64_t multiple = 1;
  std::string out;
};

// The three renderings of a table side by side: NAME.md, NAME.tex, NAME.csv.
void write_table(const fs::path& dir, const std::string& name, const Table& t) {
  write_text_file((dir / (name + ".md")).string(), to_markdown(t));
  write_text_file((dir / (name + ".tex")).string(), to_latex(t));
  write_text_file((dir / (name + ".csv")).string(), to_csv(t));
}

std::vector<std::string> default_texts() {
  std::vector<std::string> files;
  const fs::path dir = fs::path(resources_dir()) / "texts";
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".txt") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  if (files.empty()) fail(dir.string(), "no sample texts (*.txt) here; pass --text FILE");
  return files;
}

#ifdef ATTNSCOPE_HAVE_GUI
// Figures only exist in the Qt build; the tables carry the same numbers without it.
std::vector<std::string> write_figures(const fs::path& dir, const DofSpectra& sp, double lambda,
                                       const std::vector<HeadAnalysis>& heads) {
  std::vector<std::string> written;
  const auto hd = head_dofs(sp, lambda);

  views::LineFigure bars;
  bars.title = "DoF of every head (lambda = " + fmt_lambda(lambda) + ")";
  bars.x_label = "head (layer-major: layer * heads + head)";
  bars.y_label = "DoF";
  bars.bars = true;
  views::Series b{"DoF", {}, {}};
  for (int s = 0; s < sp.num_layers; ++s)
    for (int h = 0; h < sp.num_heads; ++h) {
      b.x.push_back(double(b.x.size()));
      b.y.push_back(hd[s][h].value);
    }
  bars.series = {b};
  views::save_line_figure(bars, (dir / "dof_heads.png").string());
  written.push_back("figures/dof_heads.png");

  views::LineFigure curve;
  curve.title = "Layer DoF (max over heads) against lambda";
  curve.x_label = "lambda";
  curve.y_label = "DoF";
  curve.log_x = true;
  std::vector<double> lambdas;
  for (int e = -16; e <= 0; ++e) lambdas.push_back(std::ldexp(1.0, e));
  for (int s = 0; s < sp.num_layers; ++s) curve.series.push_back({"layer " + std::to_string(s), lambdas, {}});
  for (double l : lambdas) {
    const auto layers = layer_dofs(sp, l);
    for (int s = 0; s < sp.num_layers; ++s) curve.series[s].y.push_back(layers[s].value);
  }
  views::save_line_figure(curve, (dir / "dof_vs_lambda.png").string());
  written.push_back("figures/dof_vs_lambda.png");

  views::LineFigure ent;
  ent.title = "Softmax entropy against DoF, one point per head";
  ent.x_label = "DoF";
  ent.y_label = "mean row entropy (nats)";
  ent.points = true;
  views::Series e{"heads", {}, {}};
  for (const HeadAnalysis& a : heads) {
    e.x.push_back(hd[a.layer][a.head].value);
    e.y.push_back(a.softmax.entropy);
  }
  ent.series = {e};
  views::save_line_figure(ent, (dir / "entropy_vs_dof.png").string());
  written.push_back("figures/entropy_vs_dof.png");
  return written;
}
#endif

std::string link_list(const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += "- [" + f + "](" + f + ")\n";
  return s;
}

void run_report(ReportArgs& a) {
  const double lambda = parse_lambda(a.dof.lambda);
  a.dof.settings.normalize = parse_dof_normalize(a.dof.normalize);
  check_feature_map(a.analysis.opt.feature_map, a.analysis.opt.features);
  if (a.budget < 1) fail("--budget", "must be at least 1");
  const fs::path final_dir = fs::absolute(a.out);
  if (!fs::is_directory(final_dir.parent_path())) fail(a.out, "the parent directory does not exist");
  if (fs::exists(final_dir) && !fs::is_directory(final_dir)) fail(a.out, "exists and is not a directory");
  const fs::path dir = final_dir.string() + ".partial";
  fs::remove_all(dir);
  fs::create_directories(dir / "figures");
  fs::create_directories(dir / "maps");

  try {
    // 1. Capture.
    const auto texts = a.texts.empty() ? default_texts() : a.texts;
    const auto docs = read_text_documents(texts);
    LoadedModel m = a.model.load();
    const auto& cfg = m.model->config();
    a.capture.seq_len = std::min(a.capture.seq_len, cfg.n_ctx);
    std::cerr << "report: capturing " << a.capture.num_seqs << " x " << a.capture.seq_len << " tokens of "
              << texts.size() << " text(s)\n";
    capture_to_dir(m, docs, a.capture, (dir / "capture").string(), terminal_progress("capture"));
    const CaptureStore store((dir / "capture").string());
    const std::string model_name = fs::path(m.path).filename().string();

    // 2. DoF spectra (kept, so later lambdas are free).
    std::cerr << "report: DoF spectra of " << store.num_layers() * store.num_heads() << " heads\n";
    DofSpectra sp = a.dof.compute(store.dir());
    sp.model = model_name;
    save_spectra((dir / "spectra.safetensors").string(), sp);
    write_text_file((dir / "dof.json").string(), dof_to_json(sp, lambda).dump(2) + "\n");
    const auto hd = head_dofs(sp, lambda);
    std::vector<std::vector<double>> hv(hd.size());
    for (size_t s = 0; s < hd.size(); ++s)
      for (const auto& v : hd[s]) hv[s].push_back(v.value);

    // 3. Algorithm 1 for every strategy: Table 1, and Table 2 (the DoF grid).
    std::vector<Allocation> allocs;
    nlohmann::ordered_json aj;
    aj["lambda"] = lambda;
    aj["budget"] = a.budget;
    aj["multiple_of"] = a.multiple;
    std::vector<double> ld;
    for (const auto& v : layer_dofs(sp, lambda)) ld.push_back(v.value);
    aj["layer_dof"] = ld;
    aj["strategies"] = nlohmann::ordered_json::object();
    for (AllocStrategy st : {AllocStrategy::Fix, AllocStrategy::Dof, AllocStrategy::DofClip, AllocStrategy::PerHead}) {
      AllocOptions o;
      o.strategy = st;
      o.budget = a.budget;
      o.head_dim = sp.head_dim;
      o.multiple = a.multiple;
      allocs.push_back(allocate(hv, o));
      const Allocation& al = allocs.back();
      aj["strategies"][alloc_strategy_name(st)] = {
          {"dims", st == AllocStrategy::PerHead ? nlohmann::ordered_json(al.dims) : nlohmann::ordered_json(al.layer_dims())},
          {"mean_cost", al.mean_cost}};
    }
    write_text_file((dir / "allocation.json").string(), aj.dump(2) + "\n");
    const Table t1 = allocation_table(model_name, allocs);
    const Table t2 = dof_grid_table(hd, lambda);
    const Table t3 = head_dims_table(allocs.back());
    write_table(dir, "table1_allocation", t1);
    write_table(dir, "table2_dof", t2);
    write_table(dir, "per_head_dims", t3);

    // 4. Head metrics.
    std::cerr << "report: head metrics\n";
    const auto heads = analyze_capture(store, a.analysis.opt, terminal_progress("metrics"));
    nlohmann::ordered_json mj;
    mj["capture"] = "capture";
    if (!a.analysis.opt.feature_map.empty())
      mj["feature_map"] = {{"name", a.analysis.opt.feature_map}, {"features", a.analysis.opt.features}};
    mj["heads"] = analysis_json(heads);
    write_text_file((dir / "metrics.json").string(), mj.dump(2) + "\n");
    write_table(dir, "metrics", analysis_table(heads));

    // 5. Maps of the most and the least complex head (by DoF at lambda), first window.
    int best_s = 0, best_h = 0, worst_s = 0, worst_h = 0;
    for (int s = 0; s < sp.num_layers; ++s)
      for (int h = 0; h < sp.num_heads; ++h) {
        if (hd[s][h].value > hd[best_s][best_h].value) best_s = s, best_h = h;
        if (hd[s][h].value < hd[worst_s][worst_h].value) worst_s = s, worst_h = h;
      }
    std::vector<std::string> map_files;
    auto maps = [&](const std::string& tag, int s, int h) {
      const std::string prefix = tag + "_layer" + std::to_string(s) + "_head" + std::to_string(h);
      for (const auto& f : write_head_maps(store, s, h, 0, a.analysis.opt, (dir / "maps" / prefix).string()))
        map_files.push_back("maps/" + fs::path(f).filename().string());
    };
    maps("most_complex", best_s, best_h);
    maps("least_complex", worst_s, worst_h);

    std::vector<std::string> figures;
#ifdef ATTNSCOPE_HAVE_GUI
    figures = write_figures(dir / "figures", sp, lambda, heads);
#endif

    // 6. index.md
    std::string idx;
    idx += "# attnscope report: " + model_name + "\n\n";
    idx += "- model: `" + m.path + "` (" + std::to_string(cfg.n_layer) + " layers, " + std::to_string(cfg.n_head) +
           " heads, head dim " + std::to_string(store.head_dim()) + ")\n";
    idx += "- capture: [capture/](capture/manifest.json), " + std::to_string(store.num_seqs()) + " windows x " +
           std::to_string(store.seq_len()) + " tokens, seed " + std::to_string(a.capture.seed) + "\n";
    idx += "- DoF: lambda = " + fmt_lambda(lambda) + ", J = " + std::to_string(a.dof.settings.samples) +
           " samples per head, normalize " + dof_normalize_name(sp.settings.normalize) +
           "; spectra in [spectra.safetensors](spectra.safetensors) (`attnscope dof --spectra` re-evaluates any lambda)\n";
    idx += "- budget C = " + std::to_string(a.budget) + (a.multiple > 1 ? ", multiples of " + std::to_string(a.multiple) : "") + "\n";
    if (!a.analysis.opt.feature_map.empty())
      idx += "- linear maps: feature map `" + a.analysis.opt.feature_map + "`, M = " + std::to_string(a.analysis.opt.features) + "\n";
    idx += "\n## Table 1: feature dimension per layer\n\n" + to_markdown(t1) + "\n";
    idx += "Also as [LaTeX](table1_allocation.tex), [CSV](table1_allocation.csv), [JSON](allocation.json).\n";
    idx += "\n## Table 2: DoF of every head\n\n" + to_markdown(t2) + "\n";
    idx += "Also as [LaTeX](table2_dof.tex), [CSV](table2_dof.csv), [JSON](dof.json); per-head dimensions: [per_head_dims.md](per_head_dims.md).\n";
    idx += "\n## Head metrics\n\nEntropy, monotonicity, linear-map errors";
    idx += a.analysis.opt.mixer_state > 0 ? " and structured-mixer distances" : "";
    idx += " of every head: [metrics.md](metrics.md), [CSV](metrics.csv), [JSON](metrics.json).\n";
    idx += "\n## Maps\n\nMost complex head: layer " + std::to_string(best_s) + " head " + std::to_string(best_h) +
           " (DoF " + fmt_number(hd[best_s][best_h].value, 2) + "); least complex: layer " + std::to_string(worst_s) +
           " head " + std::to_string(worst_h) + " (DoF " + fmt_number(hd[worst_s][worst_h].value, 2) + ").\n\n";
    idx += link_list(map_files);
    for (const auto& f : map_files)
      if (fs::path(f).extension() == ".png") idx += "\n![" + f + "](" + f + ")\n";
    if (!figures.empty()) {
      idx += "\n## Figures\n\n";
      for (const auto& f : figures) idx += "![" + f + "](" + f + ")\n\n";
    } else {
      idx += "\n(Figures need the Qt build, ATTNSCOPE_GUI=ON; the tables hold the same numbers.)\n";
    }
    write_text_file((dir / "index.md").string(), idx);
  } catch (...) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    throw;
  }
  // Replace an earlier report only now that this one is complete.
  if (fs::exists(final_dir)) fs::remove_all(final_dir);
  fs::rename(dir, final_dir);
  std::cout << "report written to " << final_dir.string() << "/index.md\n";
}

}  // namespace

void register_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report", "Capture, DoF, allocation for every strategy, metrics and maps, as tables and figures");
  auto a = std::make_shared<ReportArgs>();
  a->analysis.opt.feature_map = "prf";
  a->analysis.opt.features = 64;
  a->analysis.opt.mixer_state = 16;
  a->model.add_to(cmd);
  cmd->add_option("-t,--text", a->texts, "sample text files (default: resources/texts/*.txt)");
  cmd->add_option("-L,--seq-len", a->capture.seq_len, "tokens per window (capped at the context length)")
      ->capture_default_str()->check(CLI::Range(2, 1 << 20));
  cmd->add_option("-T,--num-seqs", a->capture.num_seqs, "windows to capture")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--capture-seed", a->capture.seed, "seed for drawing the windows")->capture_default_str();
  a->dof.add_to(cmd);
  cmd->add_option("-C,--budget", a->budget, "feature budget C (mean feature dimension)")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--multiple-of", a->multiple, "round every dimension to a multiple of this")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--feature-map", a->analysis.opt.feature_map, "feature map of the linear maps (\"\" = softmax only)")->capture_default_str();
  cmd->add_option("-M,--features", a->analysis.opt.features, "its feature dimension M")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-seqs", a->analysis.opt.max_seqs, "metrics on the first N windows (0 = all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--mixer-state", a->analysis.opt.mixer_state, "state size N of the structured mixers (0 = skip)")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("-o,--out", a->out, "report directory (replaced only by a complete report)")->required();
  cmd->callback([a] { run_report(*a); });
}

}  // namespace attnscope::cli

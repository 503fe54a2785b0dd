// The report pipeline: capture -> DoF spectra -> allocation (Tables 1, 2) -> head metrics -> maps
// and figures -> index.md, each stage handing its result to the next.
#include "attnscope/pipeline/report.h"

#include "attnscope/model/compute_dtype.h"

#include "attnscope/allocation/allocation_file.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/analysis/dof_json.h"
#include "attnscope/base/error.h"
#include "attnscope/analysis/head_analysis_table.h"
#include "attnscope/analysis/map_export.h"
#include "attnscope/model/model.h"
#include "attnscope/base/output_dir.h"
#include "attnscope/base/text_file.h"
#include "attnscope/io/text_source.h"

namespace fs = std::filesystem;

namespace attnscope {
namespace {

// The three renderings of a table side by side: NAME.md, NAME.tex, NAME.csv.
void write_table(const OutputDir& dir, const std::string& name, const Table& t) {
  write_text_file(dir.file(name + ".md"), to_markdown(t));
  write_text_file(dir.file(name + ".tex"), to_latex(t));
  write_text_file(dir.file(name + ".csv"), to_csv(t));
}

void check_options(const ReportOptions& o) {
  if (o.texts.empty()) fail_value("text", "is missing: give at least one text file");
  if (o.budget < 1) fail_value("budget", "must be at least 1, got " + std::to_string(o.budget));
  if (o.multiple < 1) fail_value("multiple", "must be at least 1, got " + std::to_string(o.multiple));
  if (!(o.lambda > 0) || !std::isfinite(o.lambda)) fail_value("lambda", "must be positive and finite");
}

// Algorithm 1 for every strategy at lambda, in alloc_strategy_names() order.
std::vector<DofAllocation> allocate_every_strategy(const DofSpectra& spectra, double lambda, int64_t budget,
                                                   int64_t multiple) {
  std::vector<DofAllocation> out;
  for (const std::string& name : alloc_strategy_names()) {
    AllocOptions o;
    o.strategy = parse_alloc_strategy(name);
    o.budget = budget;
    o.multiple = multiple;
    out.push_back(allocation_at(spectra, lambda, o));
  }
  return out;
}

// allocation.json: every strategy's allocation file (allocation_file.h) under its name; each is also
// allocation/STRATEGY.json, which `distill --allocation` and `convert --allocation` read.
nlohmann::ordered_json allocation_json(const std::vector<DofAllocation>& allocs, double lambda, int64_t budget,
                                       int64_t multiple) {
  nlohmann::ordered_json j;
  j["lambda"] = lambda;
  j["budget"] = budget;
  j["multiple_of"] = multiple;
  j["layer_dof"] = allocs.front().allocation.layer_dof;  // N_s, the same for every strategy
  j["strategies"] = nlohmann::ordered_json::object();
  for (const DofAllocation& a : allocs) j["strategies"][alloc_strategy_name(a.allocation.strategy)] = allocation_file_json(a);
  return j;
}

// The three report figures: DoF per head, layer DoF against lambda, entropy against DoF.
std::vector<std::string> write_figures(const OutputDir& dir, const FigureWriter& fw, const DofSpectra& sp, double lambda,
                                       const std::vector<std::vector<DofValue>>& hd, const std::vector<HeadAnalysis>& heads) {

  LineFigure bars;
  bars.title = "DoF of every head (lambda = " + fmt_lambda(lambda) + ")";
  bars.x_label = "head (layer-major: layer * heads + head)";
  bars.y_label = "DoF";
  bars.bars = true;
  Series b{"DoF", {}, {}};
  for (int s = 0; s < sp.num_layers; ++s)
    for (int h = 0; h < sp.num_heads; ++h) {
      b.x.push_back(double(b.x.size()));
      b.y.push_back(hd[s][h].value);
    }
  bars.series = {b};
  fw.line(bars, dir.file("figures/dof_heads.png"));

  LineFigure curve;
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
  fw.line(curve, dir.file("figures/dof_vs_lambda.png"));

  LineFigure ent;
  ent.title = "Softmax entropy against DoF, one point per head";
  ent.x_label = "DoF";
  ent.y_label = "mean row entropy (nats)";
  ent.points = true;
  Series e{"heads", {}, {}};
  for (const HeadAnalysis& a : heads) {
    e.x.push_back(hd[a.layer][a.head].value);
    e.y.push_back(a.softmax.entropy);
  }
  ent.series = {e};
  fw.line(ent, dir.file("figures/entropy_vs_dof.png"));
  return {"figures/dof_heads.png", "figures/dof_vs_lambda.png", "figures/entropy_vs_dof.png"};
}

std::string link_list(const std::vector<std::string>& files) {
  std::string s;
  for (const auto& f : files) s += "- [" + f + "](" + f + ")\n";
  return s;
}

}  // namespace

AnalysisOptions ReportOptions::default_report_analysis() {
  AnalysisOptions a;
  a.feature_map = "prf";
  a.features = 64;
  a.mixer_state = 16;
  return a;
}

ReportResult write_report(const ReportOptions& o, const std::string& out_dir, const FigureWriter* figures,
                          const ProgressFn& progress) {
  check_options(o);
  OutputDir dir(out_dir);
  fs::create_directories(fs::path(dir.path()) / "figures");
  fs::create_directories(fs::path(dir.path()) / "maps");
  fs::create_directories(fs::path(dir.path()) / "allocation");
  ReportResult r;

  // 1. Capture.
  const auto docs = read_text_documents(o.texts);
  LoadedModel m = load_model(o.model, o.tokenizer, compute_dtype_of(o.compute, Device::Cpu));
  const ModelConfig& cfg = m.model->config();
  CaptureOptions co = o.capture;
  co.seq_len = std::min(co.seq_len, cfg.n_ctx);
  report_progress(progress, 0.0, "capturing " + std::to_string(co.num_seqs) + " x " + std::to_string(co.seq_len) + " tokens");
  const CaptureStore store = capture_to_dir(m, docs, co, dir.file("capture"), sub_progress(progress, 0.0, 0.3));
  r.model_name = fs::path(m.path).filename().string();

  // 2. DoF spectra (kept, so later lambdas are free).
  r.spectra = compute_spectra(store, o.dof, sub_progress(progress, 0.3, 0.6));
  r.spectra.model = r.model_name;
  r.spectra.capture_dir = "capture";  // relative: the report directory moves into place at the end
  save_spectra(dir.file("spectra.safetensors"), r.spectra);
  write_text_file(dir.file("dof.json"), dof_to_json(r.spectra, o.lambda).dump(2) + "\n");

  // 3. Algorithm 1 for every strategy: Table 1, and Table 2 (the DoF grid).
  const std::vector<DofAllocation> every = allocate_every_strategy(r.spectra, o.lambda, o.budget, o.multiple);
  const auto& hd = every.front().head_dof;
  for (const DofAllocation& a : every) {
    r.allocations.push_back(a.allocation);
    write_allocation_file(dir.file(std::string("allocation/") + alloc_strategy_name(a.allocation.strategy) + ".json"), a);
  }
  write_text_file(dir.file("allocation.json"), allocation_json(every, o.lambda, o.budget, o.multiple).dump(2) + "\n");
  r.table1 = allocation_table(r.model_name, r.allocations, every.front().convergence);
  const auto& convergence = every.front().convergence;
  r.table2 = dof_grid_table(hd, o.lambda, convergence);
  write_table(dir, "table1_allocation", r.table1);
  write_table(dir, "table2_dof", r.table2);
  write_table(dir, "per_head_dims", head_dims_table(r.allocations.back()));

  // 4. Head metrics.
  r.heads = analyze_capture(store, o.analysis, sub_progress(progress, 0.6, 0.95));
  nlohmann::ordered_json mj;
  mj["capture"] = "capture";
  if (!o.analysis.feature_map.empty())
  {
    mj["feature_map"] = {{"name", o.analysis.feature_map}, {"features", o.analysis.features}};
    if (o.analysis.window > 0) mj["feature_map"]["window"] = o.analysis.window;  // as `metrics --json`
  }
  mj["heads"] = head_analysis_json(r.heads);
  write_text_file(dir.file("metrics.json"), mj.dump(2) + "\n");
  write_table(dir, "metrics", head_analysis_table(r.heads));

  // 5. Maps of the most and the least complex head (by DoF at lambda), first window.
  report_progress(progress, 0.95, "maps and figures");
  int& bs = r.most_complex_layer, &bh = r.most_complex_head, &ws = r.least_complex_layer, &wh = r.least_complex_head;
  for (int s = 0; s < r.spectra.num_layers; ++s)
    for (int h = 0; h < r.spectra.num_heads; ++h) {
      if (hd[s][h].value > hd[bs][bh].value) bs = s, bh = h;
      if (hd[s][h].value < hd[ws][wh].value) ws = s, wh = h;
    }
  std::vector<std::string> map_files;
  auto maps = [&](const std::string& tag, int s, int h) {
    const std::string prefix = tag + "_layer" + std::to_string(s) + "_head" + std::to_string(h);
    for (const auto& f : write_head_maps(store, s, h, 0, o.analysis, dir.file("maps/" + prefix), figures))
      map_files.push_back("maps/" + fs::path(f).filename().string());
  };
  maps("most_complex", bs, bh);
  maps("least_complex", ws, wh);
  std::vector<std::string> figure_files;
  if (figures) figure_files = write_figures(dir, *figures, r.spectra, o.lambda, hd, r.heads);

  // 6. index.md
  const DofSettings& ds = r.spectra.settings;
  std::string idx;
  idx += "# attnscope report: " + r.model_name + "\n\n";
  idx += "- model: `" + m.path + "` (" + std::to_string(cfg.n_layer) + " layers, " + std::to_string(cfg.n_head) +
         " heads, head dim " + std::to_string(store.head_dim()) + ")\n";
  idx += "- capture: [capture/](capture/manifest.json), " + std::to_string(store.num_seqs()) + " windows x " +
         std::to_string(store.seq_len()) + " tokens, seed " + std::to_string(co.seed) + "\n";
  int64_t j_lo = ds.samples, j_hi = 0;
  for (const HeadSpectrum& h : r.spectra.heads) j_lo = std::min(j_lo, h.samples), j_hi = std::max(j_hi, h.samples);
  idx += "- DoF: lambda = " + fmt_lambda(o.lambda) + ", J = " + std::to_string(ds.samples) + " samples per head" +
         (ds.max_samples > ds.samples ? ", doubled per head while unconverged up to " + std::to_string(ds.max_samples) : std::string()) +
         " (J used: " + (j_lo == j_hi ? std::to_string(j_hi) : std::to_string(j_lo) + " to " + std::to_string(j_hi)) +
         "), normalize " + dof_normalize_name(ds.normalize) +
         "; spectra in [spectra.safetensors](spectra.safetensors) (`attnscope dof --spectra` re-evaluates any lambda)\n";
  idx += "- budget C = " + std::to_string(o.budget) + (o.multiple > 1 ? ", multiples of " + std::to_string(o.multiple) : "") + "\n";
  if (!o.analysis.feature_map.empty())
    idx += "- linear maps: feature map `" + o.analysis.feature_map + "`, M = " + std::to_string(o.analysis.features) + "\n";
  idx += "\n## Table 1: feature dimension per layer\n\n" + to_markdown(r.table1) + "\n";
  idx += "Also as [LaTeX](table1_allocation.tex), [CSV](table1_allocation.csv), [JSON](allocation.json).\n";
  idx += "\n## Table 2: DoF of every head\n\n" + to_markdown(r.table2) + "\n";
  idx += "Also as [LaTeX](table2_dof.tex), [CSV](table2_dof.csv), [JSON](dof.json); per-head dimensions: [per_head_dims.md](per_head_dims.md).\n";
  // Which heads need a larger J: Algorithm 1's dimensions inherit their estimates' drift.
  std::string unconverged;
  for (int s = 0; s < r.spectra.num_layers; ++s)
    for (int h = 0; h < r.spectra.num_heads; ++h) {
      const DofConvergence& c = convergence[s][h];
      if (c.unconverged())
        unconverged += "- layer " + std::to_string(s) + " head " + std::to_string(h) + ": DoF " + fmt_number(c.dof_half, 1) +
                       " at J = " + std::to_string(c.samples_half) + ", " + fmt_number(c.dof, 1) + " at J = " +
                       std::to_string(c.samples) + " (" + fmt_number(100 * c.relative_change, 0) + "%)\n";
    }
  idx += unconverged.empty()
             ? "\nEvery head's DoF moves by at most " + fmt_number(100 * kDofConvergenceTolerance, 0) +
                   "% between J/2 and J samples: the estimates have converged.\n"
             : "\n**These heads need a larger J** (more samples per head than the cap " + std::to_string(ds.max_samples) +
                   " allowed): their DoF moves by more than " + fmt_number(100 * kDofConvergenceTolerance, 0) +
                   "% between J/2 and J samples, so the allocation above (Table 1 says which layers) depends on J.\n\n" +
                   unconverged;
  idx += "\n## Head metrics\n\nEntropy, monotonicity, linear-map errors";
  idx += o.analysis.mixer_state > 0 ? " and structured-mixer distances" : "";
  idx += " of every head: [metrics.md](metrics.md), [CSV](metrics.csv), [JSON](metrics.json).\n";
  idx += "\n## Maps\n\nMost complex head: layer " + std::to_string(bs) + " head " + std::to_string(bh) + " (DoF " +
         fmt_number(hd[bs][bh].value, 2) + "); least complex: layer " + std::to_string(ws) + " head " +
         std::to_string(wh) + " (DoF " + fmt_number(hd[ws][wh].value, 2) + ").\n\n";
  idx += link_list(map_files);
  for (const auto& f : map_files)
    if (fs::path(f).extension() == ".png") idx += "\n![" + f + "](" + f + ")\n";
  if (!figure_files.empty()) {
    idx += "\n## Figures\n\n";
    for (const auto& f : figure_files) idx += "![" + f + "](" + f + ")\n\n";
  } else {
    idx += "\n(Figures need the Qt build, ATTNSCOPE_GUI=ON; the tables hold the same numbers.)\n";
  }
  write_text_file(dir.file("index.md"), idx);

  dir.commit();
  r.dir = dir.final_path();
  report_progress(progress, 1.0, "done");
  return r;
}

}  // namespace attnscope

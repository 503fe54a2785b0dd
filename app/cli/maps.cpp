// `attnscope maps`: one head's softmax map and a linearized map on one window, with their
// difference, as CSV (token labels on both axes) and, in builds with the GUI, PNG heatmaps.
#include <ATen/ATen.h>

#include <filesystem>
#include <iostream>

#include "attnscope/error.h"
#include "attnscope/head_analysis.h"
#include "attnscope/table.h"
#include "attnscope/text_file.h"
#include "common.h"
#ifdef ATTNSCOPE_HAVE_GUI
#include "figure_export.h"
#endif

namespace attnscope::cli {

std::vector<std::string> token_labels(const CaptureStore& store, const std::vector<int64_t>& ids) {
  std::vector<std::string> labels;
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = store.load_tokenizer();
  } catch (const Error&) {
    tok.reset();  // the tokenizer moved: fall back to ids, still a usable figure
  }
  for (int64_t id : ids) {
    std::string s = tok ? tok->piece(id) : "#" + std::to_string(id);
    std::string clean;
    for (char c : s) clean += c == '\n' ? std::string("\\n") : c == '\t' ? std::string("\\t") : std::string(1, c);
    labels.push_back(clean);
  }
  return labels;
}

namespace {

void write_matrix_csv(const std::string& path, const at::Tensor& m, const std::vector<std::string>& labels) {
  Table t;
  t.header = {"query\\key"};
  for (const auto& l : labels) t.header.push_back(l);
  const at::Tensor c = m.to(at::kDouble).contiguous();
  const double* p = c.data_ptr<double>();
  const int64_t rows = c.size(0), cols = c.size(1);
  for (int64_t i = 0; i < rows; ++i) {
    std::vector<std::string> row = {labels[i]};
    for (int64_t j = 0; j < cols; ++j) row.push_back(fmt_number(p[i * cols + j], 8));
    t.add_row(row);
  }
  write_text_file(path, to_csv(t));
}

#ifdef ATTNSCOPE_HAVE_GUI
void save_map_figure(const std::string& path, const std::string& title, const at::Tensor& m,
                     const std::vector<std::string>& labels, bool diverging) {
  views::HeatmapFigure f;
  f.title = title;
  const at::Tensor c = m.to(at::kDouble).contiguous();
  f.matrix.rows = int(c.size(0));
  f.matrix.cols = int(c.size(1));
  f.matrix.values.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  f.labels = labels;
  f.diverging = diverging;
  f.value_label = diverging ? "linear - softmax" : "attention weight";
  views::save_heatmap(f, path);
}
#endif

}  // namespace

std::vector<std::string> write_head_maps(const CaptureStore& store, int layer, int head, int seq,
                                         const AnalysisOptions& opt, const std::string& prefix) {
  const HeadMaps m = head_maps(store, layer, head, seq, opt);
  const auto labels = token_labels(store, m.ids);
  const std::string where = "layer " + std::to_string(layer) + ", head " + std::to_string(head);
  std::vector<std::string> written;
  auto emit = [&](const std::string& what, const at::Tensor& t, const std::string& title, bool diverging) {
    write_matrix_csv(prefix + "_" + what + ".csv", t, labels);
    written.push_back(prefix + "_" + what + ".csv");
#ifdef ATTNSCOPE_HAVE_GUI
    save_map_figure(prefix + "_" + what + ".png", title + " (" + where + ")", t, labels, diverging);
    written.push_back(prefix + "_" + what + ".png");
#else
    (void)title, (void)diverging;
#endif
  };
  emit("softmax", m.softmax, "softmax", false);
  if (m.linear.defined()) {
    emit("linear", m.linear, opt.feature_map + (opt.features > 0 ? " M=" + std::to_string(opt.features) : ""), false);
    emit("diff", m.linear - m.softmax, "difference", true);
  }
  return written;
}

void register_maps(CLI::App& app) {
  auto* cmd = app.add_subcommand("maps", "Softmax and linearized attention maps of one head, as CSV and PNG");
  auto capture = std::make_shared<std::string>();
  auto args = std::make_shared<AnalysisArgs>();
  auto layer = std::make_shared<int>(0), head = std::make_shared<int>(0), seq = std::make_shared<int>(0);
  auto out = std::make_shared<std::string>();
  cmd->add_option("-c,--capture", *capture, "capture directory")->required();
  cmd->add_option("--layer", *layer, "layer (from 0)")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--head", *head, "head (from 0)")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seq", *seq, "window of the capture (from 0)")->capture_default_str()->check(CLI::NonNegativeNumber);
  args->add_to(cmd);
  cmd->add_option("-o,--out", *out, "output prefix: PREFIX_softmax.csv/.png, PREFIX_linear.*, PREFIX_diff.*")->required();
  cmd->callback([=] {
    check_feature_map(args->opt.feature_map, args->opt.features);
    const std::filesystem::path parent = std::filesystem::absolute(*out).parent_path();
    if (!std::filesystem::is_directory(parent)) fail(*out, "the output directory does not exist");
    CaptureStore store(*capture);
    for (const auto& f : write_head_maps(store, *layer, *head, *seq, args->opt, *out)) std::cerr << "wrote " << f << "\n";
#ifndef ATTNSCOPE_HAVE_GUI
    std::cerr << "note: PNG heatmaps need the Qt build (ATTNSCOPE_GUI=ON); CSV written\n";
#endif
  });
}

}  // namespace attnscope::cli

#include "attnscope/analysis/map_export.h"

#include <ATen/ATen.h>

#include "attnscope/capture/capture.h"
#include "attnscope/base/table.h"
#include "attnscope/base/text_file.h"
#include "attnscope/capture/token_labels.h"

namespace attnscope {
namespace {

Matrix to_map_matrix(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kCPU, at::kDouble).contiguous();
  Matrix m;
  m.rows = int(c.size(0));
  m.cols = int(c.size(1));
  m.values.assign(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  return m;
}

}  // namespace

void write_matrix_csv(const std::string& path, const Matrix& m, const std::vector<std::string>& labels) {
  Table t;
  t.header = {"query\\key"};
  for (int j = 0; j < m.cols; ++j) t.header.push_back(j < int(labels.size()) ? labels[j] : std::to_string(j));
  for (int i = 0; i < m.rows; ++i) {
    std::vector<std::string> row = {i < int(labels.size()) ? labels[i] : std::to_string(i)};
    for (int j = 0; j < m.cols; ++j) row.push_back(fmt_number(m.at(i, j), 8));
    t.add_row(row);
  }
  write_text_file(path, to_csv(t));
}

std::vector<std::string> write_head_maps(const CaptureStore& store, int layer, int head, int seq,
                                         const AnalysisOptions& opt, const std::string& prefix,
                                         const FigureWriter* figures) {
  const HeadMaps maps = head_maps(store, layer, head, seq, opt);
  const std::vector<std::string> labels = token_labels(store, maps.ids);
  const std::string where = " (layer " + std::to_string(layer) + ", head " + std::to_string(head) + ")";
  std::vector<std::string> written;
  auto emit = [&](const std::string& what, const at::Tensor& t, const std::string& title, bool diverging) {
    const Matrix m = to_map_matrix(t);
    write_matrix_csv(prefix + "_" + what + ".csv", m, labels);
    written.push_back(prefix + "_" + what + ".csv");
    if (!figures) return;
    HeatmapFigure f;
    f.title = title + where;
    f.matrix = m;
    f.labels = labels;
    f.diverging = diverging;
    f.value_label = diverging ? "linear - softmax" : "attention weight";
    figures->heatmap(f, prefix + "_" + what + ".png");
    written.push_back(prefix + "_" + what + ".png");
  };
  emit("softmax", maps.softmax, "softmax", false);
  if (maps.linear.defined()) {
    const std::string map = opt.feature_map + (opt.features > 0 ? " M=" + std::to_string(opt.features) : "");
    // As the heads view titles it: a hybrid is the map "+ window W".
    emit("linear", maps.linear, opt.window > 0 ? map + " + window " + std::to_string(opt.window) : map, false);
    emit("diff", maps.linear - maps.softmax, "difference", true);
  }
  return written;
}

}  // namespace attnscope

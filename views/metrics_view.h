// The metrics view: layer x head heatmaps (with values) of the softmax entropy and, for the chosen
// feature map, its entropy, monotonicity (Spearman), discordant pairs and KL from softmax (softmax's
// own monotonicity is 1 in every head by construction: no panel); histograms of the per-head
// entropies over common bins, the selected head's monotonicity scatter (q.k against weight, softmax
// and linear, as paper 004's Figures 2-3), and the structured-mixer distances when they were
// computed. Every number comes from core (workbench/view_data.h: metrics_figures).
#pragma once
#include <QString>
#include <QWidget>
#include <vector>

#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "plot_panel.h"

namespace attnscope::views {

class MetricsView : public QWidget {
  Q_OBJECT
 public:
  explicit MetricsView(QWidget* parent = nullptr);
  ~MetricsView() override;

  // analyze_capture()'s result, layer-major; `feature_map` names the linear map in the panels'
  // titles and legends ("" = softmax only), `description` says all of it once above them
  // ("untrained hedgehog + window 64"; "" = the name).
  void set_analysis(const std::vector<HeadAnalysis>& heads, int layers, int heads_per_layer,
                    const QString& feature_map, const QString& description = {});
  void set_scatter(const ScatterPoints& points, int layer, int head);
  // Nothing of an earlier model or capture: every panel empty, saying `note` ("Computing the
  // metrics of stories260K…").
  void clear(const QString& note);
  void select(int layer, int head);  // no signal
  void set_commands(const QString& metrics_command);  // attnscope metrics ... for its figures

  std::vector<PlotPanel*> panels() const;  // every figure, for export and tests

 signals:
  void headSelected(int layer, int head);  // clicked a cell of a heatmap

 private:
  struct Impl;
  Impl* d_;
};

}  // namespace attnscope::views

// The DoF view's panel (c): DoF against lambda for the selected head (core's dof_curve at every
// slider position), its J/2 check and the largest DoF of its layer, with the lambda line and the
// head's DoF where the line meets its curve; the legend in one line under the plot.
#pragma once
#include <optional>

#include "attnscope/analysis/dof.h"
#include "plot_panel.h"

class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;

namespace attnscope::views {

class DofCurvePanel : public PlotPanel {
  Q_OBJECT
 public:
  explicit DofCurvePanel(QWidget* parent = nullptr);
  // The curves of (layer, head) of `spectra` (null: none); `which` names the head in the title.
  void show_head(const DofSpectra* spectra, int layer, int head, const QString& which);
  // The lambda line, and the label with the head's DoF there (none: neither).
  void show_lambda(std::optional<double> lambda, std::optional<double> head_dof);
  void show_note(const QString& text);  // instead of curves ("" hides it)

 private:
  QCPGraph *head_ = nullptr, *half_ = nullptr, *layer_ = nullptr;
  QCPItemStraightLine* line_ = nullptr;
  QCPItemText *text_ = nullptr, *note_ = nullptr;
  bool has_curve_ = false;
};

}  // namespace attnscope::views

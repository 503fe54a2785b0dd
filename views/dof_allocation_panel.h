// The DoF view's panel (d): Table 1 live, the feature dimension of every layer (core's allocation at
// the sliders' budget and strategy) as bars with their values, each head's as dots for per-head,
// the budget line (and the clip line d for dof-clip) named on the right axis, and the mean cost.
#pragma once
#include <QSharedPointer>
#include <vector>

#include "attnscope/allocation/allocation.h"
#include "plot_panel.h"

class QCPAxisTickerText;
class QCPBars;
class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;
class QCPTextElement;

namespace attnscope::views {

class DofAllocationPanel : public PlotPanel {
  Q_OBJECT
 public:
  explicit DofAllocationPanel(QWidget* parent = nullptr);
  // `head_dim`: where dof-clip clips (0: unknown).
  void show_state(const DofAllocation& state, int64_t head_dim);
  void clear(const QString& note);  // no allocation: `note` instead ("" for none)
  std::vector<double> drawn_layer_dims() const;
  // Which bars' value labels are shown (all where they fit; else the tallest that do not overlap).
  std::vector<bool> shown_bar_labels() const;
  QString mean_cost_text() const;
  // "k of n heads kept softmax ..." under a state budget ("" without one), on its own line.
  static QString kept_text(const Allocation& a);
  QString caption() const;  // the text drawn above the bars  // "mean cost 63.5 of budget 64"; "" before show_state
  int fills() const { return fills_; }  // how many times show_state drew (tests count redraws)

 private:
  void ensure_bars(int layers);
  bool fit_bar_labels();  // true when the labels shown changed (the plot's width did)

  DofAllocation state_;
  bool has_state_ = false;
  QCPBars* bars_ = nullptr;
  QCPGraph* head_dots_ = nullptr;
  QCPItemStraightLine *budget_line_ = nullptr, *clip_line_ = nullptr;
  QSharedPointer<QCPAxisTickerText> line_ticks_;  // "budget C" and "d = …" on the right axis
  std::vector<QCPItemText*> bar_texts_;
  QCPItemText* note_ = nullptr;
  QCPTextElement* cost_text_ = nullptr;
  int bars_layers_ = -1;
  int fills_ = 0;
  int labelled_width_ = -1;  // the axis rect's width fit_bar_labels placed the labels for
};

}  // namespace attnscope::views

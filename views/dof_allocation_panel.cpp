#include "dof_allocation_panel.h"

#include <QFontMetricsF>
#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "attnscope/base/table.h"
#include "dof_common.h"

namespace attnscope::views {

using namespace dof;

DofAllocationPanel::DofAllocationPanel(QWidget* parent) : PlotPanel(tr("Feature dimension per layer (Table 1)"), parent) {
  QCustomPlot* p = plot();
  // The labels follow the plot's width (laid out at the first replot, and on every resize).
  connect(p, &QCustomPlot::afterReplot, this, [this] {
    if (fit_bar_labels()) plot()->replot(QCustomPlot::rpQueuedReplot);
  });
  bars_ = new QCPBars(p->xAxis, p->yAxis);
  bars_->setWidth(0.7);
  QColor fill = series_color(0);
  bars_->setPen(QPen(fill.darker(130), 1));
  bars_->setBrush(fill);
  bars_->setName(tr("M per layer"));
  head_dots_ = p->addGraph();
  head_dots_->setLineStyle(QCPGraph::lsNone);
  head_dots_->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(Qt::black, 1), series_color(1), 6));
  head_dots_->setName(tr("per-head M"));
  p->xAxis->setLabel(tr("layer"));
  p->yAxis->setLabel(tr("feature dimension M"));
  p->xAxis->grid()->setVisible(false);
  p->xAxis->setSubTicks(false);
  budget_line_ = new QCPItemStraightLine(p);
  budget_line_->setPen(QPen(accent(), 2, Qt::DashLine));
  clip_line_ = new QCPItemStraightLine(p);
  clip_line_->setPen(QPen(series_color(7), 1.5, Qt::DotLine));
  // The two lines are named on the right axis, outside the plot: a label inside would sit on a
  // bar's value wherever a layer's dimension is near the budget (the usual case).
  line_ticks_.reset(new QCPAxisTickerText);
  p->yAxis2->setVisible(true);
  p->yAxis2->setTicker(line_ticks_);
  p->yAxis2->setSubTicks(false);
  p->yAxis2->grid()->setVisible(false);
  p->yAxis2->setTickLength(0, 4);
  connect(p->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), p->yAxis2, qOverload<const QCPRange&>(&QCPAxis::setRange));
  cost_text_ = new QCPTextElement(p, QString());
  QFont cf = cost_text_->font();
  cf.setPointSizeF(9.5);
  cf.setBold(true);
  cost_text_->setFont(cf);
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, cost_text_);
  note_ = plot_note(p);
  p->legend->setVisible(false);
  restyle();
  set_csv([this]() -> std::string {
    // As `attnscope allocate --csv` prints it: one row per head.
    Table t;
    t.header = {"layer", "head", "dof", "dim"};
    if (!has_state_) return to_csv(t);
    const auto& a = state_.allocation;
    for (size_t s = 0; s < a.dims.size(); ++s)
      for (size_t h = 0; h < a.dims[s].size(); ++h)
        t.add_row({std::to_string(s), std::to_string(h),
                   s < state_.head_dof.size() && h < state_.head_dof[s].size() ? fmt_number(state_.head_dof[s][h].value, 6) : "",
                   std::to_string(a.dims[s][h])});
    return to_csv(t);
  });
  clear({});
}

// The bars' value labels where they fit: all of them on wide bars; on narrow ones (32 layers in a
// quarter of the window) the tallest bars first, each label only where it overlaps none already
// placed, so the labels never print over each other.
bool DofAllocationPanel::fit_bar_labels() {
  QCustomPlot* p = plot();
  const int width = p->axisRect()->width();
  if (bar_texts_.empty() || width == labelled_width_) return false;
  labelled_width_ = width;
  std::vector<size_t> order(bar_texts_.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  auto value = [this](size_t s) { return bar_texts_[s]->position->coords().y(); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return value(a) > value(b); });
  std::vector<std::pair<double, double>> taken;  // pixel spans of the labels placed
  for (size_t s : order) {
    QCPItemText* t = bar_texts_[s];
    const double half = QFontMetricsF(t->font()).horizontalAdvance(t->text()) / 2 + 5;
    const double x = p->xAxis->coordToPixel(double(s));
    bool free = true;
    for (const auto& [a, b] : taken) free = free && (x + half <= a || x - half >= b);
    t->setVisible(free);
    if (free) taken.push_back({x - half, x + half});
  }
  return true;
}

void DofAllocationPanel::ensure_bars(int s_count) {
  if (s_count == bars_layers_) return;
  QCustomPlot* p = plot();
  for (auto* t : bar_texts_) p->removeItem(t);
  bar_texts_.clear();
  for (int s = 0; s < s_count; ++s) {
    QCPItemText* t = boxed_label(p);
    t->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
    t->setClipToAxisRect(false);
    bar_texts_.push_back(t);
  }
  p->xAxis->setTicker(index_ticker(s_count));
  p->xAxis->setRange(-0.6, std::max(s_count, 1) - 0.4);
  bars_layers_ = s_count;
}

void DofAllocationPanel::clear(const QString& note) {
  has_state_ = false;
  state_ = DofAllocation{};
  bars_->data()->clear();
  head_dots_->data()->clear();
  ensure_bars(0);
  budget_line_->setVisible(false);
  clip_line_->setVisible(false);
  line_ticks_->clear();
  cost_text_->setText(QString());
  note_->setText(note);
  note_->setVisible(!note.isEmpty());
  plot()->replot();
}

void DofAllocationPanel::show_state(const DofAllocation& state, int64_t head_dim) {
  state_ = state;
  has_state_ = true;
  ++fills_;
  note_->setVisible(false);
  QCustomPlot* p = plot();
  const Allocation& a = state.allocation;
  const std::vector<int64_t> dims = a.layer_dims();
  ensure_bars(int(dims.size()));
  QVector<double> x, y, hx, hy;
  double top = double(a.budget);
  for (size_t s = 0; s < dims.size(); ++s) {
    x.push_back(double(s));
    y.push_back(double(dims[s]));
    top = std::max(top, double(dims[s]));
  }
  bars_->setData(x, y, true);
  const bool per_head = a.strategy == AllocStrategy::PerHead;
  if (per_head) {
    // Each head's dimension as a dot inside its layer's bar, spread across the bar.
    for (size_t s = 0; s < a.dims.size(); ++s) {
      const size_t n = a.dims[s].size();
      for (size_t h = 0; h < n; ++h) {
        hx.push_back(double(s) + (n > 1 ? -0.27 + 0.54 * double(h) / double(n - 1) : 0.0));
        hy.push_back(double(a.dims[s][h]));
      }
    }
  }
  head_dots_->setData(hx, hy, false);
  head_dots_->setVisible(per_head);
  bars_->setName(per_head ? tr("layer max") : tr("M per layer"));
  // Room above the tallest bar for its value label.
  p->yAxis->setRange(0, top * 1.2 + 1);
  for (size_t s = 0; s < dims.size(); ++s) {
    bar_texts_[s]->position->setCoords(double(s), double(dims[s]));
    bar_texts_[s]->setText(QString::number(dims[s]));
  }
  labelled_width_ = -1;
  fit_bar_labels();
  budget_line_->setVisible(true);
  budget_line_->point1->setCoords(0, double(a.budget));
  budget_line_->point2->setCoords(1, double(a.budget));
  const bool clip = a.strategy == AllocStrategy::DofClip && head_dim > 0;
  clip_line_->setVisible(clip);
  line_ticks_->clear();
  if (clip) {
    const double d = double(head_dim);
    clip_line_->point1->setCoords(0, d);
    clip_line_->point2->setCoords(1, d);
    p->yAxis->setRange(0, std::max(top, d) * 1.2 + 1);
    // One label where the two lines (nearly) meet, so the two never print over each other.
    if (std::abs(d - double(a.budget)) < 0.08 * p->yAxis->range().upper) {
      line_ticks_->addTick(double(a.budget), tr("budget %1\nclip d = %2").arg(a.budget).arg(head_dim));
    } else {
      line_ticks_->addTick(double(a.budget), tr("budget %1").arg(a.budget));
      line_ticks_->addTick(d, tr("clip d = %1").arg(head_dim));
    }
  } else {
    line_ticks_->addTick(double(a.budget), tr("budget %1").arg(a.budget));
  }
  p->yAxis2->setRange(p->yAxis->range());
  cost_text_->setText(mean_cost_text() +
                      tr("   (%1, λ = %2)").arg(QString(alloc_strategy_name(a.strategy)), lambda_short(state.lambda)) +
                      (per_head ? tr("\nbars: layer max; dots: each head") : QString()) + kept_text(a));
  p->replot(QCustomPlot::rpQueuedReplot);
}

QString DofAllocationPanel::caption() const { return cost_text_->text(); }

// Under a state budget: how many heads stay softmax and the state against the original's cache.
QString DofAllocationPanel::kept_text(const Allocation& a) {
  if (!a.state_note.empty()) return "\n" + QString::fromStdString(a.state_note);
  if (a.types.empty()) return {};
  const int64_t kept = softmax_head_count(a.types);
  int64_t heads = 0;
  for (const auto& layer : a.types) heads += int64_t(layer.size());
  return tr("\n%1 of %2 heads kept softmax (S in the grid); state %3 KB = %4% of the key-value cache")
      .arg(kept)
      .arg(heads)
      .arg(double(a.state_bytes) / 1024.0, 0, 'f', 1)
      .arg(100.0 * double(a.state_bytes) / double(std::max<int64_t>(1, a.original_bytes)), 0, 'f', 1);
}

std::vector<bool> DofAllocationPanel::shown_bar_labels() const {
  std::vector<bool> out;
  for (const QCPItemText* t : bar_texts_) out.push_back(t->visible());
  return out;
}

std::vector<double> DofAllocationPanel::drawn_layer_dims() const {
  std::vector<double> out;
  for (auto it = bars_->data()->constBegin(); it != bars_->data()->constEnd(); ++it) out.push_back(it->value);
  return out;
}

QString DofAllocationPanel::mean_cost_text() const {
  if (!has_state_) return QString();
  return tr("mean cost %1 of budget %2")
      .arg(QString::fromStdString(fmt_number(state_.allocation.mean_cost, 1)))
      .arg(state_.allocation.budget);
}

}  // namespace attnscope::views

#include "metrics_view.h"

#include <QApplication>
#include <QGridLayout>
#include <QLabel>
#include <QMouseEvent>
#include <algorithm>
#include <cmath>
#include <functional>
#include <qcustomplot.h>

#include "attnscope/analysis/head_analysis_table.h"
#include "attnscope/base/error.h"
#include "attnscope/base/table.h"
#include "attnscope/workbench/view_data.h"
#include "plot_style.h"
#include "value_heatmap.h"

namespace attnscope::views {

struct MetricsView::Impl {
  ValueHeatmap *sm_entropy = nullptr, *lin_entropy = nullptr, *lin_mono = nullptr, *lin_discordant = nullptr,
               *kl = nullptr, *mixers = nullptr;
  PlotPanel *hist = nullptr, *scatter = nullptr;
  QCPItemText *hist_note = nullptr, *scatter_note = nullptr;
  QLabel* linear_side = nullptr;
  int S = 0, H = 0;
  QString map;
  ScatterPoints points;
  int scatter_layer = -1, scatter_head = -1;
  QCPGraph* scatter_linear = nullptr;  // the feature map's points (named after the map)
  Histogram hist_softmax, hist_linear;
  int layer = 0, head = 0;

  std::vector<ValueHeatmap*> head_grids() const { return {sm_entropy, lin_entropy, lin_mono, lin_discordant, kl}; }
};

namespace {

QCPItemText* add_note(QCustomPlot* plot) {
  auto* n = new QCPItemText(plot);
  n->position->setType(QCPItemPosition::ptAxisRectRatio);
  n->position->setCoords(0.5, 0.5);
  n->setPositionAlignment(Qt::AlignCenter);
  n->setTextAlignment(Qt::AlignCenter);
  n->setClipToAxisRect(false);
  n->setVisible(false);
  return n;
}

void set_note(QCPItemText* n, const QString& text) {
  n->setText(text);
  n->setColor(QApplication::palette().color(QPalette::Text));
  n->setVisible(!text.isEmpty());
}

QStringList q_list(const std::vector<std::string>& names) {
  QStringList out;
  for (const std::string& n : names) out << QString::fromStdString(n);
  return out;
}

}  // namespace

MetricsView::MetricsView(QWidget* parent) : QWidget(parent), d_(new Impl) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(4, 4, 4, 4);
  grid->setSpacing(6);
  // The linear side named once, above the panels (in their titles it was cut: "untrained hedgehog
  // + wi…"); the titles say "linear".
  d_->linear_side = new QLabel(this);
  d_->linear_side->setObjectName("metrics_linear_side");
  d_->linear_side->setWordWrap(true);
  d_->linear_side->setSizePolicy(QSizePolicy::Preferred, QSizePolicy::Fixed);  // one line's height, never the panels'
  grid->addWidget(d_->linear_side, 0, 0, 1, 4);
  grid->setRowStretch(1, 1);  // the two rows of panels share the height; the line keeps its own
  grid->setRowStretch(2, 1);
  auto heat = [&](const QString& title, const QString& label, int row, int col) {
    auto* h = new ValueHeatmap(title, label, this);
    grid->addWidget(h, row + 1, col);  // row 0: the line naming the linear side
    return h;
  };
  d_->sm_entropy = heat(tr("softmax entropy"), tr("entropy (nats)"), 0, 0);
  d_->lin_entropy = heat(tr("linear entropy"), tr("entropy (nats)"), 0, 1);
  d_->lin_mono = heat(tr("linear monotonicity"), tr("Spearman"), 0, 2);
  d_->lin_discordant = heat(tr("linear discordant pairs"), tr("fraction of pairs"), 0, 3);
  d_->kl = heat(tr("KL(softmax || linear)"), tr("KL (nats)"), 1, 0);
  // Softmax's own monotonicity is no panel: within a row its weight rises with q.k by construction
  // (Spearman 1, no discordant pair, in every head). The linear map's can differ, and does.
  d_->lin_mono->setToolTip(tr("Spearman correlation of the linear map's weights with q.k within each row (softmax: 1)"));
  d_->lin_discordant->setToolTip(tr("Fraction of key pairs the linear map orders against q.k (softmax: 0)"));
  for (ValueHeatmap* h : d_->head_grids()) {
    connect(h, &ValueHeatmap::cellClicked, this, [this](int layer, int head) {
      if (layer >= d_->S || head >= d_->H) return;
      select(layer, head);
      emit headSelected(layer, head);
    });
  }

  d_->hist = new PlotPanel(tr("per-head entropy"), this);
  {
    QCustomPlot* p = d_->hist->plot();
    p->xAxis->setLabel(tr("mean row entropy (nats)"));
    p->yAxis->setLabel(tr("heads"));
    // The legend in one line under the plot, never over the bars.
    p->legend->setVisible(true);
    legend_below(p);
    d_->hist_note = add_note(p);
  }
  grid->addWidget(d_->hist, 2, 1);
  d_->hist->set_csv([this] {
    if (d_->hist_softmax.counts.empty()) fail("per-head entropy", "no values to export");
    Table t;
    t.header = {"series", "bin_lo", "bin_hi", "heads"};
    auto rows = [&](const Histogram& h, const std::string& name) {
      for (size_t b = 0; b < h.counts.size(); ++b)
        t.add_row({name, fmt_number(h.edges[b], 6), fmt_number(h.edges[b + 1], 6), fmt_number(h.counts[b], 0)});
    };
    rows(d_->hist_softmax, "softmax");
    rows(d_->hist_linear, d_->map.isEmpty() ? "linear" : d_->map.toStdString());
    return to_csv(t);
  });

  d_->scatter = new PlotPanel(tr("weight vs q.k"), this);
  {
    QCustomPlot* p = d_->scatter->plot();
    p->xAxis->setLabel(tr("q.k / sqrt(d)"));
    p->yAxis->setLabel(tr("attention weight"));
    // The legend in one line under the plot: inside it covered the densest points (issue 26).
    legend_below(p);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    d_->scatter_note = add_note(p);
    set_note(d_->scatter_note, tr("Select a head to see its scores against its weights"));
  }
  grid->addWidget(d_->scatter, 2, 2);
  d_->scatter->set_csv([this] {
    if (d_->points.score.empty()) fail("monotonicity scatter", "no points to export");
    Table t;
    t.header = {"score", "softmax", "linear"};
    for (size_t i = 0; i < d_->points.score.size(); ++i)
      t.add_row({fmt_number(d_->points.score[i], 6), fmt_number(d_->points.softmax[i], 8),
                 i < d_->points.linear.size() ? fmt_number(d_->points.linear[i], 8) : "nan"});
    return to_csv(t);
  });

  d_->mixers = heat(tr("mixer distances"), tr("||A - P||_F / ||A||_F"), 1, 3);
  d_->mixers->show_note(tr("Not computed\n(attnscope metrics --mixer-state N)"));
  connect(d_->mixers, &ValueHeatmap::cellClicked, this, [this](int row, int) {
    if (d_->H == 0 || row >= d_->S * d_->H) return;
    select(row / d_->H, row % d_->H);
    emit headSelected(row / d_->H, row % d_->H);
  });

  for (ValueHeatmap* h : d_->head_grids()) h->set_csv([h] { return h->values_csv("layer"); });
  d_->mixers->set_csv([this] { return d_->mixers->values_csv("head"); });
  for (int c = 0; c < 4; ++c) grid->setColumnStretch(c, 1);
  for (int r = 0; r < 2; ++r) grid->setRowStretch(r, 1);
  set_analysis({}, 0, 0, {});
}

MetricsView::~MetricsView() { delete d_; }

void MetricsView::set_analysis(const std::vector<HeadAnalysis>& heads, int layers, int heads_per_layer,
                               const QString& feature_map, const QString& description) {
  d_->S = layers, d_->H = heads_per_layer;
  d_->map = feature_map;
  const int S = layers, H = heads_per_layer;
  // Everything drawn here is core's (workbench/view_data.h): the grids, their colour ranges (both
  // entropies on one, so softmax and the map compare by colour too), the histograms' common bins.
  const MetricsFigures f = metrics_figures(heads, S, H);
  QStringList rows, cols;
  for (int l = 0; l < S; ++l) rows << QString("L%1").arg(l);
  for (int h = 0; h < H; ++h) cols << QString("H%1").arg(h);
  const QString map = feature_map.isEmpty() ? tr("linear") : feature_map;
  if (d_->scatter_linear && !feature_map.isEmpty()) {  // the scatter may have come before the analysis
    d_->scatter_linear->setName(feature_map);
    d_->scatter->plot()->replot(QCustomPlot::rpQueuedReplot);
  }
  d_->lin_entropy->set_title(tr("%1 entropy").arg(map));
  d_->lin_mono->set_title(tr("%1 monotonicity").arg(map));
  d_->lin_discordant->set_title(tr("%1 discordant pairs").arg(map));
  d_->kl->set_title(tr("KL(softmax || %1)").arg(map));
  const QString described = description.isEmpty() ? feature_map : description;
  d_->linear_side->setText(
      feature_map.isEmpty()
          ? tr("<b>Linear side:</b> none chosen (pick a feature map in the Heads view to compare it with softmax)")
          : tr("<b>Linear side:</b> %1, chosen in the Heads view").arg(described.toHtmlEscaped()));

  const bool linear = f.has_linear && !feature_map.isEmpty();
  auto draw = [&](ValueHeatmap* h, const ValueGrid& g, int decimals) { h->set_values(g.values, rows, cols, g.lo, g.hi, decimals); };
  if (!f.has_analysis) {
    for (ValueHeatmap* h : d_->head_grids()) h->show_note(tr("No analysis yet"));
  } else {
    draw(d_->sm_entropy, f.softmax_entropy, 2);
    if (linear) {
      draw(d_->lin_entropy, f.linear_entropy, 2);
      draw(d_->lin_mono, f.linear_monotonicity, 2);
      draw(d_->lin_discordant, f.linear_discordant, 3);
      draw(d_->kl, f.kl, 3);
    } else {
      for (ValueHeatmap* h : {d_->lin_entropy, d_->lin_mono, d_->lin_discordant, d_->kl})
        h->show_note(tr("No feature map chosen\n(pick one in the heads view)"));
    }
  }

  // Histograms of the per-head entropies, softmax and the feature map, over the same bins.
  QCustomPlot* hp = d_->hist->plot();
  hp->clearPlottables();
  d_->hist_softmax = f.softmax_histogram;
  d_->hist_linear = f.linear_histogram;
  auto add_bars = [&](const Histogram& h, const QString& name, int colour) {
    if (h.counts.empty()) return;
    auto* bars = new QCPBars(hp->xAxis, hp->yAxis);
    QVector<double> keys, counts;
    double width = 0;
    for (size_t b = 0; b < h.counts.size(); ++b) {
      keys.push_back((h.edges[b] + h.edges[b + 1]) / 2);
      counts.push_back(h.counts[b]);
      width = std::max(width, h.edges[b + 1] - h.edges[b]);
    }
    bars->setWidthType(QCPBars::wtPlotCoords);
    // One bin (all heads equal): a narrow bar instead of one without width.
    bars->setWidth(width > 0 ? width : std::max(0.02, std::abs(h.edges[0]) * 0.02));
    bars->setData(keys, counts, true);
    bars->setName(name);
    QColor fill = series_color(colour);
    fill.setAlpha(140);
    bars->setBrush(fill);
    bars->setPen(QPen(series_color(colour), 1.2));
  };
  add_bars(d_->hist_softmax, tr("softmax"), 0);
  add_bars(d_->hist_linear, map, 1);
  if (hp->plottableCount() > 0) {
    hp->rescaleAxes();
    const QCPRange x = hp->xAxis->range();
    const double pad = std::max(x.size() * 0.06, 0.05);
    hp->xAxis->setRange(x.lower - pad, x.upper + pad);
    hp->yAxis->setRange(0, hp->yAxis->range().upper * 1.08 + 0.5);
    set_note(d_->hist_note, {});
  } else {
    set_note(d_->hist_note, tr("No analysis yet"));
  }
  hp->legend->setVisible(hp->plottableCount() > 0);
  hp->replot();

  // Mixer distances: one row per head, one column per class.
  if (f.has_mixers) {
    d_->mixers->set_title(tr("mixer distances (N = %1)").arg(f.mixer_state));
    const int64_t tokens = heads.front().mixers ? heads.front().mixers->tokens : 0;
    const QString window = f.mixer_window > 0 ? tr("; \"window +\" where the last %1 keys kept exact take at least "
                                                   "%2 off its distance (window heads: %3)")
                                                    .arg(f.mixer_window)
                                                    .arg(kWindowGain)
                                                    .arg(f.mixer_windows)
                                              : QString();
    d_->mixers->setToolTip(tr("Distances of the map of the first %1 tokens of the first window.\nEach row ends with the "
                              "student that fits the head best: none (causal low-rank), fixed (RetNet decay) "
                              "or gated (SSD), the richer one only when it is closer by more than 5%%6.\n"
                              "Heads per student: none %2, fixed %3, gated %4: %5.")
                               .arg(tokens)
                               .arg(f.mixer_students[0])
                               .arg(f.mixer_students[1])
                               .arg(f.mixer_students[2])
                               .arg(QString::fromStdString(f.mixer_advice))
                               .arg(window));
    d_->mixers->plot()->xAxis->setTickLabelRotation(45);
    d_->mixers->set_values(f.mixers.values, q_list(f.mixer_rows), q_list(f.mixer_classes), f.mixers.lo, f.mixers.hi, 2);
  } else {
    d_->mixers->set_title(tr("mixer distances"));
    d_->mixers->show_note(tr("Not computed\n(attnscope metrics --mixer-state N)"));
  }
  // Which metrics are estimates from sampled rows, and their standard errors (core's note): the
  // tooltip of every panel that has none of its own.
  setToolTip(QString::fromStdString(sampling_note(heads)));
  select(d_->layer, d_->head);
}

void MetricsView::set_scatter(const ScatterPoints& points, int layer, int head) {
  d_->points = points;
  d_->scatter_layer = layer, d_->scatter_head = head;
  QCustomPlot* p = d_->scatter->plot();
  p->clearGraphs();
  d_->scatter->set_title(tr("weight vs q.k: L%1 H%2").arg(layer).arg(head));
  d_->scatter_linear = nullptr;
  auto add = [&](const std::vector<double>& w, const QString& name, int colour, QCPScatterStyle::ScatterShape shape) -> QCPGraph* {
    QVector<double> xs, ys;
    for (size_t i = 0; i < w.size() && i < points.score.size(); ++i)
      if (std::isfinite(w[i]) && std::isfinite(points.score[i])) {  // undefined rows have no weight to show
        xs.push_back(points.score[i]);
        ys.push_back(w[i]);
      }
    if (xs.isEmpty()) return nullptr;
    QCPGraph* g = p->addGraph();
    g->setData(xs, ys);
    g->setName(name);
    g->setLineStyle(QCPGraph::lsNone);
    QColor c = series_color(colour);
    QColor fill = c;
    fill.setAlpha(110);
    g->setScatterStyle(QCPScatterStyle(shape, c, fill, 5));
    g->setPen(QPen(c));
    return g;
  };
  add(points.softmax, tr("softmax"), 0, QCPScatterStyle::ssDisc);
  d_->scatter_linear = add(points.linear, d_->map.isEmpty() ? tr("linear") : d_->map, 1, QCPScatterStyle::ssTriangle);
  if (p->graphCount() > 0) {
    p->rescaleAxes();
    for (QCPAxis* a : {p->xAxis, p->yAxis}) {  // markers on the frame would be cut in half
      const QCPRange r = a->range();
      const double m = std::max(r.size() * 0.05, 1e-6);
      a->setRange(r.lower - m, r.upper + m);
    }
    set_note(d_->scatter_note, {});
  } else {
    set_note(d_->scatter_note, tr("No points (the head's window has fewer than 3 tokens)"));
  }
  p->legend->setVisible(p->graphCount() > 0);
  p->replot();
}

void MetricsView::clear(const QString& note) {
  set_analysis({}, 0, 0, d_->map);
  for (ValueHeatmap* h : d_->head_grids()) h->show_note(note);
  d_->mixers->show_note(note);
  set_note(d_->hist_note, note);
  d_->hist->plot()->replot();
  QCustomPlot* p = d_->scatter->plot();
  p->clearGraphs();
  d_->points = {};
  d_->scatter_linear = nullptr;
  d_->scatter->set_title(tr("weight vs q.k"));
  set_note(d_->scatter_note, note);
  p->legend->setVisible(false);
  p->replot();
}

void MetricsView::select(int layer, int head) {
  d_->layer = layer, d_->head = head;
  for (ValueHeatmap* h : d_->head_grids()) h->select(layer, head);
  // The whole row of the selected head in the mixer table.
  if (layer >= 0 && head >= 0 && layer < d_->S && head < d_->H) d_->mixers->select_row(layer * d_->H + head);
  else d_->mixers->select(-1, -1);
}

void MetricsView::set_commands(const QString& metrics_command) {
  for (PlotPanel* p : panels()) p->set_command(metrics_command);
}

std::vector<PlotPanel*> MetricsView::panels() const {
  return {d_->sm_entropy, d_->lin_entropy, d_->lin_mono, d_->lin_discordant,
          d_->kl,         d_->hist,        d_->scatter,  d_->mixers};
}

}  // namespace attnscope::views

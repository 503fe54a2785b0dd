#include "metrics_view.h"

#include <QApplication>
#include <QGridLayout>
#include <QMouseEvent>
#include <algorithm>
#include <cmath>
#include <functional>
#include <qcustomplot.h>

#include "attnscope/base/error.h"
#include "attnscope/base/table.h"
#include "heatmap_panel.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const char* const kMixerNames[] = {"Toeplitz", "causal low-rank", "RetNet decay", "SSD", "SSD + D", "semiseparable"};
constexpr int kMixers = 6;

std::vector<double> mixer_values(const MixerDistances& m) {
  return {m.toeplitz, m.causal_low_rank, m.retnet, m.ssd, m.ssd_d, m.semiseparable};
}

QString number(double v, int decimals) { return std::isfinite(v) ? QString::number(v, 'f', decimals) : QStringLiteral("–"); }

// A heatmap whose cells carry their value as text (paper tables as pictures): layer x head, or
// head x mixer class. Rows go down the page like a table.
struct ValueHeatmap {
  PlotPanel* panel = nullptr;
  QCPColorMap* map = nullptr;
  QCPColorScale* scale = nullptr;
  QCPItemText* note = nullptr;
  QCPItemRect* selection = nullptr;
  std::vector<QCPItemText*> texts;
  std::vector<std::vector<double>> values;  // [rows][cols], what is drawn
  QStringList row_names, col_names;
  int decimals = 2;
  int font_px = 0;         // the cell texts' size now (follows the cell size)
  int shown_decimals = 0;  // decimals printed now (one fewer than `decimals` in small cells)

  void build(PlotPanel* p, const QString& value_label) {
    panel = p;
    QCustomPlot* plot = p->plot();
    map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->setInterpolate(false);
    map->setTightBoundary(false);
    scale = new QCPColorScale(plot);
    scale->setType(QCPAxis::atRight);
    scale->setBarWidth(8);
    scale->axis()->setLabel(value_label);
    plot->plotLayout()->addElement(0, 1, scale);
    map->setColorScale(scale);
    map->setGradient(sequential_gradient());
    auto* group = new QCPMarginGroup(plot);
    plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    plot->yAxis->setRangeReversed(true);
    plot->xAxis->grid()->setVisible(false);
    plot->yAxis->grid()->setVisible(false);
    for (QCPAxis* a : {plot->xAxis, plot->yAxis}) {  // ticks outside: inside they read as minus signs
      a->setTickLength(0, 3);
      a->setSubTicks(false);
    }
    plot->xAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    plot->yAxis->setTicker(QSharedPointer<QCPAxisTickerText>::create());
    note = new QCPItemText(plot);
    note->position->setType(QCPItemPosition::ptAxisRectRatio);
    note->position->setCoords(0.5, 0.5);
    note->setPositionAlignment(Qt::AlignCenter);
    note->setTextAlignment(Qt::AlignCenter);
    note->setClipToAxisRect(false);
    note->setVisible(false);
    selection = new QCPItemRect(plot);
    selection->setBrush(Qt::NoBrush);
    selection->setVisible(false);
  }

  void show_note(const QString& text) {
    values.clear();
    map->data()->clear();
    map->setVisible(false);
    for (QCPItemText* t : texts) panel->plot()->removeItem(t);
    texts.clear();
    selection->setVisible(false);
    note->setText(text);
    note->setColor(QApplication::palette().color(QPalette::Text));
    note->setVisible(true);
    scale->setVisible(false);  // a colour bar without data would show a meaningless range
    qSharedPointerCast<QCPAxisTickerText>(panel->plot()->xAxis->ticker())->clear();
    qSharedPointerCast<QCPAxisTickerText>(panel->plot()->yAxis->ticker())->clear();
    panel->plot()->replot();
  }

  // `lo`..`hi`: the colour range (shared between heatmaps that compare, e.g. both entropies).
  void draw(std::vector<std::vector<double>> v, QStringList rows, QStringList cols, double lo, double hi, int digits) {
    QCustomPlot* plot = panel->plot();
    values = std::move(v);
    row_names = std::move(rows);
    col_names = std::move(cols);
    decimals = digits;
    note->setVisible(false);
    map->setVisible(true);
    scale->setVisible(true);
    const int R = int(values.size()), C = R > 0 ? int(values[0].size()) : 0;
    if (R == 0 || C == 0) return show_note(QObject::tr("No heads"));
    // QCustomPlot needs two cells a side to know a cell's size: a single row or column gets a
    // transparent neighbour.
    const int nc = std::max(2, C), nr = std::max(2, R);
    map->data()->setSize(nc, nr);
    map->data()->setRange(QCPRange(0, nc - 1), QCPRange(0, nr - 1));
    for (int r = 0; r < nr; ++r)
      for (int c = 0; c < nc; ++c) map->data()->setCell(c, r, r < R && c < C ? values[size_t(r)][size_t(c)] : kNaN);
    if (!(hi > lo)) hi = lo + 1;
    map->setDataRange(QCPRange(lo, hi));
    plot->xAxis->setRange(-0.5, C - 0.5);
    plot->yAxis->setRange(-0.5, R - 0.5);
    for (QCPItemText* t : texts) plot->removeItem(t);
    texts.clear();
    QCPColorGradient g = map->gradient();
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c) {
        const double x = values[size_t(r)][size_t(c)];
        auto* t = new QCPItemText(plot);
        t->position->setCoords(c, r);
        t->setPositionAlignment(Qt::AlignCenter);
        t->setText(number(x, decimals));
        // On a coloured cell the ink follows the cell; a missing value ("–") sits on the
        // background and follows the palette (style_plot restyles it).
        t->setProperty(kCellTextProperty, std::isfinite(x));
        t->setColor(std::isfinite(x) ? cell_ink(QColor::fromRgb(g.color(x, QCPRange(lo, hi))))
                                     : QApplication::palette().color(QPalette::Text));
        t->setClipToAxisRect(true);
        texts.push_back(t);
      }
    font_px = 0;
    shown_decimals = decimals;
    label_axes();
    fit_texts();
    plot->replot();
  }

  // Tick labels every `stride` rows/columns so they do not overlap at this size.
  void label_axes() {
    QCustomPlot* plot = panel->plot();
    const QFontMetrics fm(plot->yAxis->tickLabelFont());
    auto fill = [&](QCPAxis* axis, const QStringList& names, double pixels, double each) {
      auto ticker = qSharedPointerCast<QCPAxisTickerText>(axis->ticker());
      ticker->clear();
      const int n = int(names.size());
      const int stride = std::max(1, int(std::ceil(each * n / std::max(1.0, pixels))));
      for (int i = 0; i < n; i += stride) ticker->addTick(i, names[i]);
    };
    fill(plot->yAxis, row_names, plot->axisRect()->height(), fm.height() + 1);
    int widest = 0;
    for (const QString& s : col_names) widest = std::max(widest, fm.horizontalAdvance(s));
    // Rotated column labels stack by their height (plus the slant), level ones by their width.
    const double rot = std::abs(plot->xAxis->tickLabelRotation());
    fill(plot->xAxis, col_names, plot->axisRect()->width(), rot > 1 ? fm.height() * 1.5 : widest + 6);
  }

  // Cell texts sized to the widest value at `decimals`, then with one decimal fewer when that is
  // what keeps them readable (12 x 12 heads in a quarter of a window); hidden below 8 px. True
  // when anything changed.
  bool fit_texts() {
    if (texts.empty()) return false;
    QCustomPlot* plot = panel->plot();
    const int R = int(values.size()), C = int(values[0].size());
    const double cw = plot->axisRect()->width() / double(C), ch = plot->axisRect()->height() / double(R);
    // Pixel sizes, not points: the plot's buffer and a widget's metrics may not share a DPI.
    QFont f = QApplication::font();
    const int base_px = QFontInfo(f).pixelSize();
    f.setPixelSize(base_px);
    const QFontMetricsF fm(f);
    auto size_for = [&](int digits) {
      double widest = 0;
      for (const auto& row : values)
        for (double x : row) widest = std::max(widest, fm.horizontalAdvance(number(x, digits)));
      const double fit = std::min({cw * 0.88 / std::max(widest, 1.0), ch * 0.8 / fm.height(), 1.0});
      return int(std::floor(base_px * fit));
    };
    int digits = decimals;
    int px = size_for(digits);
    while (px < 8 && digits > 1 && size_for(digits - 1) > px) px = size_for(--digits);
    if (px == font_px && digits == shown_decimals) return false;
    font_px = px;
    shown_decimals = digits;
    f.setPixelSize(std::max(px, 1));
    const bool visible = px >= 8;
    size_t n = 0;
    for (const auto& row : values)
      for (double x : row) {
        QCPItemText* t = texts[n++];
        t->setFont(f);
        t->setText(number(x, digits));
        t->setVisible(visible);
      }
    label_axes();
    return true;
  }

  void select(int row, int col) {
    if (values.empty() || row < 0 || col < 0 || row >= int(values.size()) || col >= int(values[0].size())) {
      selection->setVisible(false);
    } else {
      selection->topLeft->setCoords(col - 0.5, row - 0.5);
      selection->bottomRight->setCoords(col + 0.5, row + 0.5);
      selection->setPen(QPen(QApplication::palette().color(QPalette::Highlight), 3));
      selection->setVisible(true);
    }
    panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  }

  std::string csv(const std::string& corner) const {
    if (values.empty()) fail(panel->title().toStdString(), "no values to export");
    Table t;
    t.header = {corner};
    for (const QString& c : col_names) t.header.push_back(c.toStdString());
    for (size_t r = 0; r < values.size(); ++r) {
      std::vector<std::string> row = {row_names.value(int(r)).toStdString()};
      for (double x : values[r]) row.push_back(fmt_number(x, 6));
      t.add_row(std::move(row));
    }
    return to_csv(t);
  }
};

}  // namespace

struct MetricsView::Impl {
  ValueHeatmap sm_entropy, sm_mono, lin_entropy, lin_mono, kl, mixers;
  PlotPanel *hist = nullptr, *scatter = nullptr;
  QCPItemText *hist_note = nullptr, *scatter_note = nullptr;
  std::vector<HeadAnalysis> heads;
  int S = 0, H = 0;
  QString map;
  ScatterPoints points;
  int scatter_layer = -1, scatter_head = -1;
  QCPGraph* scatter_linear = nullptr;  // the feature map's points (named after the map)
  Histogram hist_softmax, hist_linear;
  int layer = 0, head = 0;
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

}  // namespace

MetricsView::MetricsView(QWidget* parent) : QWidget(parent), d_(new Impl) {
  auto* grid = new QGridLayout(this);
  grid->setContentsMargins(4, 4, 4, 4);
  grid->setSpacing(6);
  auto heat = [&](ValueHeatmap& h, const QString& title, const QString& label, int row, int col) {
    auto* p = new PlotPanel(title, this);
    h.build(p, label);
    grid->addWidget(p, row, col);
    // Cell texts follow the cells' size; clicking a layer x head cell selects that head.
    connect(p->plot(), &QCustomPlot::afterReplot, p, [&h] {
      if (h.fit_texts()) h.panel->plot()->replot(QCustomPlot::rpQueuedReplot);
    });
  };
  heat(d_->sm_entropy, tr("softmax entropy"), tr("entropy (nats)"), 0, 0);
  heat(d_->sm_mono, tr("softmax monotonicity"), tr("Spearman"), 0, 1);
  heat(d_->lin_entropy, tr("linear entropy"), tr("entropy (nats)"), 0, 2);
  heat(d_->lin_mono, tr("linear monotonicity"), tr("Spearman"), 0, 3);
  heat(d_->kl, tr("KL(softmax || linear)"), tr("KL (nats)"), 1, 0);
  for (ValueHeatmap* h : {&d_->sm_entropy, &d_->sm_mono, &d_->lin_entropy, &d_->lin_mono, &d_->kl}) {
    connect(h->panel->plot(), &QCustomPlot::mousePress, this, [this, h](QMouseEvent* e) {
      QCustomPlot* p = h->panel->plot();
      if (h->values.empty() || !p->axisRect()->rect().contains(e->position().toPoint())) return;
      const int head = int(std::floor(p->xAxis->pixelToCoord(e->position().x()) + 0.5));
      const int layer = int(std::floor(p->yAxis->pixelToCoord(e->position().y()) + 0.5));
      if (layer < 0 || head < 0 || layer >= d_->S || head >= d_->H) return;
      select(layer, head);
      emit headSelected(layer, head);
    });
  }

  d_->hist = new PlotPanel(tr("per-head entropy"), this);
  {
    QCustomPlot* p = d_->hist->plot();
    p->xAxis->setLabel(tr("mean row entropy (nats)"));
    p->yAxis->setLabel(tr("heads"));
    p->legend->setVisible(true);
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    d_->hist_note = add_note(p);
  }
  grid->addWidget(d_->hist, 1, 1);
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
    p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignLeft);
    p->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    d_->scatter_note = add_note(p);
    set_note(d_->scatter_note, tr("Select a head to see its scores against its weights"));
  }
  grid->addWidget(d_->scatter, 1, 2);
  d_->scatter->set_csv([this] {
    if (d_->points.score.empty()) fail("monotonicity scatter", "no points to export");
    Table t;
    t.header = {"score", "softmax", "linear"};
    for (size_t i = 0; i < d_->points.score.size(); ++i)
      t.add_row({fmt_number(d_->points.score[i], 6), fmt_number(d_->points.softmax[i], 8),
                 i < d_->points.linear.size() ? fmt_number(d_->points.linear[i], 8) : "nan"});
    return to_csv(t);
  });

  heat(d_->mixers, tr("mixer distances"), tr("||A - P||_F / ||A||_F"), 1, 3);
  d_->mixers.show_note(tr("Not computed\n(attnscope metrics --mixer-state N)"));
  connect(d_->mixers.panel->plot(), &QCustomPlot::mousePress, this, [this](QMouseEvent* e) {
    QCustomPlot* p = d_->mixers.panel->plot();
    if (d_->mixers.values.empty() || d_->H == 0 || !p->axisRect()->rect().contains(e->position().toPoint())) return;
    const int row = int(std::floor(p->yAxis->pixelToCoord(e->position().y()) + 0.5));
    if (row < 0 || row >= d_->S * d_->H) return;
    select(row / d_->H, row % d_->H);
    emit headSelected(row / d_->H, row % d_->H);
  });

  d_->sm_entropy.panel->set_csv([this] { return d_->sm_entropy.csv("layer"); });
  d_->sm_mono.panel->set_csv([this] { return d_->sm_mono.csv("layer"); });
  d_->lin_entropy.panel->set_csv([this] { return d_->lin_entropy.csv("layer"); });
  d_->lin_mono.panel->set_csv([this] { return d_->lin_mono.csv("layer"); });
  d_->kl.panel->set_csv([this] { return d_->kl.csv("layer"); });
  d_->mixers.panel->set_csv([this] { return d_->mixers.csv("head"); });
  for (PlotPanel* p : panels()) {
    p->restyle();  // the colour bars were added after PlotPanel styled the plot
  }
  for (int c = 0; c < 4; ++c) grid->setColumnStretch(c, 1);
  for (int r = 0; r < 2; ++r) grid->setRowStretch(r, 1);
  set_analysis({}, 0, 0, {});
}

MetricsView::~MetricsView() { delete d_; }

void MetricsView::changeEvent(QEvent* event) {
  QWidget::changeEvent(event);
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) apply_palette();
}

void MetricsView::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  apply_palette();
}

// The texts follow the palette through each panel's restyle (style_plot); the selection frame is in
// the palette's highlight colour.
void MetricsView::apply_palette() {
  const QPen frame(QApplication::palette().color(QPalette::Highlight), 3);
  for (ValueHeatmap* h : {&d_->sm_entropy, &d_->sm_mono, &d_->lin_entropy, &d_->lin_mono, &d_->kl, &d_->mixers}) {
    if (h->selection->pen() == frame) continue;
    h->selection->setPen(frame);
    h->panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  }
}

void MetricsView::set_analysis(const std::vector<HeadAnalysis>& heads, int layers, int heads_per_layer,
                               const QString& feature_map) {
  d_->heads = heads;
  d_->S = layers, d_->H = heads_per_layer;
  d_->map = feature_map;
  const int S = layers, H = heads_per_layer;
  auto grid_of = [&](const std::function<double(const HeadAnalysis&)>& f) {
    std::vector<std::vector<double>> v(size_t(std::max(0, S)), std::vector<double>(size_t(std::max(0, H)), kNaN));
    for (const HeadAnalysis& h : heads)
      if (h.layer >= 0 && h.layer < S && h.head >= 0 && h.head < H) v[size_t(h.layer)][size_t(h.head)] = f(h);
    return v;
  };
  auto range = [](std::initializer_list<const std::vector<std::vector<double>>*> grids, double* lo, double* hi) {
    *lo = std::numeric_limits<double>::infinity(), *hi = -*lo;
    for (const auto* g : grids)
      for (const auto& row : *g)
        for (double x : row)
          if (std::isfinite(x)) *lo = std::min(*lo, x), *hi = std::max(*hi, x);
    if (*lo > *hi) *lo = 0, *hi = 1;
  };
  QStringList rows, cols;
  for (int l = 0; l < S; ++l) rows << QString("L%1").arg(l);
  for (int h = 0; h < H; ++h) cols << QString("H%1").arg(h);
  const bool any = S > 0 && H > 0 && !heads.empty();
  const bool linear = any && !feature_map.isEmpty() &&
                      std::any_of(heads.begin(), heads.end(), [](const HeadAnalysis& h) { return h.linear.has_value(); });
  const QString map = feature_map.isEmpty() ? tr("linear") : feature_map;
  if (d_->scatter_linear && !feature_map.isEmpty()) {  // the scatter may have come before the analysis
    d_->scatter_linear->setName(feature_map);
    d_->scatter->plot()->replot(QCustomPlot::rpQueuedReplot);
  }
  d_->lin_entropy.panel->set_title(tr("%1 entropy").arg(map));
  d_->lin_mono.panel->set_title(tr("%1 monotonicity").arg(map));
  d_->kl.panel->set_title(tr("KL(softmax || %1)").arg(map));

  const auto sm_ent = grid_of([](const HeadAnalysis& h) { return h.softmax.entropy; });
  const auto sm_mono = grid_of([](const HeadAnalysis& h) { return h.softmax.monotonicity ? h.softmax.monotonicity->spearman : kNaN; });
  const auto lin_ent = grid_of([](const HeadAnalysis& h) { return h.linear ? h.linear->entropy : kNaN; });
  const auto lin_mono = grid_of([](const HeadAnalysis& h) {
    return h.linear && h.linear->monotonicity ? h.linear->monotonicity->spearman : kNaN;
  });
  const auto kl = grid_of([](const HeadAnalysis& h) { return h.linear && h.linear->kl ? *h.linear->kl : kNaN; });
  if (!any) {
    for (ValueHeatmap* h : {&d_->sm_entropy, &d_->sm_mono, &d_->lin_entropy, &d_->lin_mono, &d_->kl})
      h->show_note(tr("No analysis yet"));
  } else {
    // Both entropies on one colour range and both monotonicities on [-1, 1], so that softmax and
    // the feature map compare by colour as well as by number.
    double lo = 0, hi = 1;
    range({&sm_ent, &lin_ent}, &lo, &hi);
    d_->sm_entropy.draw(sm_ent, rows, cols, lo, hi, 2);
    d_->sm_mono.draw(sm_mono, rows, cols, -1, 1, 2);
    if (linear) {
      d_->lin_entropy.draw(lin_ent, rows, cols, lo, hi, 2);
      d_->lin_mono.draw(lin_mono, rows, cols, -1, 1, 2);
      range({&kl}, &lo, &hi);
      d_->kl.draw(kl, rows, cols, std::min(0.0, lo), hi, 3);
    } else {
      for (ValueHeatmap* h : {&d_->lin_entropy, &d_->lin_mono, &d_->kl})
        h->show_note(tr("No feature map chosen\n(pick one in the heads view)"));
    }
  }

  // Histograms of the per-head entropies, softmax and the feature map, drawn over each other.
  QCustomPlot* hp = d_->hist->plot();
  hp->clearPlottables();
  std::vector<double> se, le;
  for (const HeadAnalysis& h : heads) {
    se.push_back(h.softmax.entropy);
    if (h.linear) le.push_back(h.linear->entropy);
  }
  const int bins = std::clamp(int(std::ceil(std::sqrt(double(std::max<size_t>(se.size(), 1))))) + 2, 5, 24);
  d_->hist_softmax = histogram(se, bins);
  d_->hist_linear = le.empty() ? Histogram{} : histogram(le, bins);
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
    fill.setAlpha(160);
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
    hp->yAxis->setRange(0, hp->yAxis->range().upper * 1.15 + 0.5);
    set_note(d_->hist_note, {});
  } else {
    set_note(d_->hist_note, tr("No analysis yet"));
  }
  hp->legend->setVisible(hp->plottableCount() > 0);
  hp->replot();

  // Mixer distances: one row per head, one column per class.
  std::vector<std::vector<double>> mix;
  QStringList mix_rows, mix_cols;
  for (const char* n : kMixerNames) mix_cols << QString::fromLatin1(n);
  int64_t state = 0;
  bool have_mix = false;
  for (int l = 0; l < S; ++l)
    for (int h = 0; h < H; ++h) {
      mix_rows << QString("L%1 H%2").arg(l).arg(h);
      mix.emplace_back(size_t(kMixers), kNaN);
    }
  for (const HeadAnalysis& h : heads)
    if (h.mixers && h.layer < S && h.head < H) {
      mix[size_t(h.layer * H + h.head)] = mixer_values(*h.mixers);
      state = h.mixers->state_size;
      have_mix = true;
    }
  if (have_mix) {
    double lo = 0, hi = 1;
    range({&mix}, &lo, &hi);
    d_->mixers.panel->set_title(tr("mixer distances (N = %1)").arg(state));
    d_->mixers.panel->plot()->xAxis->setTickLabelRotation(45);
    d_->mixers.draw(mix, mix_rows, mix_cols, 0, hi, 2);
  } else {
    d_->mixers.panel->set_title(tr("mixer distances"));
    d_->mixers.show_note(tr("Not computed\n(attnscope metrics --mixer-state N)"));
  }
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

void MetricsView::select(int layer, int head) {
  d_->layer = layer, d_->head = head;
  for (ValueHeatmap* h : {&d_->sm_entropy, &d_->sm_mono, &d_->lin_entropy, &d_->lin_mono, &d_->kl}) h->select(layer, head);
  d_->mixers.select(layer * d_->H + head, 0);
  if (!d_->mixers.values.empty() && layer >= 0 && head >= 0 && layer < d_->S && head < d_->H) {
    // The whole row of the selected head.
    const int row = layer * d_->H + head;
    d_->mixers.selection->topLeft->setCoords(-0.5, row - 0.5);
    d_->mixers.selection->bottomRight->setCoords(kMixers - 0.5, row + 0.5);
  }
}

void MetricsView::set_commands(const QString& metrics_command) {
  for (PlotPanel* p : panels()) p->set_command(metrics_command);
}

std::vector<PlotPanel*> MetricsView::panels() const {
  return {d_->sm_entropy.panel, d_->sm_mono.panel, d_->lin_entropy.panel, d_->lin_mono.panel,
          d_->kl.panel,         d_->hist,          d_->scatter,           d_->mixers.panel};
}

}  // namespace attnscope::views

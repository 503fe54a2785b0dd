#include "dof_view.h"

#include <QApplication>
#include <QComboBox>
#include <QFileDialog>
#include <QGridLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QSlider>
#include <QSpinBox>
#include <QToolButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

// The lambda slider: log2(lambda) in quarter steps, 2^-12 .. 2^0.
constexpr int kLambdaMinPos = -48, kLambdaMaxPos = 0;
constexpr int kCurvePoints = kLambdaMaxPos - kLambdaMinPos + 1;  // DoF against lambda: one per slider position

double lambda_of_position(int pos) { return std::exp2(pos / 4.0); }
int position_of_lambda(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda)) return -32;
  const long p = std::lround(4 * std::log2(lambda));
  return int(std::clamp<long>(p, kLambdaMinPos, kLambdaMaxPos));
}

QString exponent_text(double e) { return QString::number(e, 'g', 4); }

// "λ = 2^-8 = 0.0039"
QString lambda_label_text(int pos) {
  return QStringLiteral("λ = 2^%1 = %2").arg(exponent_text(pos / 4.0), QString::number(lambda_of_position(pos), 'g', 2));
}

// "2^-8" for the quarter powers of two the slider gives, else the shortest decimal.
QString lambda_short(double lambda) {
  const double e = 4 * std::log2(lambda);
  if (std::abs(e - std::round(e)) < 1e-9) return QStringLiteral("2^%1").arg(exponent_text(std::round(e) / 4));
  return QString::number(lambda, 'g', 3);
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// Integer ticks 0..n-1, at most ~16 labelled.
QSharedPointer<QCPAxisTickerText> index_ticker(int n) {
  QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
  const int step = std::max(1, (n + 15) / 16);
  for (int i = 0; i < n; i += step) t->addTick(i, QString::number(i));
  return t;
}

// A value label on a box of the background colour, so it reads over grid lines and curves; its
// ink and box follow the palette (style_plot restyles boxed labels; exports draw them light).
QCPItemText* boxed_label(QCustomPlot* plot) {
  const QPalette pal = QApplication::palette();
  auto* t = new QCPItemText(plot);
  t->setColor(pal.color(QPalette::Text));
  QColor box = pal.color(QPalette::Base);
  box.setAlpha(225);
  t->setBrush(box);
  t->setPen(QPen(QColor(120, 120, 120, 160)));
  t->setPadding(QMargins(3, 1, 3, 1));
  QFont f = t->font();
  f.setPointSizeF(8.5);
  t->setFont(f);
  return t;
}

QColor accent() { return series_color(3); }  // vermillion: the lambda and budget lines

}  // namespace

struct DofView::Impl : QObject {
  explicit Impl(DofView* v) : QObject(v), view(v) {}

  DofView* view;
  std::shared_ptr<const DofSpectra> spectra;
  DofAllocation state;
  bool has_state = false;
  int sel_layer = 0, sel_head = 0;
  bool quiet = false;            // set_controls: move without emitting
  double drawn_lambda = NAN;     // the lambda panels (a)-(c) show; NaN: redraw them
  QString dof_command, allocate_command;

  QSlider* lambda = nullptr;
  QLabel* lambda_label = nullptr;
  QSlider* budget = nullptr;
  QSpinBox* budget_box = nullptr;
  QComboBox* strategy = nullptr;
  QToolButton* table_button = nullptr;
  QAction* head_dims_action = nullptr;

  // (a) DoF per head
  PlotPanel* grid_panel = nullptr;
  QCPColorMap* map = nullptr;
  QCPColorScale* scale = nullptr;
  QCPTextElement* note = nullptr;
  int S = 0, H = 0;
  std::vector<QCPItemText*> cell_texts;   // [s * H + h]
  std::vector<QCPItemRect*> cell_marks;   // unconverged outline
  QCPItemRect *sel_outer = nullptr, *sel_inner = nullptr;
  // (b) eigenvalue spectrum
  PlotPanel* spectrum_panel = nullptr;
  QCPGraph *spec = nullptr, *spec_half = nullptr;
  QCPItemStraightLine *ridge_line = nullptr, *res_line = nullptr;
  QCPItemText* ridge_text = nullptr;
  double plot_log_offset = 0;  // the spectrum is drawn as mu * exp(-plot_log_offset)
  // (c) DoF against lambda
  PlotPanel* curve_panel = nullptr;
  QCPGraph *curve_head = nullptr, *curve_half = nullptr, *curve_layer = nullptr;
  QCPItemStraightLine* curve_line = nullptr;
  QCPItemText* curve_text = nullptr;
  // (d) allocation
  PlotPanel* alloc_panel = nullptr;
  QCPBars* bars = nullptr;
  QCPGraph* head_dots = nullptr;
  QCPItemStraightLine *budget_line = nullptr, *clip_line = nullptr;
  QSharedPointer<QCPAxisTickerText> line_ticks;  // "budget C" and "d = …" on the right axis
  std::vector<QCPItemText*> bar_texts;
  QCPTextElement* cost_text = nullptr;
  int bars_layers = -1;

  std::string model_name() const {
    if (!spectra) return "model";
    const std::string& p = spectra->model.empty() ? spectra->capture_dir : spectra->model;
    const std::string name = std::filesystem::path(p).filename().string();
    return name.empty() ? p : name;
  }

  const HeadSpectrum* selected_spectrum() const {
    if (!spectra || sel_layer >= spectra->num_layers || sel_head >= spectra->num_heads) return nullptr;
    return &spectra->head(sel_layer, sel_head);
  }

  void build_grid_panel();
  void build_spectrum_panel();
  void build_curve_panel();
  void build_alloc_panel();

  void ensure_grid(int S, int H);
  void draw_grid();
  void draw_selection();
  void update_text_visibility();
  void draw_spectrum();
  void draw_ridge();
  void draw_curve();
  void draw_curve_line();
  void ensure_bars(int S);
  void draw_bars();
  void update_titles();
  void clear();
  void cell_tooltip(QMouseEvent* e);
  void cell_click(QMouseEvent* e);
  bool cell_at(const QPoint& pos, int* layer, int* head) const;
  void table_dialog(DofTable which);
};

// ---------------------------------------------------------------------------------------------
// (a) layer x head heatmap with values

void DofView::Impl::build_grid_panel() {
  grid_panel = new PlotPanel(tr("DoF per head (Table 2)"), view);
  QCustomPlot* p = grid_panel->plot();
  map = new QCPColorMap(p->xAxis, p->yAxis);
  map->setInterpolate(false);
  map->setTightBoundary(false);
  map->setGradient(sequential_gradient());
  scale = new QCPColorScale(p);
  scale->setBarWidth(10);
  scale->axis()->setLabel("DoF");
  p->plotLayout()->addElement(0, 1, scale);
  map->setColorScale(scale);  // the map takes the scale's gradient from here on
  scale->setGradient(sequential_gradient());
  auto* group = new QCPMarginGroup(p);
  p->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
  note = new QCPTextElement(p, tr("bold: the layer's maximum\n* not converged: DoF moved > 10% between J/2 and J"));
  QFont nf = note->font();
  nf.setPointSizeF(8);
  note->setFont(nf);
  p->plotLayout()->insertRow(1);
  p->plotLayout()->addElement(1, 0, note);
  p->plotLayout()->setRowStretchFactor(1, 0.001);
  p->xAxis->setLabel("head");
  p->yAxis->setLabel("layer");
  p->yAxis->setRangeReversed(true);  // layer 0 on top, as in the paper's table
  p->xAxis->grid()->setVisible(false);
  p->yAxis->grid()->setVisible(false);
  p->xAxis->setSubTicks(false);
  p->yAxis->setSubTicks(false);
  // Selection: a black and a white outline read on every cell colour, on a layer of their own so
  // the cell items (made later) never cover them.
  p->addLayer("selection", p->layer("main"), QCustomPlot::limAbove);
  sel_outer = new QCPItemRect(p);
  sel_outer->setLayer("selection");
  sel_outer->setPen(QPen(Qt::black, 4));
  sel_inner = new QCPItemRect(p);
  sel_inner->setPen(QPen(Qt::white, 1.5));
  sel_inner->setLayer("selection");
  sel_outer->setVisible(false);
  sel_inner->setVisible(false);
  connect(p, &QCustomPlot::mousePress, this, &Impl::cell_click);
  connect(p, &QCustomPlot::mouseMove, this, &Impl::cell_tooltip);
  connect(p, &QCustomPlot::afterLayout, this, &Impl::update_text_visibility);
  style_plot(p);  // the text elements added here
  grid_panel->set_csv([this]() -> std::string {
    return has_state ? to_csv(dof_grid_table(state.head_dof, state.lambda, state.convergence)) : std::string();
  });
}

void DofView::Impl::ensure_grid(int s_count, int h_count) {
  if (s_count == S && h_count == H) return;
  QCustomPlot* p = grid_panel->plot();
  for (auto* t : cell_texts) p->removeItem(t);
  for (auto* r : cell_marks) p->removeItem(r);
  cell_texts.clear();
  cell_marks.clear();
  S = s_count;
  H = h_count;
  // A dimension of one cell is drawn as two half cells with the same value: QCPColorMap needs two
  // cells to know how wide one is.
  map->data()->setSize(H == 1 ? 2 : H, S == 1 ? 2 : S);
  map->data()->setRange(H == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, H - 1),
                        S == 1 ? QCPRange(-0.25, 0.25) : QCPRange(0, S - 1));
  p->xAxis->setRange(-0.5, std::max(H, 1) - 0.5);
  p->yAxis->setRange(-0.5, std::max(S, 1) - 0.5);
  p->xAxis->setTicker(index_ticker(H));
  p->yAxis->setTicker(index_ticker(S));
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < H; ++h) {
      auto* mark = new QCPItemRect(p);
      mark->topLeft->setCoords(h - 0.46, s - 0.46);
      mark->bottomRight->setCoords(h + 0.46, s + 0.46);
      mark->setPen(QPen(accent(), 2, Qt::DashLine));
      mark->setVisible(false);
      cell_marks.push_back(mark);
      auto* t = new QCPItemText(p);
      t->position->setCoords(h, s);
      t->setPositionAlignment(Qt::AlignCenter);
      t->setProperty(kCellTextProperty, true);  // inked by its cell's colour, not the palette
      cell_texts.push_back(t);
    }
}

void DofView::Impl::draw_grid() {
  const auto& hd = state.head_dof;
  double hi = 0;
  for (const auto& row : hd)
    for (const DofValue& v : row) hi = std::max(hi, v.value);
  if (!(hi > 0)) hi = 1;
  QCPColorMapData* data = map->data();
  for (int s = 0; s < S; ++s) {
    int best = 0;
    for (int h = 0; h < H; ++h)
      if (hd[s][h].value > hd[s][best].value) best = h;
    for (int h = 0; h < H; ++h) {
      const double v = hd[s][h].value;
      for (int kx = 0; kx < (H == 1 ? 2 : 1); ++kx)
        for (int ky = 0; ky < (S == 1 ? 2 : 1); ++ky) data->setCell(H == 1 ? kx : h, S == 1 ? ky : s, v);
      const bool flagged = s < int(state.convergence.size()) && h < int(state.convergence[s].size()) &&
                           state.convergence[s][h].unconverged();
      QCPItemText* t = cell_texts[size_t(s) * H + h];
      t->setText(QString::fromStdString(fmt_number(v, 1)) + (flagged ? "*" : ""));
      QFont f = t->font();
      f.setBold(h == best);
      f.setPointSizeF(9);
      t->setFont(f);
      t->setColor(cell_ink(QColor::fromRgb(map->gradient().color(v, QCPRange(0, hi)))));
      cell_marks[size_t(s) * H + h]->setVisible(flagged);
    }
  }
  map->setDataRange(QCPRange(0, hi));
}

void DofView::Impl::draw_selection() {
  const bool on = sel_layer < S && sel_head < H;
  for (QCPItemRect* r : {sel_outer, sel_inner}) {
    r->setVisible(on);
    r->topLeft->setCoords(sel_head - 0.5, sel_layer - 0.5);
    r->bottomRight->setCoords(sel_head + 0.5, sel_layer + 0.5);
  }
}

// Values are printed only where a cell is wide enough to hold them ("123.4*" at 9 pt).
void DofView::Impl::update_text_visibility() {
  if (!H || !S) return;
  const QRect r = grid_panel->plot()->axisRect()->rect();
  const QFontMetrics fm(cell_texts.empty() ? view->font() : cell_texts.front()->font());
  const bool fits = r.width() / double(H) >= fm.horizontalAdvance("100.0*") + 2 && r.height() / double(S) >= fm.height();
  for (auto* t : cell_texts) t->setVisible(fits);
}

bool DofView::Impl::cell_at(const QPoint& pos, int* layer, int* head) const {
  QCustomPlot* p = grid_panel->plot();
  if (!S || !H || !p->axisRect()->rect().contains(pos)) return false;
  const long h = std::lround(p->xAxis->pixelToCoord(pos.x()));
  const long s = std::lround(p->yAxis->pixelToCoord(pos.y()));
  if (h < 0 || h >= H || s < 0 || s >= S) return false;
  *layer = int(s);
  *head = int(h);
  return true;
}

void DofView::Impl::cell_click(QMouseEvent* e) {
  int s, h;
  if (e->button() != Qt::LeftButton || !cell_at(e->pos(), &s, &h)) return;
  view->select(s, h);
  emit view->headSelected(s, h);
}

void DofView::Impl::cell_tooltip(QMouseEvent* e) {
  int s, h;
  if (!has_state || !cell_at(e->pos(), &s, &h)) {
    QToolTip::hideText();
    return;
  }
  const DofValue& v = state.head_dof[s][h];
  QString text = tr("layer %1, head %2: DoF %3").arg(s).arg(h).arg(QString::fromStdString(fmt_number(v.value, 2)));
  if (v.upper > v.lower)
    text += tr(" [%1, %2]").arg(QString::fromStdString(fmt_number(v.lower, 2)), QString::fromStdString(fmt_number(v.upper, 2)));
  if (s < int(state.convergence.size()) && h < int(state.convergence[s].size()) && state.convergence[s][h].checked) {
    const DofConvergence& c = state.convergence[s][h];
    text += tr("\nJ = %1: %2, J/2 = %3: %4 (moved %5%)")
                .arg(c.samples)
                .arg(QString::fromStdString(fmt_number(c.dof, 2)))
                .arg(c.samples_half)
                .arg(QString::fromStdString(fmt_number(c.dof_half, 2)))
                .arg(QString::fromStdString(fmt_number(100 * c.relative_change, 1)));
    if (c.unconverged()) text += tr("\nnot converged: use a larger J");
  }
  QToolTip::showText(e->globalPosition().toPoint(), text, grid_panel->plot());
}

// ---------------------------------------------------------------------------------------------
// (b) the selected head's eigenvalue spectrum with the lambda line

void DofView::Impl::build_spectrum_panel() {
  spectrum_panel = new PlotPanel(tr("Eigenvalue spectrum"), view);
  QCustomPlot* p = spectrum_panel->plot();
  spec_half = p->addGraph();
  spec_half->setName(tr("J/2 subset"));
  QColor half = series_color(4);
  spec_half->setPen(QPen(half, 1.2, Qt::DashLine));
  spec = p->addGraph();
  spec->setName(tr("J samples"));
  spec->setPen(QPen(series_color(0), 1.8));
  p->xAxis->setLabel(tr("index i"));
  p->yAxis->setScaleType(QCPAxis::stLogarithmic);
  QSharedPointer<QCPAxisTickerLog> log_ticker(new QCPAxisTickerLog);
  log_ticker->setSubTickCount(0);
  p->yAxis->setTicker(log_ticker);
  p->yAxis->setNumberFormat("eb");
  p->yAxis->setNumberPrecision(0);
  res_line = new QCPItemStraightLine(p);
  res_line->setObjectName("resolution line");
  res_line->setPen(QPen(series_color(7), 1, Qt::DotLine));
  ridge_line = new QCPItemStraightLine(p);
  ridge_line->setObjectName("lambda line");
  ridge_line->setPen(QPen(accent(), 2));
  ridge_text = boxed_label(p);
  ridge_text->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  ridge_text->position->setTypeY(QCPItemPosition::ptPlotCoords);
  ridge_text->setTextAlignment(Qt::AlignRight);
  p->legend->setVisible(true);
  p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignRight | Qt::AlignBottom);
  QFont lf = p->legend->font();
  lf.setPointSizeF(8);
  p->legend->setFont(lf);
  style_plot(p);
  spectrum_panel->set_csv([this]() -> std::string {
    const HeadSpectrum* sp = selected_spectrum();
    Table t;
    t.header = {"index", "eigenvalue", "half_eigenvalue", "log_scale"};
    if (!sp) return to_csv(t);
    const size_t n = std::max(sp->eigenvalues.size(), sp->half ? sp->half->eigenvalues.size() : size_t(0));
    for (size_t i = 0; i < n; ++i)
      t.add_row({std::to_string(i + 1), i < sp->eigenvalues.size() ? num(sp->eigenvalues[i]) : "",
                 sp->half && i < sp->half->eigenvalues.size() ? num(sp->half->eigenvalues[i]) : "", num(sp->log_scale)});
    return to_csv(t);
  });
}

void DofView::Impl::draw_spectrum() {
  QCustomPlot* p = spectrum_panel->plot();
  const HeadSpectrum* sp = selected_spectrum();
  if (!sp) {
    spec->data()->clear();
    spec_half->data()->clear();
    res_line->setVisible(false);
    return;
  }
  // Sigma's eigenvalues are mu = exp(log_scale) e. Plotted as mu while exp(log_scale) is a
  // moderate factor; past that (samples/none normalizers on large q/k norms, c ~ 770) mu does not
  // fit in a double, and the plot shows e in the full spectrum's units: everything drawn is then
  // divided by exp(c). The J/2 half has its own shift (its own sample's max norm), so it is
  // converted to the same units.
  const double c = sp->log_scale;
  const bool in_mu = std::abs(c) <= 300 && (!sp->half || std::abs(sp->half->log_scale) <= 300);
  plot_log_offset = in_mu ? 0.0 : c;
  auto positive = [this](const HeadSpectrum& h, QVector<double>* x, QVector<double>* y) {
    const double factor = std::exp(h.log_scale - plot_log_offset);
    for (size_t i = 0; i < h.eigenvalues.size(); ++i)
      if (h.eigenvalues[i] > 0) {
        x->push_back(double(i + 1));
        y->push_back(h.eigenvalues[i] * factor);
      }
  };
  QVector<double> x, y, hx, hy;
  positive(*sp, &x, &y);
  if (sp->half) positive(*sp->half, &hx, &hy);
  spec->setData(x, y, true);
  spec_half->setData(hx, hy, true);
  spec_half->setVisible(!hx.isEmpty());
  spec_half->setName(tr("J/2 = %1").arg(sp->half ? sp->half->samples : 0));
  spec->setName(sp->exact ? tr("J = %1").arg(sp->samples) : tr("top %1 of J = %2").arg(sp->eigenvalues.size()).arg(sp->samples));
  if (in_mu)
    p->yAxis->setLabel(tr("eigenvalue μᵢ of Σ (log scale)"));
  else
    p->yAxis->setLabel(tr("μᵢ·exp(−c), c = %1 (log scale)").arg(c, 0, 'f', 1));
  p->xAxis->setRange(0, std::max<double>(2, double(std::max(x.size(), hx.size())) + 1));
  const double res = sp->resolution * std::exp(c - plot_log_offset);
  res_line->setVisible(res > 0);
  res_line->point1->setCoords(0, res);
  res_line->point2->setCoords(1, res);
}

void DofView::Impl::draw_ridge() {
  QCustomPlot* p = spectrum_panel->plot();
  const HeadSpectrum* sp = selected_spectrum();
  if (!sp || !has_state) {
    ridge_line->setVisible(false);
    ridge_text->setVisible(false);
    return;
  }
  // Counted as core counts (e against the shifted ridge); drawn in the plot's units.
  const double shifted = shifted_ridge(state.lambda, sp->log_scale);
  const double t = shifted_ridge(state.lambda, plot_log_offset);
  int64_t above = 0;
  for (double e : sp->eigenvalues) above += e > shifted;
  double lo = INFINITY, hi = 0;
  for (const QCPGraph* g : {spec, spec_half})
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
      lo = std::min(lo, it->value), hi = std::max(hi, it->value);
  ridge_line->setVisible(t > 0 && shifted > 0);
  ridge_line->point1->setCoords(0, t);
  ridge_line->point2->setCoords(1, t);
  ridge_text->setVisible(true);
  const QString what = sp->exact ? tr("%1 of %2 eigenvalues above λ").arg(above).arg(sp->eigenvalues.size())
                                 : tr("%1 of the top %2 above λ").arg(above).arg(sp->eigenvalues.size());
  ridge_text->setText(shifted > 0 ? tr("λ = %1\n%2").arg(lambda_short(state.lambda), what)
                            : tr("λ·exp(−c) underflows:\nevery resolved eigenvalue counts 1"));
  if (t > 0) lo = std::min(lo, t), hi = std::max(hi, t);
  if (!(hi > 0)) lo = 1e-3, hi = 1;
  if (!std::isfinite(lo)) lo = hi / 1e3;
  lo /= 3;
  hi *= 3;
  p->yAxis->setRange(lo, hi);
  // The label rides on the line at the right: above it, or below when the line is near the top.
  const double at = t > 0 ? t : std::sqrt(lo * hi);
  const bool near_top = std::log(hi / at) < 0.25 * std::log(hi / lo);
  ridge_text->position->setCoords(0.98, at);
  ridge_text->setPositionAlignment(Qt::AlignRight | (near_top ? Qt::AlignTop : Qt::AlignBottom));
}

// ---------------------------------------------------------------------------------------------
// (c) DoF against lambda

void DofView::Impl::build_curve_panel() {
  curve_panel = new PlotPanel(tr("DoF against λ"), view);
  QCustomPlot* p = curve_panel->plot();
  curve_layer = p->addGraph();
  // Wide and under the head's curve: where the selected head is the layer's maximum, the two
  // coincide and the layer's curve shows as a halo around it.
  QColor layer_color = series_color(1);
  layer_color.setAlpha(170);
  curve_layer->setPen(QPen(layer_color, 4.5));
  curve_half = p->addGraph();
  curve_half->setPen(QPen(series_color(4), 1.2, Qt::DashLine));
  curve_head = p->addGraph();
  curve_head->setPen(QPen(series_color(0), 2));
  p->xAxis->setLabel(tr("λ (log₂ scale)"));
  p->yAxis->setLabel(tr("DoF"));
  QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
  for (int e = -12; e <= 0; e += 2) ticks->addTick(e, QStringLiteral("2^%1").arg(e));
  p->xAxis->setTicker(ticks);
  p->xAxis->setRange(-12.3, 0.3);
  curve_line = new QCPItemStraightLine(p);
  curve_line->setObjectName("lambda line");
  curve_line->setPen(QPen(accent(), 2));
  curve_text = boxed_label(p);
  // The legend in one line under the plot: inside, it would sit on the curves or the DoF label
  // wherever lambda is.
  p->legend->setVisible(true);
  QFont lf = p->legend->font();
  lf.setPointSizeF(8);
  p->legend->setFont(lf);
  auto* below = new QCPLayoutGrid;
  p->plotLayout()->addElement(1, 0, below);
  p->plotLayout()->setRowStretchFactor(1, 0.001);
  below->setMargins(QMargins(4, 0, 4, 2));
  p->axisRect()->insetLayout()->take(p->legend);
  below->addElement(0, 0, p->legend);
  p->legend->setFillOrder(QCPLegend::foColumnsFirst);
  p->legend->setMargins(QMargins(4, 1, 4, 1));
  style_plot(p);
  curve_panel->set_csv([this]() -> std::string {
    Table t;
    t.header = {"log2_lambda", "lambda", "dof_head", "dof_head_half", "dof_layer_max"};
    const auto* a = curve_head->data().data();
    const auto* b = curve_half->data().data();
    const auto* c = curve_layer->data().data();
    for (int i = 0; i < a->size(); ++i) {
      const double x = a->at(i)->key;
      t.add_row({num(x), num(std::exp2(x)), num(a->at(i)->value), i < b->size() ? num(b->at(i)->value) : "",
                 i < c->size() ? num(c->at(i)->value) : ""});
    }
    return to_csv(t);
  });
}

// Presentation of the kept spectra: core's dof_at at every slider position (49 x O(J) per head).
void DofView::Impl::draw_curve() {
  QCustomPlot* p = curve_panel->plot();
  const HeadSpectrum* sp = selected_spectrum();
  curve_head->data()->clear();
  curve_half->data()->clear();
  curve_layer->data()->clear();
  if (!sp) return;
  QVector<double> x(kCurvePoints), yh(kCurvePoints), yhalf, yl(kCurvePoints, 0.0);
  double hi = 0;
  for (int i = 0; i < kCurvePoints; ++i) {
    const double lam = lambda_of_position(kLambdaMinPos + i);
    x[i] = (kLambdaMinPos + i) / 4.0;
    yh[i] = dof_at(*sp, lam).value;
    if (sp->half) yhalf.push_back(dof_at(*sp->half, lam).value);
    for (int h = 0; h < spectra->num_heads; ++h) yl[i] = std::max(yl[i], dof_at(spectra->head(sel_layer, h), lam).value);
    hi = std::max({hi, yh[i], yl[i], yhalf.isEmpty() ? 0.0 : yhalf.back()});
  }
  curve_head->setData(x, yh, true);
  // Short names: the panel's title says which layer and head.
  curve_head->setName(tr("head (J = %1)").arg(sp->samples));
  if (!yhalf.isEmpty()) curve_half->setData(x, yhalf, true);
  curve_half->setVisible(!yhalf.isEmpty());
  if (!yhalf.isEmpty()) curve_half->setName(tr("head, J/2 = %1").arg(sp->half->samples));
  curve_layer->setData(x, yl, true);
  curve_layer->setName(tr("layer max over heads"));
  // The legend reads head, its J/2 check, then the layer (drawn in the other order).
  for (QCPGraph* g : {curve_head, curve_half, curve_layer}) g->removeFromLegend();
  curve_head->addToLegend();
  if (!yhalf.isEmpty()) curve_half->addToLegend();
  curve_layer->addToLegend();
  p->yAxis->setRange(0, hi > 0 ? hi * 1.08 : 1);
}

void DofView::Impl::draw_curve_line() {
  const bool on = has_state;
  curve_line->setVisible(on);
  curve_text->setVisible(on && selected_spectrum());
  if (!on) return;
  const double x = std::log2(state.lambda);
  curve_line->point1->setCoords(x, 0);
  curve_line->point2->setCoords(x, 1);
  if (sel_layer < int(state.head_dof.size()) && sel_head < int(state.head_dof[sel_layer].size())) {
    const double dof = state.head_dof[sel_layer][sel_head].value;
    curve_text->setText(tr("DoF %1").arg(QString::fromStdString(fmt_number(dof, 1))));
    // Where the line meets the head's curve. The curves fall as lambda grows, so the free side is
    // above the curve right of the line and below it left of the line: right and above, or (near
    // the right edge) left and below; flipped vertically where the plot's top or bottom would cut it.
    const bool left = x > -3;
    const double top = curve_panel->plot()->yAxis->range().upper;
    bool above = !left;
    if (above && dof > 0.85 * top) above = false;
    if (!above && dof < 0.15 * top) above = true;
    curve_text->position->setCoords(x + (left ? -0.15 : 0.15), dof);
    curve_text->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | (above ? Qt::AlignBottom : Qt::AlignTop));
  }
}

// ---------------------------------------------------------------------------------------------
// (d) feature dimension per layer (Table 1) with the budget and the mean cost

void DofView::Impl::build_alloc_panel() {
  alloc_panel = new PlotPanel(tr("Feature dimension per layer (Table 1)"), view);
  QCustomPlot* p = alloc_panel->plot();
  bars = new QCPBars(p->xAxis, p->yAxis);
  bars->setWidth(0.7);
  QColor fill = series_color(0);
  bars->setPen(QPen(fill.darker(130), 1));
  bars->setBrush(fill);
  head_dots = p->addGraph();
  head_dots->setLineStyle(QCPGraph::lsNone);
  head_dots->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, QPen(Qt::black, 1), series_color(1), 6));
  head_dots->setName(tr("per-head M"));
  p->xAxis->setLabel(tr("layer"));
  p->yAxis->setLabel(tr("feature dimension M"));
  p->xAxis->grid()->setVisible(false);
  p->xAxis->setSubTicks(false);
  budget_line = new QCPItemStraightLine(p);
  budget_line->setPen(QPen(accent(), 2, Qt::DashLine));
  clip_line = new QCPItemStraightLine(p);
  clip_line->setPen(QPen(series_color(7), 1.5, Qt::DotLine));
  // The two lines are named on the right axis, outside the plot: a label inside would sit on a
  // bar's value wherever a layer's dimension is near the budget (the usual case).
  line_ticks.reset(new QCPAxisTickerText);
  p->yAxis2->setVisible(true);
  p->yAxis2->setTicker(line_ticks);
  p->yAxis2->setSubTicks(false);
  p->yAxis2->grid()->setVisible(false);
  p->yAxis2->setTickLength(0, 4);
  connect(p->yAxis, qOverload<const QCPRange&>(&QCPAxis::rangeChanged), p->yAxis2, qOverload<const QCPRange&>(&QCPAxis::setRange));
  cost_text = new QCPTextElement(p, QString());
  QFont cf = cost_text->font();
  cf.setPointSizeF(9.5);
  cf.setBold(true);
  cost_text->setFont(cf);
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, cost_text);
  p->legend->setVisible(false);
  style_plot(p);
  alloc_panel->set_csv([this]() -> std::string {
    // As `attnscope allocate --csv` prints it: one row per head.
    Table t;
    t.header = {"layer", "head", "dof", "dim"};
    if (!has_state) return to_csv(t);
    const auto& a = state.allocation;
    for (size_t s = 0; s < a.dims.size(); ++s)
      for (size_t h = 0; h < a.dims[s].size(); ++h)
        t.add_row({std::to_string(s), std::to_string(h),
                   s < state.head_dof.size() && h < state.head_dof[s].size() ? fmt_number(state.head_dof[s][h].value, 6) : "",
                   std::to_string(a.dims[s][h])});
    return to_csv(t);
  });
}

void DofView::Impl::ensure_bars(int s_count) {
  if (s_count == bars_layers) return;
  QCustomPlot* p = alloc_panel->plot();
  for (auto* t : bar_texts) p->removeItem(t);
  bar_texts.clear();
  for (int s = 0; s < s_count; ++s) {
    QCPItemText* t = boxed_label(p);
    t->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
    t->setClipToAxisRect(false);
    bar_texts.push_back(t);
  }
  p->xAxis->setTicker(index_ticker(s_count));
  p->xAxis->setRange(-0.6, std::max(s_count, 1) - 0.4);
  bars_layers = s_count;
}

void DofView::Impl::draw_bars() {
  QCustomPlot* p = alloc_panel->plot();
  const Allocation& a = state.allocation;
  const std::vector<int64_t> dims = a.layer_dims();
  ensure_bars(int(dims.size()));
  QVector<double> x, y, hx, hy;
  double top = double(state.allocation.budget);
  for (size_t s = 0; s < dims.size(); ++s) {
    x.push_back(double(s));
    y.push_back(double(dims[s]));
    top = std::max(top, double(dims[s]));
  }
  bars->setData(x, y, true);
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
  head_dots->setData(hx, hy, false);
  head_dots->setVisible(per_head);
  bars->setName(per_head ? tr("layer max") : tr("M per layer"));
  // Room above the tallest bar for its value label.
  p->yAxis->setRange(0, top * 1.2 + 1);
  for (size_t s = 0; s < dims.size(); ++s) {
    bar_texts[s]->position->setCoords(double(s), double(dims[s]));
    bar_texts[s]->setText(QString::number(dims[s]));
  }
  budget_line->point1->setCoords(0, double(state.allocation.budget));
  budget_line->point2->setCoords(1, double(state.allocation.budget));
  const bool clip = a.strategy == AllocStrategy::DofClip && spectra;
  clip_line->setVisible(clip);
  line_ticks->clear();
  if (clip) {
    const double d = double(spectra->head_dim);
    clip_line->point1->setCoords(0, d);
    clip_line->point2->setCoords(1, d);
    p->yAxis->setRange(0, std::max(top, d) * 1.2 + 1);
    // One label where the two lines (nearly) meet, so the two never print over each other.
    if (std::abs(d - double(state.allocation.budget)) < 0.08 * p->yAxis->range().upper) {
      line_ticks->addTick(double(state.allocation.budget), tr("budget %1\nclip d = %2").arg(state.allocation.budget).arg(spectra->head_dim));
    } else {
      line_ticks->addTick(double(state.allocation.budget), tr("budget %1").arg(state.allocation.budget));
      line_ticks->addTick(d, tr("clip d = %1").arg(spectra->head_dim));
    }
  } else {
    line_ticks->addTick(double(state.allocation.budget), tr("budget %1").arg(state.allocation.budget));
  }
  p->yAxis2->setRange(p->yAxis->range());
  cost_text->setText(view->mean_cost_text() + tr("   (%1, λ = %2)").arg(QString(alloc_strategy_name(a.strategy)), lambda_short(state.lambda)) +
                     (per_head ? tr("\nbars: layer max; dots: each head") : QString()));
}

// ---------------------------------------------------------------------------------------------

void DofView::Impl::update_titles() {
  const bool sel = selected_spectrum() != nullptr;
  const QString which = sel ? tr(": layer %1, head %2").arg(sel_layer).arg(sel_head) : QString();
  spectrum_panel->set_title(tr("Eigenvalue spectrum") + which);
  curve_panel->set_title(tr("DoF against λ") + which);
}

void DofView::Impl::clear() {
  has_state = false;
  state = DofAllocation{};
  ensure_grid(0, 0);
  sel_outer->setVisible(false);
  sel_inner->setVisible(false);
  draw_spectrum();
  draw_ridge();
  draw_curve();
  draw_curve_line();
  bars->data()->clear();
  head_dots->data()->clear();
  ensure_bars(0);
  cost_text->setText(QString());
  for (PlotPanel* p : {grid_panel, spectrum_panel, curve_panel, alloc_panel}) p->plot()->replot();
}

void DofView::Impl::table_dialog(DofTable which) {
  static const char* names[] = {"dof_per_head", "feature_dims", "per_head_dims"};
  const QString path = QFileDialog::getSaveFileName(
      view, tr("Export table"), QString::fromLatin1(names[int(which)]) + ".md",
      tr("Markdown (*.md);;LaTeX (*.tex);;CSV (*.csv)"));
  if (path.isEmpty()) return;
  try {
    view->export_table(which, path);
  } catch (const std::exception& e) {
    QMessageBox::critical(view, tr("Export failed"), QString::fromStdString(e.what()));
  }
}

// ---------------------------------------------------------------------------------------------

DofView::DofView(QWidget* parent) : QWidget(parent), d_(new Impl(this)) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  auto* controls = new QGridLayout;
  controls->setHorizontalSpacing(8);

  d_->lambda = new QSlider(Qt::Horizontal, this);
  d_->lambda->setRange(kLambdaMinPos, kLambdaMaxPos);
  d_->lambda->setSingleStep(1);
  d_->lambda->setPageStep(4);
  d_->lambda->setTickPosition(QSlider::TicksBelow);
  d_->lambda->setTickInterval(4);
  d_->lambda->setValue(-32);
  d_->lambda->setToolTip(tr("Tolerance λ of DoF(λ) = Σ μᵢ / (μᵢ + λ), on a log₂ scale from 2^-12 to 2^0 in quarter steps"));
  d_->lambda_label = new QLabel(lambda_label_text(-32), this);
  d_->lambda_label->setMinimumWidth(d_->lambda_label->fontMetrics().horizontalAdvance(lambda_label_text(-47)) + 8);
  controls->addWidget(new QLabel(tr("Lambda"), this), 0, 0);
  controls->addWidget(d_->lambda, 0, 1);
  controls->addWidget(d_->lambda_label, 0, 2);

  d_->budget = new QSlider(Qt::Horizontal, this);
  d_->budget->setRange(1, 256);
  d_->budget->setValue(64);
  d_->budget->setPageStep(8);
  d_->budget->setToolTip(tr("Budget C: the mean feature dimension per head"));
  d_->budget_box = new QSpinBox(this);
  d_->budget_box->setRange(1, 256);
  d_->budget_box->setValue(64);
  d_->budget_box->setToolTip(d_->budget->toolTip());
  controls->addWidget(new QLabel(tr("Budget"), this), 1, 0);
  controls->addWidget(d_->budget, 1, 1);
  controls->addWidget(d_->budget_box, 1, 2);

  d_->strategy = new QComboBox(this);
  for (const std::string& n : alloc_strategy_names()) d_->strategy->addItem(QString::fromStdString(n));
  d_->strategy->setCurrentIndex(int(AllocStrategy::Dof));
  d_->strategy->setItemData(0, tr("M = C in every layer"), Qt::ToolTipRole);
  d_->strategy->setItemData(1, tr("Algorithm 1: M proportional to the layer's DoF (max over heads)"), Qt::ToolTipRole);
  d_->strategy->setItemData(2, tr("dof, each layer clamped to at most the head dimension d (cost may fall below C)"), Qt::ToolTipRole);
  d_->strategy->setItemData(3, tr("the same total budget spread over the heads by their own DoF"), Qt::ToolTipRole);
  d_->strategy->setToolTip(tr("Allocation strategy"));
  controls->addWidget(new QLabel(tr("Strategy"), this), 0, 3);
  controls->addWidget(d_->strategy, 0, 4);

  d_->table_button = new QToolButton(this);
  d_->table_button->setText(tr("Table…"));
  d_->table_button->setToolTip(tr("Export Table 1 or Table 2 as Markdown, LaTeX or CSV"));
  d_->table_button->setPopupMode(QToolButton::InstantPopup);
  auto* menu = new QMenu(d_->table_button);
  menu->addAction(tr("DoF per head (Table 2)…"), d_, [this] { d_->table_dialog(DofTable::DofGrid); });
  menu->addAction(tr("Feature dimension per layer (Table 1)…"), d_, [this] { d_->table_dialog(DofTable::Allocation); });
  d_->head_dims_action = menu->addAction(tr("Feature dimension per head (per-head)…"), d_, [this] { d_->table_dialog(DofTable::HeadDims); });
  d_->head_dims_action->setEnabled(false);
  d_->table_button->setMenu(menu);
  controls->addWidget(d_->table_button, 1, 4, Qt::AlignLeft);
  controls->setColumnStretch(1, 1);
  layout->addLayout(controls);

  d_->build_grid_panel();
  d_->build_spectrum_panel();
  d_->build_curve_panel();
  d_->build_alloc_panel();
  auto* grid = new QGridLayout;
  grid->setSpacing(6);
  grid->addWidget(d_->grid_panel, 0, 0);
  grid->addWidget(d_->alloc_panel, 0, 1);
  grid->addWidget(d_->spectrum_panel, 1, 0);
  grid->addWidget(d_->curve_panel, 1, 1);
  layout->addLayout(grid, 1);

  auto emit_settings = [this] {
    if (!d_->quiet) emit settingsChanged(lambda(), budget(), strategy());
  };
  connect(d_->lambda, &QSlider::valueChanged, this, [this, emit_settings](int pos) {
    d_->lambda_label->setText(lambda_label_text(pos));
    emit_settings();
  });
  connect(d_->budget, &QSlider::valueChanged, this, [this, emit_settings](int v) {
    const QSignalBlocker block(d_->budget_box);
    d_->budget_box->setValue(v);
    emit_settings();
  });
  // The box moves the slider, whose valueChanged emits (once).
  connect(d_->budget_box, qOverload<int>(&QSpinBox::valueChanged), this, [this](int v) { d_->budget->setValue(v); });
  connect(d_->strategy, qOverload<int>(&QComboBox::currentIndexChanged), this, [this, emit_settings](int) {
    d_->head_dims_action->setEnabled(strategy() == AllocStrategy::PerHead);
    emit_settings();
  });
}

void DofView::set_spectra(std::shared_ptr<const DofSpectra> spectra) {
  d_->spectra = std::move(spectra);
  d_->drawn_lambda = NAN;
  if (!d_->spectra) {
    d_->clear();
    return;
  }
  const int max_budget = int(std::max<int64_t>(256, 4 * d_->spectra->head_dim));
  {
    // Widening the range keeps the value; narrowing may move it, which is no user action.
    const bool was = d_->quiet;
    d_->quiet = true;
    d_->budget->setMaximum(std::max(max_budget, d_->budget->value()));
    d_->budget_box->setMaximum(d_->budget->maximum());
    d_->quiet = was;
  }
  if (d_->sel_layer >= d_->spectra->num_layers || d_->sel_head >= d_->spectra->num_heads) d_->sel_layer = d_->sel_head = 0;
  d_->update_titles();
  d_->draw_spectrum();
  d_->draw_curve();
  d_->draw_ridge();
  d_->draw_curve_line();
  d_->spectrum_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  d_->curve_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
}

void DofView::show_state(const DofAllocation& state) {
  d_->state = state;
  d_->has_state = true;
  const int S = int(state.head_dof.size());
  const int H = S ? int(state.head_dof.front().size()) : 0;
  const bool reshaped = S != d_->S || H != d_->H;
  d_->ensure_grid(S, H);
  d_->head_dims_action->setEnabled(state.allocation.strategy == AllocStrategy::PerHead);
  // A budget or strategy move changes only the allocation: the DoF panels stay as drawn.
  if (reshaped || state.lambda != d_->drawn_lambda) {
    d_->draw_grid();
    d_->draw_selection();
    d_->update_text_visibility();
    d_->draw_ridge();
    d_->draw_curve_line();
    d_->drawn_lambda = state.lambda;
    d_->grid_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
    d_->spectrum_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
    d_->curve_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  }
  d_->draw_bars();
  d_->alloc_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
}

void DofView::select(int layer, int head) {
  if (layer < 0 || head < 0) return;
  d_->sel_layer = layer;
  d_->sel_head = head;
  d_->update_titles();
  d_->draw_selection();
  d_->draw_spectrum();
  d_->draw_ridge();
  d_->draw_curve();
  d_->draw_curve_line();
  d_->grid_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  d_->spectrum_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
  d_->curve_panel->plot()->replot(QCustomPlot::rpQueuedReplot);
}

double DofView::lambda() const { return lambda_of_position(d_->lambda->value()); }
int64_t DofView::budget() const { return d_->budget->value(); }
AllocStrategy DofView::strategy() const {
  return parse_alloc_strategy(d_->strategy->currentText().toStdString());
}

void DofView::set_controls(double lambda, int64_t budget, AllocStrategy strategy) {
  const bool was = d_->quiet;
  d_->quiet = true;
  d_->lambda->setValue(position_of_lambda(lambda));
  const int b = int(std::clamp<int64_t>(budget, 1, 1 << 20));
  if (b > d_->budget->maximum()) {
    d_->budget->setMaximum(b);
    d_->budget_box->setMaximum(b);
  }
  d_->budget->setValue(b);
  d_->strategy->setCurrentIndex(int(strategy));
  d_->quiet = was;
}

void DofView::set_commands(const QString& dof_command, const QString& allocate_command) {
  d_->dof_command = dof_command;
  d_->allocate_command = allocate_command;
  d_->grid_panel->set_command(dof_command);
  d_->spectrum_panel->set_command(dof_command);
  d_->curve_panel->set_command(dof_command);
  d_->alloc_panel->set_command(allocate_command);
}

QSlider* DofView::lambda_slider() const { return d_->lambda; }
QSlider* DofView::budget_slider() const { return d_->budget; }
QComboBox* DofView::strategy_box() const { return d_->strategy; }
QLabel* DofView::lambda_label() const { return d_->lambda_label; }
QSpinBox* DofView::budget_box() const { return d_->budget_box; }
std::vector<PlotPanel*> DofView::panels() const {
  return {d_->grid_panel, d_->spectrum_panel, d_->curve_panel, d_->alloc_panel};
}

std::vector<double> DofView::drawn_layer_dims() const {
  std::vector<double> out;
  for (auto it = d_->bars->data()->constBegin(); it != d_->bars->data()->constEnd(); ++it) out.push_back(it->value);
  return out;
}

QString DofView::mean_cost_text() const {
  if (!d_->has_state) return QString();
  return tr("mean cost %1 of budget %2")
      .arg(QString::fromStdString(fmt_number(d_->state.allocation.mean_cost, 1)))
      .arg(d_->state.allocation.budget);
}

QString DofView::cell_text(int layer, int head) const {
  if (layer < 0 || head < 0 || layer >= d_->S || head >= d_->H) return QString();
  return d_->cell_texts[size_t(layer) * d_->H + head]->text();
}

int DofView::selected_layer() const { return d_->sel_layer; }
int DofView::selected_head() const { return d_->sel_head; }

Table DofView::table(DofTable which) const {
  if (!d_->has_state) return Table{};
  switch (which) {
    case DofTable::DofGrid: return dof_grid_table(d_->state.head_dof, d_->state.lambda, d_->state.convergence);
    case DofTable::Allocation: return allocation_table(d_->model_name(), {d_->state.allocation});
    case DofTable::HeadDims: return head_dims_table(d_->state.allocation);
  }
  return Table{};
}

void DofView::export_table(DofTable which, const QString& path) const {
  const std::string p = path.toStdString();
  if (!d_->has_state) fail(p, "no DoF or allocation is shown yet");
  const Table t = table(which);
  if (path.endsWith(".csv", Qt::CaseInsensitive)) write_text_file(p, to_csv(t));
  else if (path.endsWith(".md", Qt::CaseInsensitive)) write_text_file(p, to_markdown(t));
  else if (path.endsWith(".tex", Qt::CaseInsensitive)) write_text_file(p, to_latex(t));
  else fail(p, "unknown table format: use .csv, .md or .tex");
}

}  // namespace attnscope::views

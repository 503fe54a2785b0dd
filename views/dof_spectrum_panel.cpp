#include "dof_spectrum_panel.h"

#include <cmath>
#include <qcustomplot.h>

#include "attnscope/attention/gram.h"
#include "attnscope/base/table.h"
#include "attnscope/workbench/view_data.h"
#include "dof_common.h"

namespace attnscope::views {

using namespace dof;

DofSpectrumPanel::DofSpectrumPanel(QWidget* parent) : PlotPanel(tr("Eigenvalue spectrum"), parent) {
  QCustomPlot* p = plot();
  spec_half_ = p->addGraph();
  spec_half_->setName(tr("J/2 subset"));
  spec_half_->setPen(QPen(series_color(4), 1.2, Qt::DashLine));
  spec_ = p->addGraph();
  spec_->setName(tr("J samples"));
  spec_->setPen(QPen(series_color(0), 1.8));
  p->xAxis->setLabel(tr("index i"));
  p->yAxis->setScaleType(QCPAxis::stLogarithmic);
  QSharedPointer<QCPAxisTickerLog> log_ticker(new QCPAxisTickerLog);
  log_ticker->setSubTickCount(0);
  p->yAxis->setTicker(log_ticker);
  p->yAxis->setNumberFormat("eb");
  p->yAxis->setNumberPrecision(0);
  res_line_ = new QCPItemStraightLine(p);
  res_line_->setObjectName("resolution line");
  res_line_->setPen(QPen(series_color(7), 1, Qt::DotLine));
  ridge_line_ = new QCPItemStraightLine(p);
  ridge_line_->setObjectName("lambda line");
  ridge_line_->setPen(QPen(accent(), 2));
  ridge_text_ = boxed_label(p);
  ridge_text_->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
  ridge_text_->position->setTypeY(QCPItemPosition::ptPlotCoords);
  ridge_text_->setTextAlignment(Qt::AlignRight);
  note_ = plot_note(p);
  p->legend->setVisible(true);
  p->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignRight | Qt::AlignBottom);
  QFont lf = p->legend->font();
  lf.setPointSizeF(8);
  p->legend->setFont(lf);
  restyle();
  set_csv([this]() -> std::string {
    const HeadSpectrum* sp = spectrum_;
    Table t;
    t.header = {"index", "eigenvalue", "half_eigenvalue", "log_scale"};
    if (!sp) return to_csv(t);
    const size_t n = std::max(sp->eigenvalues.size(), sp->half ? sp->half->eigenvalues.size() : size_t(0));
    for (size_t i = 0; i < n; ++i)
      t.add_row({std::to_string(i + 1), i < sp->eigenvalues.size() ? num(sp->eigenvalues[i]) : "",
                 sp->half && i < sp->half->eigenvalues.size() ? num(sp->half->eigenvalues[i]) : "", num(sp->log_scale)});
    return to_csv(t);
  });
  show_spectrum(nullptr, {});
}

void DofSpectrumPanel::show_note(const QString& text) {
  note_->setText(text);
  note_->setVisible(!text.isEmpty());
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

void DofSpectrumPanel::show_spectrum(const HeadSpectrum* sp, const QString& which) {
  spectrum_ = sp;
  set_title(tr("Eigenvalue spectrum") + (which.isEmpty() ? QString() : ": " + which));
  QCustomPlot* p = plot();
  if (!sp) {
    spec_->data()->clear();
    spec_half_->data()->clear();
    res_line_->setVisible(false);
    ridge_line_->setVisible(false);
    ridge_text_->setVisible(false);
    p->legend->setVisible(false);
    p->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  note_->setVisible(false);
  p->legend->setVisible(true);
  // Sigma's eigenvalues are mu = exp(log_scale) e. Plotted as mu while exp(log_scale) is a
  // moderate factor; past that (samples/none normalizers on large q/k norms, c ~ 770) mu does not
  // fit in a double, and the plot shows e in the full spectrum's units: everything drawn is then
  // divided by exp(c). The J/2 half has its own shift (its own sample's max norm), so it is
  // converted to the same units.
  const double c = sp->log_scale;
  const bool in_mu = std::abs(c) <= 300 && (!sp->half || std::abs(sp->half->log_scale) <= 300);
  plot_log_offset_ = in_mu ? 0.0 : c;
  auto positive = [this](const HeadSpectrum& h, QVector<double>* x, QVector<double>* y) {
    const double factor = std::exp(h.log_scale - plot_log_offset_);
    for (size_t i = 0; i < h.eigenvalues.size(); ++i)
      if (h.eigenvalues[i] > 0) {
        x->push_back(double(i + 1));
        y->push_back(h.eigenvalues[i] * factor);
      }
  };
  QVector<double> x, y, hx, hy;
  positive(*sp, &x, &y);
  if (sp->half) positive(*sp->half, &hx, &hy);
  spec_->setData(x, y, true);
  spec_half_->setData(hx, hy, true);
  spec_half_->setVisible(!hx.isEmpty());
  spec_half_->setName(tr("J/2 = %1").arg(sp->half ? sp->half->samples : 0));
  spec_->setName(sp->exact ? tr("J = %1").arg(sp->samples) : tr("top %1 of J = %2").arg(sp->eigenvalues.size()).arg(sp->samples));
  if (in_mu)
    p->yAxis->setLabel(tr("eigenvalue μᵢ of Σ (log scale)"));
  else
    p->yAxis->setLabel(tr("μᵢ·exp(−c), c = %1 (log scale)").arg(c, 0, 'f', 1));
  p->xAxis->setRange(0, std::max<double>(2, double(std::max(x.size(), hx.size())) + 1));
  const double res = sp->resolution * std::exp(c - plot_log_offset_);
  res_line_->setVisible(res > 0);
  res_line_->point1->setCoords(0, res);
  res_line_->point2->setCoords(1, res);
  p->replot(QCustomPlot::rpQueuedReplot);
}

void DofSpectrumPanel::show_lambda(std::optional<double> lambda) {
  QCustomPlot* p = plot();
  const HeadSpectrum* sp = spectrum_;
  if (!sp || !lambda) {
    ridge_line_->setVisible(false);
    ridge_text_->setVisible(false);
    p->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  // Counted as core counts (e against the shifted ridge); drawn in the plot's units.
  const double shifted = shifted_ridge(*lambda, sp->log_scale);
  const double t = shifted_ridge(*lambda, plot_log_offset_);
  const int64_t above = eigenvalues_above(*sp, *lambda);
  double lo = INFINITY, hi = 0;
  for (const QCPGraph* g : {spec_, spec_half_})
    for (auto it = g->data()->constBegin(); it != g->data()->constEnd(); ++it)
      lo = std::min(lo, it->value), hi = std::max(hi, it->value);
  ridge_line_->setVisible(t > 0 && shifted > 0);
  ridge_line_->point1->setCoords(0, t);
  ridge_line_->point2->setCoords(1, t);
  ridge_text_->setVisible(true);
  const QString what = sp->exact ? tr("%1 of %2 eigenvalues above λ").arg(above).arg(sp->eigenvalues.size())
                                 : tr("%1 of the top %2 above λ").arg(above).arg(sp->eigenvalues.size());
  ridge_text_->setText(shifted > 0 ? tr("λ = %1\n%2").arg(lambda_short(*lambda), what)
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
  ridge_text_->position->setCoords(0.98, at);
  ridge_text_->setPositionAlignment(Qt::AlignRight | (near_top ? Qt::AlignTop : Qt::AlignBottom));
  p->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace attnscope::views

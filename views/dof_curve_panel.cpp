#include "dof_curve_panel.h"

#include <algorithm>
#include <cmath>
#include <qcustomplot.h>

#include "attnscope/base/table.h"
#include "attnscope/workbench/view_data.h"
#include "dof_common.h"

namespace attnscope::views {

using namespace dof;

DofCurvePanel::DofCurvePanel(QWidget* parent) : PlotPanel(tr("DoF against λ"), parent) {
  QCustomPlot* p = plot();
  layer_ = p->addGraph();
  // Wide and under the head's curve: where the selected head is the layer's maximum, the two
  // coincide and the layer's curve shows as a halo around it.
  QColor layer_color = series_color(1);
  layer_color.setAlpha(170);
  layer_->setPen(QPen(layer_color, 4.5));
  layer_->setName(tr("layer max over heads"));
  half_ = p->addGraph();
  half_->setPen(QPen(series_color(4), 1.2, Qt::DashLine));
  half_->setName(tr("head, J/2"));
  head_ = p->addGraph();
  head_->setPen(QPen(series_color(0), 2));
  head_->setName(tr("head"));
  p->xAxis->setLabel(tr("λ (log₂ scale)"));
  p->yAxis->setLabel(tr("DoF"));
  QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
  for (int e = -12; e <= 0; e += 2) ticks->addTick(e, QStringLiteral("2^%1").arg(e));
  p->xAxis->setTicker(ticks);
  p->xAxis->setRange(-12.3, 0.3);
  line_ = new QCPItemStraightLine(p);
  line_->setObjectName("lambda line");
  line_->setPen(QPen(accent(), 2));
  text_ = boxed_label(p);
  note_ = plot_note(p);
  // The legend in one line under the plot: inside, it would sit on the curves or the DoF label
  // wherever lambda is.
  p->legend->setVisible(false);
  legend_below(p);
  restyle();
  set_csv([this]() -> std::string {
    Table t;
    t.header = {"log2_lambda", "lambda", "dof_head", "dof_head_half", "dof_layer_max"};
    const auto* a = head_->data().data();
    const auto* b = half_->data().data();
    const auto* c = layer_->data().data();
    for (int i = 0; i < a->size(); ++i) {
      const double x = a->at(i)->key;
      t.add_row({num(x), num(std::exp2(x)), num(a->at(i)->value), i < b->size() ? num(b->at(i)->value) : "",
                 i < c->size() ? num(c->at(i)->value) : ""});
    }
    return to_csv(t);
  });
  show_lambda(std::nullopt, std::nullopt);
}

void DofCurvePanel::show_note(const QString& text) {
  note_->setText(text);
  note_->setVisible(!text.isEmpty());
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

void DofCurvePanel::show_head(const DofSpectra* spectra, int layer, int head, const QString& which) {
  QCustomPlot* p = plot();
  set_title(tr("DoF against λ") + (which.isEmpty() ? QString() : ": " + which));
  head_->data()->clear();
  half_->data()->clear();
  layer_->data()->clear();
  has_curve_ = spectra && layer >= 0 && head >= 0 && layer < spectra->num_layers && head < spectra->num_heads;
  p->legend->setVisible(has_curve_);
  if (!has_curve_) {
    p->replot(QCustomPlot::rpQueuedReplot);
    return;
  }
  note_->setVisible(false);
  // The slider's positions: the curve is what the slider can show.
  std::vector<double> lambdas;
  QVector<double> x;
  for (int i = 0; i < kCurvePoints; ++i) {
    lambdas.push_back(lambda_of_position(kLambdaMinPos + i));
    x.push_back((kLambdaMinPos + i) / 4.0);
  }
  const DofCurve c = dof_curve(*spectra, layer, head, lambdas);
  const HeadSpectrum& sp = spectra->head(layer, head);
  auto q = [](const std::vector<double>& v) { return QVector<double>(v.begin(), v.end()); };
  head_->setData(x, q(c.head), true);
  // Short names: the panel's title says which layer and head.
  head_->setName(tr("head (J = %1)").arg(sp.samples));
  if (!c.half.empty()) {
    half_->setData(x, q(c.half), true);
    half_->setName(tr("head, J/2 = %1").arg(sp.half->samples));
  }
  half_->setVisible(!c.half.empty());
  layer_->setData(x, q(c.layer_max), true);
  // The legend reads head, its J/2 check, then the layer (drawn in the other order).
  for (QCPGraph* g : {head_, half_, layer_}) g->removeFromLegend();
  head_->addToLegend();
  if (!c.half.empty()) half_->addToLegend();
  layer_->addToLegend();
  double hi = 0;
  for (const auto* v : {&c.head, &c.half, &c.layer_max})
    for (double y : *v) hi = std::max(hi, y);
  p->yAxis->setRange(0, hi > 0 ? hi * 1.08 : 1);
  p->replot(QCustomPlot::rpQueuedReplot);
}

void DofCurvePanel::show_lambda(std::optional<double> lambda, std::optional<double> head_dof) {
  line_->setVisible(lambda.has_value());
  text_->setVisible(lambda && head_dof && has_curve_);
  if (lambda) {
    const double x = std::log2(*lambda);
    line_->point1->setCoords(x, 0);
    line_->point2->setCoords(x, 1);
    if (head_dof && has_curve_) {
      const double dof = *head_dof;
      text_->setText(tr("DoF %1").arg(QString::fromStdString(fmt_number(dof, 1))));
      // Where the line meets the head's curve. The curves fall as lambda grows, so the free side is
      // above the curve right of the line and below it left of the line: right and above, or (near
      // the right edge) left and below; flipped vertically where the plot's top or bottom would cut it.
      const bool left = x > -3;
      const double top = plot()->yAxis->range().upper;
      bool above = !left;
      if (above && dof > 0.85 * top) above = false;
      if (!above && dof < 0.15 * top) above = true;
      text_->position->setCoords(x + (left ? -0.15 : 0.15), dof);
      text_->setPositionAlignment((left ? Qt::AlignRight : Qt::AlignLeft) | (above ? Qt::AlignBottom : Qt::AlignTop));
    }
  }
  plot()->replot(QCustomPlot::rpQueuedReplot);
}

}  // namespace attnscope::views

// What the DoF view's four panels share (dof_view.h): the lambda slider's scale (log2 lambda in
// quarter steps, 2^-12 .. 2^0), how lambda is written, the accent colour of the lambda and budget
// lines, and the boxed value labels.
#pragma once
#include <QApplication>
#include <QColor>
#include <QFont>
#include <QPalette>
#include <QString>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <qcustomplot.h>

#include "plot_style.h"

namespace attnscope::views::dof {

// The lambda slider: log2(lambda) in quarter steps, 2^-12 .. 2^0.
constexpr int kLambdaMinPos = -48, kLambdaMaxPos = 0;
constexpr int kCurvePoints = kLambdaMaxPos - kLambdaMinPos + 1;  // DoF against lambda: one per slider position

inline double lambda_of_position(int pos) { return std::exp2(pos / 4.0); }
inline int position_of_lambda(double lambda) {
  if (!(lambda > 0) || !std::isfinite(lambda)) return -32;
  const long p = std::lround(4 * std::log2(lambda));
  return int(std::clamp<long>(p, kLambdaMinPos, kLambdaMaxPos));
}

inline QString exponent_text(double e) { return QString::number(e, 'g', 4); }

// "λ = 2^-8 = 0.0039"
inline QString lambda_label_text(int pos) {
  return QStringLiteral("λ = 2^%1 = %2").arg(exponent_text(pos / 4.0), QString::number(lambda_of_position(pos), 'g', 2));
}

// "2^-8" for the quarter powers of two the slider gives, else the shortest decimal.
inline QString lambda_short(double lambda) {
  const double e = 4 * std::log2(lambda);
  if (std::abs(e - std::round(e)) < 1e-9) return QStringLiteral("2^%1").arg(exponent_text(std::round(e) / 4));
  return QString::number(lambda, 'g', 3);
}

// A number for CSV: all the digits a double needs.
inline std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

// A value label on a box of the background colour, so it reads over grid lines and curves; its
// ink and box follow the palette (style_plot restyles boxed labels; exports draw them light).
inline QCPItemText* boxed_label(QCustomPlot* plot) {
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

// A message in the middle of a plot ("Computing the DoF spectra…"), in the palette's ink, no box.
inline QCPItemText* plot_note(QCustomPlot* plot) {
  auto* n = new QCPItemText(plot);
  n->position->setType(QCPItemPosition::ptAxisRectRatio);
  n->position->setCoords(0.5, 0.5);
  n->setPositionAlignment(Qt::AlignCenter);
  n->setTextAlignment(Qt::AlignCenter);
  n->setClipToAxisRect(false);
  n->setColor(QApplication::palette().color(QPalette::Text));
  n->setVisible(false);
  return n;
}

inline QColor accent() { return series_color(3); }  // vermillion: the lambda and budget lines

// Integer ticks 0..n-1, at most ~16 labelled.
inline QSharedPointer<QCPAxisTickerText> index_ticker(int n) {
  QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
  const int step = std::max(1, (n + 15) / 16);
  for (int i = 0; i < n; i += step) t->addTick(i, QString::number(i));
  return t;
}

}  // namespace attnscope::views::dof

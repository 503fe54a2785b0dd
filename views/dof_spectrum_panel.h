// The DoF view's panel (b): the selected head's eigenvalue spectrum (log scale, the J/2 subset's
// dashed) with the lambda line at the shifted ridge and how many eigenvalues are above it (core's
// eigenvalues_above), and the resolution below which eigenvalues are noise.
#pragma once
#include <optional>

#include "attnscope/analysis/dof.h"
#include "plot_panel.h"

class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;

namespace attnscope::views {

class DofSpectrumPanel : public PlotPanel {
  Q_OBJECT
 public:
  explicit DofSpectrumPanel(QWidget* parent = nullptr);
  // The head's spectrum (null: none), its title ("layer 2, head 3"); no lambda line without lambda.
  void show_spectrum(const HeadSpectrum* spectrum, const QString& which);
  void show_lambda(std::optional<double> lambda);
  void show_note(const QString& text);  // instead of a spectrum ("" hides it)

 private:
  const HeadSpectrum* spectrum_ = nullptr;
  QCPGraph *spec_ = nullptr, *spec_half_ = nullptr;
  QCPItemStraightLine *ridge_line_ = nullptr, *res_line_ = nullptr;
  QCPItemText *ridge_text_ = nullptr, *note_ = nullptr;
  double plot_log_offset_ = 0;  // the spectrum is drawn as mu * exp(-plot_log_offset)
};

}  // namespace attnscope::views

// Plot colours that stay readable in the system's light and dark palettes. Every workbench plot is
// styled here, so a palette change restyles all of them alike; exports use the light style (paper
// figures go on white).
#pragma once
#include <QColor>
#include <QPalette>

class QCustomPlot;
class QCPColorGradient;

namespace attnscope::views {

bool is_dark(const QPalette& palette);

// Background, axes, tick labels, grid and legend of `plot` from `palette` (QApplication's when
// omitted). Series colours are left alone: series_color() reads on both.
void style_plot(QCustomPlot* plot);
void style_plot(QCustomPlot* plot, const QPalette& palette);
QPalette light_palette();  // what exports are drawn with

// Okabe-Ito colours (colour-blind safe), with the black replaced so it reads on dark grey too.
QColor series_color(int i);

// A QCPColorMap carrying this property (true) gets diverging_gradient(palette) from style_plot, so
// its neutral middle follows the palette it is drawn in (the window's, or white for exports).
inline constexpr const char* kDivergingProperty = "attnscope_diverging";

// viridis: perceptually uniform, readable in greyscale print and on dark backgrounds.
QCPColorGradient sequential_gradient();
// blue - neutral - red for signed values (differences); the neutral middle follows the palette's
// base colour so 0 blends into the background in both themes.
QCPColorGradient diverging_gradient(const QPalette& palette);

}  // namespace attnscope::views

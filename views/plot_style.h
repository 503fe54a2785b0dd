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

// Background, axes, tick labels, grid, legend, colour bars and every text of `plot` from `palette`
// (QApplication's when omitted): QCPTextElements (titles, footnotes, wherever they sit in the
// layout) and QCPItemTexts take the palette's text colour, a boxed label (an item text with a
// brush) a box of the palette's base colour; text printed on a coloured cell is left alone (see
// kCellTextProperty). Series colours are left alone: series_color() reads on both.
void style_plot(QCustomPlot* plot);
void style_plot(QCustomPlot* plot, const QPalette& palette);
QPalette light_palette();  // what exports are drawn with

// Moves the plot's legend into one line under the axis rect (inside, it would sit on the data),
// in a font `scale` times the application's. The legend's row never narrows the plot: an empty or
// short legend (no series yet) sits at the left of a row as wide as the plot.
void legend_below(QCustomPlot* plot, double scale = 0.85);

// Okabe-Ito colours (colour-blind safe), with the black replaced so it reads on dark grey too.
QColor series_color(int i);

// A QCPColorMap carrying this property (true) gets diverging_gradient(palette) from style_plot, so
// its neutral middle follows the palette it is drawn in (the window's, or white for exports).
inline constexpr const char* kDivergingProperty = "attnscope_diverging";

// A QCPItemText printed on a coloured heatmap cell carries this property (true): its ink follows
// the cell's colour (cell_ink), not the palette, so style_plot leaves it alone.
inline constexpr const char* kCellTextProperty = "attnscope_cell_text";
// Black or white, whichever contrasts more with `cell` (by relative luminance, as WCAG measures
// contrast): at least 4.5 : 1 on every colour.
QColor cell_ink(const QColor& cell);
double relative_luminance(const QColor& c);  // 0 (black) .. 1 (white), sRGB

// viridis: perceptually uniform, readable in greyscale print and on dark backgrounds.
QCPColorGradient sequential_gradient();
// blue - neutral - red for signed values (differences); the neutral middle follows the palette's
// base colour so 0 blends into the background in both themes.
QCPColorGradient diverging_gradient(const QPalette& palette);

}  // namespace attnscope::views

// A plot as the workbench shows it: a QCustomPlot under a title, and what every figure offers on its
// context menu and its toolbar: save as PNG, SVG or PDF, its numbers as CSV, and "Copy as command"
// (the attnscope command line that reproduces it headless). Views own PlotPanels and fill
// plot() with what core computed; the panel never computes anything itself.
#pragma once
#include <QString>
#include <QWidget>
#include <functional>
#include <string>

class QCustomPlot;
class QLabel;
class QToolButton;

namespace attnscope::views {

class PlotPanel : public QWidget {
  Q_OBJECT
 public:
  explicit PlotPanel(const QString& title, QWidget* parent = nullptr);

  QCustomPlot* plot() const { return plot_; }
  void set_title(const QString& title);
  QString title() const;

  // The figure's numbers as CSV text, produced when exporting; unset: CSV export is disabled.
  void set_csv(std::function<std::string()> csv);
  bool has_csv() const { return bool(csv_); }
  // The command line that reproduces this figure; "" disables "Copy as command".
  void set_command(const QString& command);
  QString command() const { return command_; }

  // By the path's extension: .png, .svg, .pdf (the plot in the light style, at least 800 x 560
  // pixels) or .csv. Written to a temporary name and renamed. Throws attnscope::Error naming the path.
  void export_to(const QString& path) const;

  // Re-applies plot_style (on a palette change the window calls this for every panel).
  void restyle();

  // The header's two compact buttons: save (a standard save icon) and "Copy as command" (a copy
  // icon from the theme, or the text "⧉ cmd"); both say what they do in their tooltips, and the
  // context menu offers the same.
  QToolButton* export_button() const { return export_button_; }
  QToolButton* command_button() const { return command_button_; }

 public slots:
  void export_dialog();  // asks for a file name, exports, shows any error in a message box
  void copy_command();   // puts command() on the clipboard

 signals:
  void exported(const QString& path);

 protected:
  void contextMenuEvent(QContextMenuEvent* event) override;
  void changeEvent(QEvent* event) override;
  // A panel that was never shown (a window built hidden, then the theme changed) may have missed
  // the palette change: it restyles when shown if the palette is not the one it was styled with.
  void showEvent(QShowEvent* event) override;

 private:
  void update_icons();

  QLabel* title_;
  QToolButton* export_button_;
  QToolButton* command_button_;
  QCustomPlot* plot_;
  std::function<std::string()> csv_;
  QString command_;
  qint64 styled_palette_ = 0;  // QPalette::cacheKey() of the palette restyle() last used
};

}  // namespace attnscope::views

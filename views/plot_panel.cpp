#include "plot_panel.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "attnscope/error.h"
#include "attnscope/text_file.h"
#include "figure_export.h"
#include "plot_style.h"

namespace attnscope::views {

PlotPanel::PlotPanel(const QString& title, QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->setSpacing(2);
  auto* top = new QHBoxLayout;
  title_ = new QLabel(title, this);
  QFont f = title_->font();
  f.setBold(true);
  title_->setFont(f);
  // A long title is cut rather than setting the panel's minimum width: four panels side by side
  // would otherwise force the window wider than the screen.
  title_->setSizePolicy(QSizePolicy::Ignored, title_->sizePolicy().verticalPolicy());
  top->addWidget(title_, 1);
  auto* save = new QToolButton(this);
  save->setText(tr("Export…"));
  save->setToolTip(tr("Save this figure as PNG, SVG or PDF, or its numbers as CSV"));
  save->setAutoRaise(true);
  connect(save, &QToolButton::clicked, this, &PlotPanel::export_dialog);
  top->addWidget(save);
  auto* copy = new QToolButton(this);
  copy->setText(tr("Copy as command"));
  copy->setToolTip(tr("Copy the attnscope command line that reproduces this figure headless"));
  copy->setAutoRaise(true);
  connect(copy, &QToolButton::clicked, this, &PlotPanel::copy_command);
  top->addWidget(copy);
  layout->addLayout(top);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(160, 120);
  plot_->setContextMenuPolicy(Qt::NoContextMenu);  // ours (contextMenuEvent) handles it
  layout->addWidget(plot_, 1);
  style_plot(plot_);
}

void PlotPanel::set_title(const QString& title) { title_->setText(title); }
QString PlotPanel::title() const { return title_->text(); }
void PlotPanel::set_csv(std::function<std::string()> csv) { csv_ = std::move(csv); }
void PlotPanel::set_command(const QString& command) { command_ = command; }

void PlotPanel::export_to(const QString& path) const {
  const std::string p = path.toStdString();
  if (path.endsWith(".csv", Qt::CaseInsensitive)) {
    if (!csv_) fail(p, "this figure has no data to export as CSV");
    write_text_file(p, csv_());
    return;
  }
  const int w = std::max(800, plot_->width()), h = std::max(560, plot_->height());
  style_plot(plot_, light_palette());
  try {
    save_plot(*plot_, p, w, h);
  } catch (...) {
    style_plot(plot_);
    plot_->replot();
    throw;
  }
  style_plot(plot_);
  plot_->replot();
}

void PlotPanel::restyle() {
  style_plot(plot_);
  plot_->replot();
}

void PlotPanel::export_dialog() {
  QString filters = tr("PNG image (*.png);;SVG vector image (*.svg);;PDF document (*.pdf)");
  if (csv_) filters += tr(";;CSV data (*.csv)");
  QString base = title_->text().toLower();
  base.replace(QRegularExpression("[^a-z0-9]+"), "_");
  QString selected;
  const QString path = QFileDialog::getSaveFileName(this, tr("Export %1").arg(title_->text()), base + ".png", filters, &selected);
  if (path.isEmpty()) return;
  try {
    export_to(path);
    emit exported(path);
  } catch (const std::exception& e) {
    QMessageBox::critical(this, tr("Export failed"), QString::fromStdString(e.what()));
  }
}

void PlotPanel::copy_command() {
  if (command_.isEmpty()) return;
  QApplication::clipboard()->setText(command_);
}

void PlotPanel::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  menu.addAction(tr("Export figure or data…"), this, &PlotPanel::export_dialog);
  QAction* copy = menu.addAction(tr("Copy as command"), this, &PlotPanel::copy_command);
  copy->setEnabled(!command_.isEmpty());
  menu.exec(event->globalPos());
}

void PlotPanel::changeEvent(QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) restyle();
  QWidget::changeEvent(event);
}

}  // namespace attnscope::views

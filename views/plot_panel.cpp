#include "plot_panel.h"

#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QMessageBox>
#include <QPainter>
#include <QStyle>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "attnscope/base/error.h"
#include "attnscope/base/text_file.h"
#include "figure_export.h"
#include "plot_style.h"

namespace attnscope::views {

namespace {

// The panel's title: one line where it fits, else two (broken between words; four panels side by
// side must not force the window wider than the screen), and only then cut with an ellipsis, the
// whole title being the tooltip.
class ElidedLabel : public QLabel {
 public:
  using QLabel::QLabel;
  QSize minimumSizeHint() const override {
    return {fontMetrics().horizontalAdvance(QStringLiteral("Ab…")), lines_ * fontMetrics().lineSpacing()};
  }
  QSize sizeHint() const override { return {QLabel::sizeHint().width(), lines_ * fontMetrics().lineSpacing()}; }

  // One line or two for the text at this width (after a resize or a new title).
  void fit() {
    const int lines = fontMetrics().elidedText(text(), Qt::ElideRight, contentsRect().width()) == text() ? 1 : 2;
    if (lines != lines_) {
      lines_ = lines;
      setMinimumHeight(lines * fontMetrics().lineSpacing());
      updateGeometry();
    }
  }

 protected:
  void resizeEvent(QResizeEvent* e) override {
    QLabel::resizeEvent(e);
    fit();
  }
  void paintEvent(QPaintEvent*) override {
    QPainter painter(this);
    const QRect r = contentsRect();
    const QFontMetrics fm = fontMetrics();
    QString first = text(), second;
    if (fm.elidedText(first, Qt::ElideRight, r.width()) != first) {
      // The most words that fit on the first line; the rest on the second.
      const QStringList words = text().split(' ');
      int n = 0;
      QString line;
      while (n < words.size()) {
        const QString next = line.isEmpty() ? words[n] : line + ' ' + words[n];
        if (n > 0 && fm.elidedText(next, Qt::ElideRight, r.width()) != next) break;  // elidedText's own measure
        line = next;
        ++n;
      }
      first = line;
      second = QStringList(words.mid(n)).join(' ');
    }
    const QString first_shown = fm.elidedText(first, Qt::ElideRight, r.width());
    const QString second_shown = second.isEmpty() ? QString() : fm.elidedText(second, Qt::ElideRight, r.width());
    const bool whole = first_shown == first && second_shown == second && (second.isEmpty() || height() >= 2 * fm.lineSpacing());
    setToolTip(whole ? QString() : text());
    if (second.isEmpty() || height() < 2 * fm.lineSpacing()) {
      style()->drawItemText(&painter, r, Qt::AlignLeft | Qt::AlignVCenter, palette(), isEnabled(),
                            fm.elidedText(text(), Qt::ElideRight, r.width()), foregroundRole());
      return;
    }
    const QRect top(r.left(), r.top(), r.width(), fm.lineSpacing()), bottom(r.left(), r.top() + fm.lineSpacing(), r.width(), fm.lineSpacing());
    style()->drawItemText(&painter, top, Qt::AlignLeft | Qt::AlignVCenter, palette(), isEnabled(), first_shown, foregroundRole());
    style()->drawItemText(&painter, bottom, Qt::AlignLeft | Qt::AlignVCenter, palette(), isEnabled(), second_shown, foregroundRole());
  }

 private:
  int lines_ = 1;
};

// Two overlapping pages in the button text colour: the copy icon where the icon theme has none
// (offscreen, minimal desktops).
QIcon drawn_copy_icon(const QPalette& palette) {
  QPixmap pm(16, 16);
  pm.fill(Qt::transparent);
  QPainter p(&pm);
  p.setRenderHint(QPainter::Antialiasing);
  p.setPen(QPen(palette.color(QPalette::ButtonText), 1.3));
  p.setBrush(Qt::NoBrush);
  p.drawRoundedRect(QRectF(5.5, 1.5, 9, 10), 1.5, 1.5);
  p.setBrush(palette.color(QPalette::Button));
  p.drawRoundedRect(QRectF(1.5, 4.5, 9, 10), 1.5, 1.5);
  return QIcon(pm);
}

}  // namespace

PlotPanel::PlotPanel(const QString& title, QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(2, 2, 2, 2);
  layout->setSpacing(2);
  auto* top = new QHBoxLayout;
  title_ = new ElidedLabel(title, this);
  title_->setObjectName("plot_title");
  QFont f = title_->font();
  f.setBold(true);
  title_->setFont(f);
  title_->setSizePolicy(QSizePolicy::Expanding, title_->sizePolicy().verticalPolicy());
  top->addWidget(title_, 1);
  // Icon buttons: the title keeps the header's width.
  export_button_ = new QToolButton(this);
  export_button_->setObjectName("export_button");
  export_button_->setIcon(style()->standardIcon(QStyle::SP_DialogSaveButton, nullptr, this));
  export_button_->setToolTip(tr("Export: save this figure as PNG, SVG or PDF, or its numbers as CSV"));
  export_button_->setAutoRaise(true);
  connect(export_button_, &QToolButton::clicked, this, &PlotPanel::export_dialog);
  top->addWidget(export_button_);
  command_button_ = new QToolButton(this);
  command_button_->setObjectName("command_button");
  command_button_->setText(tr("cmd"));
  command_button_->setToolButtonStyle(Qt::ToolButtonTextBesideIcon);
  command_button_->setToolTip(tr("Copy as command: put the attnscope command line that reproduces this figure headless on the clipboard"));
  command_button_->setAutoRaise(true);
  command_button_->setEnabled(false);
  connect(command_button_, &QToolButton::clicked, this, &PlotPanel::copy_command);
  top->addWidget(command_button_);
  update_icons();
  layout->addLayout(top);
  plot_ = new QCustomPlot(this);
  plot_->setMinimumSize(160, 120);
  plot_->setContextMenuPolicy(Qt::NoContextMenu);  // ours (contextMenuEvent) handles it
  layout->addWidget(plot_, 1);
  styled_palette_ = QApplication::palette().cacheKey();
  style_plot(plot_);
}

void PlotPanel::set_title(const QString& title) {
  title_->setText(title);
  static_cast<ElidedLabel*>(title_)->fit();  // one line or two for the new title
}
QString PlotPanel::title() const { return title_->text(); }
void PlotPanel::set_csv(std::function<std::string()> csv) { csv_ = std::move(csv); }
void PlotPanel::set_command(const QString& command) {
  command_ = command;
  command_button_->setEnabled(!command_.isEmpty());
}

void PlotPanel::update_icons() {
  const QIcon themed = QIcon::fromTheme(QStringLiteral("edit-copy"));
  command_button_->setIcon(themed.isNull() ? drawn_copy_icon(palette()) : themed);
  command_button_->setIconSize(QSize(16, 16));
  export_button_->setIconSize(QSize(16, 16));
}

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
  styled_palette_ = QApplication::palette().cacheKey();
  style_plot(plot_);
  plot_->replot();
}

void PlotPanel::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (QApplication::palette().cacheKey() != styled_palette_) {
    restyle();
    update_icons();
  }
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
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    restyle();
    update_icons();  // the drawn copy icon is in the palette's text colour
  }
  QWidget::changeEvent(event);
}

}  // namespace attnscope::views

// What every workbench figure offers (PlotPanel): exports in the light style whatever the window's
// palette (a dark window's difference map exports with a white, not a dark grey, zero), CSV of its
// numbers, "Copy as command" on the clipboard, and a clear error for a bad path; compact header
// buttons that leave the title whole and still export and copy; every text of a plot follows the
// palette except values printed on coloured cells.
#include <gtest/gtest.h>

#include <QApplication>
#include <QClipboard>
#include <QFileDialog>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QPalette>
#include <QSignalSpy>
#include <QTest>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include <string>

#include "attnscope/base/error.h"
#include "figure_export.h"
#include "plot_panel.h"
#include "plot_style.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_plot_panel {

using attnscope::views::PlotPanel;
namespace test = attnscope::test;

namespace {

QPalette dark_palette() {
  QPalette p;
  p.setColor(QPalette::Window, QColor(40, 40, 40));
  p.setColor(QPalette::Base, QColor(30, 30, 30));
  p.setColor(QPalette::WindowText, QColor(230, 230, 230));
  p.setColor(QPalette::Text, QColor(230, 230, 230));
  return p;
}

// A 3 x 3 map of zeros drawn with the diverging gradient: every cell is the gradient's middle.
QCPColorMap* zero_map(PlotPanel& panel) {
  QCustomPlot* plot = panel.plot();
  auto* map = new QCPColorMap(plot->xAxis, plot->yAxis);
  map->data()->setSize(3, 3);
  map->data()->setRange(QCPRange(0, 2), QCPRange(0, 2));
  map->data()->fill(0.0);
  map->setProperty(attnscope::views::kDivergingProperty, true);
  map->setGradient(attnscope::views::diverging_gradient(QApplication::palette()));
  map->setDataRange(QCPRange(-1, 1));
  map->setInterpolate(false);
  plot->xAxis->setRange(-0.5, 2.5);
  plot->yAxis->setRange(-0.5, 2.5);
  return map;
}

int lightness(QRgb c) { return QColor(c).lightness(); }

QColor centre_of_plot(const QImage& img) { return img.pixelColor(img.width() / 2, img.height() / 2); }

}  // namespace

TEST(PlotPanel, DarkWindowExportsALightFigureAndKeepsItsOwnColours) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  const QPalette saved = QApplication::palette();
  QApplication::setPalette(dark_palette());
  {
    PlotPanel panel("difference");
    panel.resize(500, 500);
    QCPColorMap* map = zero_map(panel);
    panel.restyle();
    // On screen the zero of a difference blends into the dark background...
    EXPECT_LT(lightness(map->gradient().color(0.0, QCPRange(-1, 1))), 60);
    const std::string path = test::temp_dir("plotpanel") + "/diff.png";
    panel.export_to(QString::fromStdString(path));
    // ...and in the exported figure it is white, on a white page.
    const QImage img(QString::fromStdString(path));
    ASSERT_FALSE(img.isNull());
    EXPECT_GE(img.width(), 800);
    EXPECT_GT(QColor(centre_of_plot(img)).lightness(), 245) << centre_of_plot(img).name().toStdString();
    EXPECT_GT(img.pixelColor(2, 2).lightness(), 245);
    // The window keeps its dark style after the export.
    EXPECT_LT(lightness(map->gradient().color(0.0, QCPRange(-1, 1))), 60);
    EXPECT_LT(panel.plot()->toPixmap(200, 200).toImage().pixelColor(2, 2).lightness(), 60);
  }
  QApplication::setPalette(saved);
}

TEST(PlotPanel, CsvCommandAndBadPaths) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  PlotPanel panel("numbers");
  const std::string dir = test::temp_dir("plotpanel_csv");
  const std::string err = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/x.csv")); });
  EXPECT_NE(err.find(dir + "/x.csv"), std::string::npos) << err;
  EXPECT_NE(err.find("no data"), std::string::npos) << err;

  panel.set_csv([] { return std::string("layer,dof\n0,43.4\n"); });
  panel.export_to(QString::fromStdString(dir + "/x.csv"));
  EXPECT_EQ(test::read_file(dir + "/x.csv"), "layer,dof\n0,43.4\n");

  const std::string bad = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/x.bmp")); });
  EXPECT_NE(bad.find("x.bmp"), std::string::npos) << bad;
  const std::string missing = test::error_of([&] { panel.export_to(QString::fromStdString(dir + "/no/such/dir/x.png")); });
  EXPECT_NE(missing.find("no/such/dir/x.png"), std::string::npos) << missing;

  panel.set_command("attnscope dof --spectra s.safetensors --lambda 2^-8 --json");
  panel.copy_command();
  EXPECT_EQ(QApplication::clipboard()->text().toStdString(), "attnscope dof --spectra s.safetensors --lambda 2^-8 --json");
}

// The header: two small buttons, so that a panel a quarter of a 1500-pixel window wide shows
// "softmax monotonicity" whole; the save button exports through the file dialog, the command
// button copies (and is off while there is nothing to copy).
TEST(PlotPanel, CompactHeaderButtonsLeaveTheTitleWholeAndExportAndCopy) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  PlotPanel panel("softmax monotonicity");
  panel.resize(290, 260);
  panel.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&panel));
  QToolButton* save = panel.export_button();
  QToolButton* cmd = panel.command_button();
  ASSERT_NE(save, nullptr);
  ASSERT_NE(cmd, nullptr);
  EXPECT_FALSE(save->icon().isNull());
  EXPECT_FALSE(cmd->icon().isNull());
  EXPECT_LE(save->width() + cmd->width(), 100) << save->width() << " + " << cmd->width();
  EXPECT_TRUE(save->toolTip().contains("PNG")) << save->toolTip().toStdString();
  EXPECT_TRUE(cmd->toolTip().contains("command line")) << cmd->toolTip().toStdString();
  auto* title = panel.findChild<QLabel*>();
  ASSERT_NE(title, nullptr);
  EXPECT_GE(title->width(), title->fontMetrics().horizontalAdvance(panel.title()));
  EXPECT_TRUE(title->toolTip().isEmpty());  // not cut, so no tooltip repeating it

  // A panel too narrow for its title cuts it with an ellipsis and names it in the tooltip.
  panel.set_title("a title much too long for a panel this narrow, with layer and head");
  QApplication::processEvents();
  title->repaint();
  EXPECT_EQ(title->toolTip(), panel.title());

  EXPECT_FALSE(cmd->isEnabled());
  const QString command = "attnscope maps --model m --layer 1 --head 2 --feature-map prf";
  panel.set_command(command);
  EXPECT_TRUE(cmd->isEnabled());
  QApplication::clipboard()->setText("something else");
  QTest::mouseClick(cmd, Qt::LeftButton);
  EXPECT_EQ(QApplication::clipboard()->text(), command);

  // The save button opens the export dialog; the name given there gets the figure.
  auto* plot = panel.plot();
  plot->addGraph()->setData({0, 1, 2}, {1, 3, 2});
  plot->rescaleAxes();
  const QString path = QString::fromStdString(test::temp_dir("plotpanel_button") + "/fig.png");
  QSignalSpy exported(&panel, &PlotPanel::exported);
  QTimer answer;
  bool dialog_seen = false;
  QObject::connect(&answer, &QTimer::timeout, [&] {
    if (auto* d = qobject_cast<QFileDialog*>(QApplication::activeModalWidget())) {
      dialog_seen = true;
      answer.stop();
      auto* name = d->findChild<QLineEdit*>("fileNameEdit");  // typed, as a user would
      if (name) name->setText(path);
      else d->selectFile(path);
      QMetaObject::invokeMethod(d, "accept");  // the dialog's Save
    }
  });
  answer.start(20);
  QTest::mouseClick(save, Qt::LeftButton);
  answer.stop();
  EXPECT_TRUE(dialog_seen);
  ASSERT_EQ(exported.count(), 1);
  EXPECT_EQ(QFileInfo(exported.at(0).at(0).toString()).canonicalFilePath().toStdString(),
            QFileInfo(path).canonicalFilePath().toStdString());
  const QImage img(path);
  ASSERT_FALSE(img.isNull());
  EXPECT_GE(img.width(), 800);
}

// Titles, footnotes (also in a nested layout), colour-bar captions and ticks, notes and boxed
// labels take the palette's text colour when the palette changes, light on dark; a value printed on
// a coloured cell keeps the ink its cell chose. An export in between draws them dark on white and
// leaves the window's colours as they were.
TEST(PlotPanel, EveryTextButCellValuesFollowsThePalette) {
  ASSERT_TRUE(attnscope::views::ensure_qt(nullptr));
  const QPalette saved = QApplication::palette();
  QWidget window;  // as in the workbench: the panel is a child, not a window of its own
  auto* layout = new QVBoxLayout(&window);
  auto* panel = new PlotPanel("texts", &window);
  layout->addWidget(panel);
  QCustomPlot* p = panel->plot();
  auto* below = new QCPLayoutGrid;
  p->plotLayout()->addElement(1, 0, below);
  auto* footnote = new QCPTextElement(p, "* not converged");
  below->addElement(0, 0, footnote);
  auto* scale = new QCPColorScale(p);
  p->plotLayout()->addElement(0, 1, scale);
  scale->axis()->setLabel("KL (nats)");
  auto* note = new QCPItemText(p);
  note->setText("No head selected");
  auto* boxed = new QCPItemText(p);
  boxed->setText("budget 64");
  boxed->setBrush(QColor(255, 255, 255, 225));
  auto* cell = new QCPItemText(p);
  cell->setText("0.42");
  cell->setProperty(attnscope::views::kCellTextProperty, true);
  cell->setColor(Qt::black);
  panel->restyle();
  window.resize(500, 400);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));

  auto light = [](const QColor& c) { return c.lightness() > 180; };
  auto dark = [](const QColor& c) { return c.lightness() < 80; };
  QApplication::setPalette(dark_palette());
  QCoreApplication::processEvents();  // the palette change reaches the widgets as events
  EXPECT_TRUE(light(scale->axis()->labelColor())) << scale->axis()->labelColor().name().toStdString();
  EXPECT_TRUE(light(scale->axis()->tickLabelColor()));
  EXPECT_TRUE(light(footnote->textColor())) << footnote->textColor().name().toStdString();
  EXPECT_TRUE(light(note->color()));
  EXPECT_TRUE(light(boxed->color()));
  EXPECT_TRUE(dark(boxed->brush().color())) << boxed->brush().color().name().toStdString();
  EXPECT_EQ(cell->color(), QColor(Qt::black));

  const std::string path = test::temp_dir("plotpanel_texts") + "/texts.png";
  panel->export_to(QString::fromStdString(path));
  EXPECT_TRUE(light(scale->axis()->labelColor()));  // the window's colours again
  EXPECT_TRUE(light(footnote->textColor()));
  EXPECT_EQ(cell->color(), QColor(Qt::black));

  QApplication::setPalette(saved);
  QCoreApplication::processEvents();
  EXPECT_TRUE(dark(scale->axis()->labelColor())) << scale->axis()->labelColor().name().toStdString();
  EXPECT_TRUE(dark(footnote->textColor()));
  EXPECT_TRUE(dark(boxed->color()));
  EXPECT_TRUE(light(boxed->brush().color()));
}

// Cell values: black or white, whichever reads better on the cell, at least 4.5 : 1 everywhere on
// viridis (white on its bright greens did not).
TEST(PlotPanel, CellInkContrastsWithEveryViridisColour) {
  using attnscope::views::cell_ink;
  using attnscope::views::relative_luminance;
  QCPColorGradient g = attnscope::views::sequential_gradient();
  for (int i = 0; i <= 100; ++i) {
    const QColor c = QColor::fromRgb(g.color(i / 100.0, QCPRange(0, 1)));
    const double a = relative_luminance(c), b = relative_luminance(cell_ink(c));
    const double ratio = (std::max(a, b) + 0.05) / (std::min(a, b) + 0.05);
    EXPECT_GE(ratio, 4.5) << c.name().toStdString();
  }
  EXPECT_EQ(cell_ink(QColor(94, 201, 98)), QColor(Qt::black));  // viridis 0.75
  EXPECT_EQ(cell_ink(QColor(68, 1, 84)), QColor(Qt::white));    // viridis 0
}

}  // namespace gui_test_plot_panel

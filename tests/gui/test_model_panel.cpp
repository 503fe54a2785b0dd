// The model and data panel, typed into as a user would: the capture options follow the spin
// boxes, the model's context length caps L, typed text comes back, and Capture is disabled while
// a capture runs. It fits a dock about 320 pixels wide.
#include <gtest/gtest.h>

#include <QCheckBox>
#include <QImage>
#include <QLabel>
#include <QListWidget>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>

#include "figure_export.h"
#include "model_panel.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_model_panel {

using namespace attnscope;
using views::ModelPanel;

namespace {

void type_into(QSpinBox* box, const QString& text) {
  box->setFocus();
  box->selectAll();
  QTest::keyClicks(box, text);
}

std::unique_ptr<ModelPanel> make_panel() {
  views::ensure_qt(nullptr);
  auto p = std::make_unique<ModelPanel>();
  p->resize(320, 760);
  p->set_model("/work/resources/models/brown-gpt2-mini",
               "architecture: GPT2LMHeadModel\nlayers: 4\nheads: 4 (kv 4)\nhead dim: 32\ncontext: 256\nparameters: 1.3 M");
  p->set_max_seq_len(256);
  p->show();
  QCoreApplication::processEvents();
  return p;
}

}  // namespace

TEST(ModelPanel, CaptureOptionsFollowTheSpinBoxes) {
  auto p = make_panel();
  CaptureOptions start;
  start.dtype = DType::F16;
  start.batch = 2;
  p->set_capture_options(start);
  type_into(p->num_seqs_box(), "16");
  type_into(p->seq_len_box(), "128");
  type_into(p->seed_box(), "7");
  QTest::mouseClick(p->pre_rope_box(), Qt::LeftButton, {}, QPoint(8, p->pre_rope_box()->height() / 2));
  const CaptureOptions o = p->capture_options();
  EXPECT_EQ(o.num_seqs, 16);
  EXPECT_EQ(o.seq_len, 128);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_TRUE(o.pre_rope);
  EXPECT_EQ(o.dtype, DType::F16);  // what the panel does not show passes through
  EXPECT_EQ(o.batch, 2);
}

TEST(ModelPanel, ContextLengthCapsTokens) {
  auto p = make_panel();
  type_into(p->seq_len_box(), "200");
  EXPECT_EQ(p->capture_options().seq_len, 200);
  p->set_max_seq_len(128);
  EXPECT_EQ(p->capture_options().seq_len, 128);
  type_into(p->seq_len_box(), "999");  // typing past the cap does not take
  EXPECT_LE(p->capture_options().seq_len, 128);
  p->set_max_seq_len(4096);
  type_into(p->seq_len_box(), "1024");
  EXPECT_EQ(p->capture_options().seq_len, 1024);
}

TEST(ModelPanel, TypedTextFilesAndModelSummary) {
  auto p = make_panel();
  p->editor()->setFocus();
  QTest::keyClicks(p->editor(), "The cat sat on the mat.");
  EXPECT_EQ(p->text(), "The cat sat on the mat.");
  QSignalSpy files_spy(p.get(), &ModelPanel::textFilesChanged);
  p->set_texts({"/t/a.txt", "/t/b.jsonl"}, p->text());
  EXPECT_EQ(p->text_files(), QStringList({"/t/a.txt", "/t/b.jsonl"}));
  EXPECT_EQ(p->files_list()->item(1)->text(), "b.jsonl");
  EXPECT_EQ(files_spy.count(), 0);  // set_texts is the window's, not the user's
  p->files_list()->item(0)->setSelected(true);
  auto buttons = p->findChildren<QPushButton*>();
  QPushButton* remove = nullptr;
  for (auto* b : buttons)
    if (b->text() == "Remove") remove = b;
  ASSERT_NE(remove, nullptr);
  QTest::mouseClick(remove, Qt::LeftButton);
  ASSERT_EQ(files_spy.count(), 1);
  EXPECT_EQ(files_spy.at(0).at(0).toStringList(), QStringList({"/t/b.jsonl"}));
  EXPECT_EQ(p->text(), "The cat sat on the mat.");
  EXPECT_EQ(p->model_path(), "/work/resources/models/brown-gpt2-mini");
  // The summary as a key/value table.
  auto labels = p->findChildren<QLabel*>();
  bool table = false;
  for (auto* l : labels) table |= l->text().contains("<td style='padding-right:8px'>head dim</td><td>32</td>");
  EXPECT_TRUE(table);
}

TEST(ModelPanel, CaptureButtonEmitsAndIsDisabledWhileBusy) {
  auto p = make_panel();
  QSignalSpy spy(p.get(), &ModelPanel::captureRequested);
  QTest::mouseClick(p->capture_button(), Qt::LeftButton);
  EXPECT_EQ(spy.count(), 1);
  p->set_busy(true);
  EXPECT_FALSE(p->capture_button()->isEnabled());
  QTest::mouseClick(p->capture_button(), Qt::LeftButton);
  EXPECT_EQ(spy.count(), 1);
  p->set_busy(false);
  QTest::mouseClick(p->capture_button(), Qt::LeftButton);
  EXPECT_EQ(spy.count(), 2);
}

// In a 320-pixel dock every control is inside the panel's width (nothing cut off on the right).
TEST(ModelPanel, FitsANarrowDock) {
  auto p = make_panel();
  EXPECT_LE(p->minimumSizeHint().width(), 320);
  QCoreApplication::processEvents();
  for (QWidget* w : p->findChildren<QWidget*>()) {
    const bool control = qobject_cast<QLabel*>(w) || qobject_cast<QAbstractButton*>(w) || qobject_cast<QAbstractSpinBox*>(w);
    if (!w->isVisible() || !control) continue;
    const QRect r(w->mapTo(p.get(), QPoint(0, 0)), w->size());
    EXPECT_LE(r.right(), 320) << w->metaObject()->className() << " " << w->objectName().toStdString();
  }
  if (const char* shots = std::getenv("ATTNSCOPE_SHOT_DIR")) p->grab().save(QString(shots) + "/model_panel.png");
}

}  // namespace gui_test_model_panel

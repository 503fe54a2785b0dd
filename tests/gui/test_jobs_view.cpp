// The jobs view under the offscreen platform: rows, states, progress and elapsed time follow the
// JobStatus lists the window polls; cancel and double-click ask the window; the selection and the
// log survive updates; the selected job's command line is shown above its log and copies.
#include <gtest/gtest.h>

#include <QApplication>
#include <QClipboard>
#include <QImage>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QToolButton>
#include <filesystem>
#include <iostream>

#include "attnscope/base/job.h"
#include "figure_export.h"
#include "jobs_view.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace gui_test_jobs_view {

using namespace attnscope;
using views::JobsView;

namespace {

JobStatus job(int id, const std::string& kind, const std::string& title, JobState state, double fraction,
              double elapsed, std::vector<std::string> log = {}, const std::string& error = "") {
  JobStatus j;
  j.id = id;
  j.kind = parse_job_kind(kind);  // the job list's words, read through core's name table
  j.title = title;
  j.command = "attnscope " + kind + " --out x";
  j.state = state;
  j.fraction = fraction;
  j.step = state == JobState::Running ? "layer 2/4" : "";
  j.elapsed_s = elapsed;
  j.log = std::move(log);
  j.error = error;
  return j;
}

std::vector<JobStatus> four_jobs() {
  return {job(1, "capture", "capture 8 x 256 tokens", JobState::Running, 0.4, 12.34, {"[  0.0 s] started", "[  3.1 s] layer 1/4"}),
          job(2, "spectra", "DoF spectra J = 1024", JobState::Succeeded, 1.0, 65.2, {"[  0.0 s] started", "[ 65.2 s] done"}),
          job(3, "metrics", "metrics prf M = 64", JobState::Failed, 0.25, 3.0, {"[  0.0 s] started"},
              "/data/cap/layer_2.safetensors: truncated header"),
          job(4, "report", "report brown-gpt2-mini", JobState::Cancelled, 0.6, 7265.0)};
}

struct Fixture {
  std::unique_ptr<JobsView> view;
  Fixture() {
    views::ensure_qt(nullptr);
    view = std::make_unique<JobsView>();
    view->resize(900, 520);
    view->set_jobs(four_jobs());
    view->show();
    QCoreApplication::processEvents();
  }
  QTableWidgetItem* cell(int row, int col) const { return view->table()->item(row, col); }
  int row_of(int id) const {
    for (int r = 0; r < view->table()->rowCount(); ++r)
      if (cell(r, JobsView::KindColumn)->data(JobsView::IdRole).toInt() == id) return r;
    return -1;
  }
};

}  // namespace

TEST(JobsView, RowsShowKindStateProgressAndElapsed) {
  Fixture f;
  ASSERT_EQ(f.view->table()->rowCount(), 4);
  EXPECT_EQ(f.cell(0, JobsView::KindColumn)->text(), "capture");
  EXPECT_EQ(f.cell(0, JobsView::TitleColumn)->text(), "capture 8 x 256 tokens");
  const char* states[] = {"running", "done", "failed", "cancelled"};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(f.cell(r, JobsView::StateColumn)->text(), states[r]) << r;
  EXPECT_DOUBLE_EQ(f.cell(0, JobsView::ProgressColumn)->data(JobsView::FractionRole).toDouble(), 0.4);
  EXPECT_EQ(f.cell(0, JobsView::ProgressColumn)->text(), QStringLiteral("40% · layer 2/4"));
  EXPECT_DOUBLE_EQ(f.cell(1, JobsView::ProgressColumn)->data(JobsView::FractionRole).toDouble(), 1.0);
  EXPECT_DOUBLE_EQ(f.cell(2, JobsView::ProgressColumn)->data(JobsView::FractionRole).toDouble(), 0.25);
  EXPECT_EQ(f.cell(0, JobsView::ElapsedColumn)->text(), "12.3 s");
  EXPECT_EQ(f.cell(1, JobsView::ElapsedColumn)->text(), "1 min 05 s");
  EXPECT_EQ(f.cell(3, JobsView::ElapsedColumn)->text(), "2 h 01 min");
  // The failed row: its message in the tooltip and red text.
  QTableWidgetItem* failed = f.cell(2, JobsView::StateColumn);
  EXPECT_TRUE(failed->toolTip().contains("truncated header"));
  const QColor red = failed->foreground().color();
  EXPECT_GT(red.red(), 150);
  EXPECT_LT(red.green(), 130);
  EXPECT_FALSE(f.cell(1, JobsView::StateColumn)->data(Qt::ForegroundRole).isValid());
}

TEST(JobsView, CancelButtonOnlyOnRunningRowsAndItEmitsTheId) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &JobsView::cancelRequested);
  auto* button = qobject_cast<QToolButton*>(f.view->table()->cellWidget(0, JobsView::CancelColumn));
  ASSERT_NE(button, nullptr);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(f.view->table()->cellWidget(r, JobsView::CancelColumn), nullptr) << r;
  QTest::mouseClick(button, Qt::LeftButton);
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toInt(), 1);
  EXPECT_FALSE(button->isEnabled());  // asked once; the job stops at its next step
  // Still running on the next poll: the button stays disabled; once cancelled, it goes.
  auto jobs = four_jobs();
  jobs[0].fraction = 0.45;
  f.view->set_jobs(jobs);
  EXPECT_FALSE(qobject_cast<QToolButton*>(f.view->table()->cellWidget(0, JobsView::CancelColumn))->isEnabled());
  jobs[0].state = JobState::Cancelled;
  f.view->set_jobs(jobs);
  EXPECT_EQ(f.view->table()->cellWidget(0, JobsView::CancelColumn), nullptr);
  EXPECT_EQ(f.cell(0, JobsView::StateColumn)->text(), "cancelled");
}

TEST(JobsView, SelectionAndLogSurviveUpdates) {
  Fixture f;
  // Nothing chosen: the newest job is selected.
  EXPECT_EQ(f.view->selected_job(), 4);
  f.view->table()->selectRow(f.row_of(1));
  EXPECT_EQ(f.view->selected_job(), 1);
  EXPECT_EQ(f.view->log_text(), "[  0.0 s] started\n[  3.1 s] layer 1/4");
  EXPECT_TRUE(f.view->log_title().contains("capture 8 x 256 tokens"));
  // The job runs on, logs more, and a new job starts: same rows, same selection, log appended.
  auto jobs = four_jobs();
  jobs[0].fraction = 0.75;
  jobs[0].log.push_back("[  6.0 s] layer 2/4");
  jobs[0].log.push_back("[  9.0 s] layer 3/4");
  jobs.push_back(job(5, "capture", "capture 4 x 128 tokens", JobState::Queued, 0, 0));
  f.view->set_jobs(jobs);
  EXPECT_EQ(f.view->table()->rowCount(), 5);
  EXPECT_EQ(f.view->selected_job(), 1);
  EXPECT_EQ(f.view->log_text(), "[  0.0 s] started\n[  3.1 s] layer 1/4\n[  6.0 s] layer 2/4\n[  9.0 s] layer 3/4");
  EXPECT_DOUBLE_EQ(f.cell(0, JobsView::ProgressColumn)->data(JobsView::FractionRole).toDouble(), 0.75);
  EXPECT_EQ(f.cell(4, JobsView::StateColumn)->text(), "queued");
  // A job removed from the list: the rows are rebuilt, the selection is still job 1.
  jobs.erase(jobs.begin() + 1);
  f.view->set_jobs(jobs);
  EXPECT_EQ(f.view->table()->rowCount(), 4);
  EXPECT_EQ(f.view->selected_job(), 1);
  EXPECT_EQ(f.cell(1, JobsView::KindColumn)->text(), "metrics");
  // Selecting the failed job shows its log and its error.
  f.view->table()->selectRow(f.row_of(3));
  EXPECT_EQ(f.view->log_text(), "[  0.0 s] started");
  EXPECT_TRUE(f.view->log_title().contains("failed: /data/cap/layer_2.safetensors: truncated header"));
}

// A long log (training jobs) follows its end as lines arrive, only the new lines are added.
TEST(JobsView, LongLogFollowsTheEnd) {
  Fixture f;
  auto jobs = four_jobs();
  for (int i = 0; i < 300; ++i) jobs[0].log.push_back("[ " + std::to_string(i) + " s] step " + std::to_string(i));
  f.view->set_jobs(jobs);
  f.view->table()->selectRow(f.row_of(1));
  QCoreApplication::processEvents();
  auto* log = f.view->findChild<QPlainTextEdit*>();
  ASSERT_NE(log, nullptr);
  QScrollBar* bar = log->verticalScrollBar();
  EXPECT_GT(bar->maximum(), 0);
  EXPECT_EQ(bar->value(), bar->maximum());
  for (int i = 300; i < 350; ++i) jobs[0].log.push_back("[ " + std::to_string(i) + " s] step " + std::to_string(i));
  f.view->set_jobs(jobs);
  QCoreApplication::processEvents();
  EXPECT_EQ(bar->value(), bar->maximum());
  EXPECT_EQ(log->document()->blockCount(), 352);
  EXPECT_TRUE(f.view->log_text().endsWith("step 349"));
}

TEST(JobsView, DoubleClickOpensOnlyJobsThatSucceeded) {
  Fixture f;
  QSignalSpy spy(f.view.get(), &JobsView::openRequested);
  QTableWidget* t = f.view->table();
  auto dclick = [&](int row) {
    const QRect r = t->visualItemRect(t->item(row, JobsView::TitleColumn));
    // As a real double click arrives: press, release, then the double-click event.
    QTest::mouseClick(t->viewport(), Qt::LeftButton, {}, r.center());
    QTest::mouseDClick(t->viewport(), Qt::LeftButton, {}, r.center());
  };
  dclick(f.row_of(2));
  ASSERT_EQ(spy.count(), 1);
  EXPECT_EQ(spy.at(0).at(0).toInt(), 2);
  dclick(f.row_of(3));  // failed: nothing to open
  dclick(f.row_of(1));  // running
  EXPECT_EQ(spy.count(), 1);
}

TEST(JobsView, ElapsedText) {
  EXPECT_EQ(JobsView::elapsed_text(0), "0.0 s");
  EXPECT_EQ(JobsView::elapsed_text(59.94), "59.9 s");
  EXPECT_EQ(JobsView::elapsed_text(61), "1 min 01 s");
  EXPECT_EQ(JobsView::elapsed_text(3 * 3600 + 7 * 60 + 5), "3 h 07 min");
  EXPECT_EQ(JobsView::elapsed_text(-1), "0.0 s");
}

// Drawn: the progress bars are painted (the running row's bar fills part of its cell) and the
// failed row's text is red.
TEST(JobsView, RendersBarsAndTheFailedRowInRed) {
  Fixture f;
  f.view->table()->selectRow(f.row_of(1));  // a selected row is drawn in the highlight colours
  QCoreApplication::processEvents();
  const QImage img = f.view->grab().toImage();
  if (const char* shots = std::getenv("ATTNSCOPE_SHOT_DIR")) img.save(QString(shots) + "/jobs_view.png");
  QTableWidget* t = f.view->table();
  const QRect failed = t->visualItemRect(f.cell(f.row_of(3), JobsView::StateColumn));
  const QPoint origin = t->viewport()->mapTo(f.view.get(), QPoint(0, 0));
  int red = 0;
  for (int y = failed.top(); y <= failed.bottom(); ++y)
    for (int x = failed.left(); x <= failed.right(); ++x) {
      const QColor c = img.pixelColor(origin + QPoint(x, y));
      red += c.red() > 150 && c.green() < 90 && c.blue() < 90;
    }
  EXPECT_GT(red, 5);
  // The running bar (40%): its left part differs from its right part.
  const QRect bar = t->visualItemRect(f.cell(0, JobsView::ProgressColumn));
  const QColor left = img.pixelColor(origin + QPoint(bar.left() + 8, bar.top() + 5));
  const QColor right = img.pixelColor(origin + QPoint(bar.right() - 8, bar.top() + 5));
  EXPECT_NE(left, right);
}

// The selected job's command line (the same work headless) above its log: exactly
// JobStatus::command, selectable, copied by its button; a job without one says so and copies
// nothing.
TEST(JobsView, SelectedJobsCommandLineIsShownAndCopies) {
  Fixture f;
  auto jobs = four_jobs();
  jobs[1].command = "attnscope dof --capture /tmp/ws/cap-1 --samples 1024 --save-spectra /tmp/ws/spectra.safetensors";
  jobs[3].command.clear();
  f.view->set_jobs(jobs);
  f.view->table()->selectRow(f.row_of(2));
  EXPECT_EQ(f.view->command_text().toStdString(), jobs[1].command);
  QLineEdit* box = f.view->command_box();
  ASSERT_NE(box, nullptr);
  EXPECT_TRUE(box->isReadOnly());
  EXPECT_TRUE(box->isVisible());
  box->selectAll();
  EXPECT_EQ(box->selectedText().toStdString(), jobs[1].command);  // selectable
  QApplication::clipboard()->setText("something else");
  ASSERT_TRUE(f.view->copy_command_button()->isEnabled());
  QTest::mouseClick(f.view->copy_command_button(), Qt::LeftButton);
  EXPECT_EQ(QApplication::clipboard()->text().toStdString(), jobs[1].command);
  // Above the log: the box sits between the log's title and the log.
  auto* log = f.view->findChild<QPlainTextEdit*>();
  EXPECT_LT(box->mapTo(f.view.get(), QPoint(0, 0)).y(), log->mapTo(f.view.get(), QPoint(0, 0)).y());

  f.view->table()->selectRow(f.row_of(4));
  EXPECT_EQ(f.view->command_text(), QString());
  EXPECT_FALSE(f.view->copy_command_button()->isEnabled());
  EXPECT_FALSE(box->placeholderText().isEmpty());
  f.view->table()->selectRow(f.row_of(1));
  EXPECT_EQ(f.view->command_text().toStdString(), jobs[0].command);
}

// Until the user picks a row, the newest job is the one shown (a new job takes over); once the
// user picks one, new jobs do not move the selection.
TEST(JobsView, FollowsTheNewestJobUntilTheUserPicksOne) {
  views::ensure_qt(nullptr);
  JobsView view;
  auto jobs = four_jobs();
  view.set_jobs({jobs[0]});
  EXPECT_EQ(view.selected_job(), 1);
  view.set_jobs({jobs[0], jobs[1]});
  EXPECT_EQ(view.selected_job(), 2);
  EXPECT_TRUE(view.log_title().contains("DoF spectra"));
  view.table()->selectRow(0);  // the user's choice
  view.set_jobs({jobs[0], jobs[1], jobs[2]});
  EXPECT_EQ(view.selected_job(), 1);
}

// Not a test (run with --gtest_also_run_disabled_tests): the jobs view with a running, a finished,
// a failed and a cancelled job, light and then dark (switched while open), to $ATTNSCOPE_LOOK_DIR
// (default /tmp/attnscope_look)/jobs_{light,dark}.png, for a person to look at.
TEST(JobsView, DISABLED_RenderForALook) {
  const char* env = std::getenv("ATTNSCOPE_LOOK_DIR");
  const QString out = env ? env : "/tmp/attnscope_look";
  std::filesystem::create_directories(out.toStdString());
  const QPalette light = QApplication::palette();
  Fixture f;
  f.view->resize(1390, 880);
  auto jobs = four_jobs();
  jobs[1].command = "attnscope dof --capture /home/me/.cache/attnscope/cap-1 --samples 1024 --normalize trace --save-spectra /home/me/.cache/attnscope/spectra.safetensors";
  f.view->set_jobs(jobs);
  f.view->table()->selectRow(f.row_of(2));
  QCoreApplication::processEvents();
  f.view->grab().save(out + "/jobs_light.png");
  QPalette dark;
  dark.setColor(QPalette::Window, QColor(45, 45, 48));
  dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
  dark.setColor(QPalette::Base, QColor(30, 30, 32));
  dark.setColor(QPalette::AlternateBase, QColor(45, 45, 48));
  dark.setColor(QPalette::Text, QColor(230, 230, 230));
  dark.setColor(QPalette::Button, QColor(55, 55, 58));
  dark.setColor(QPalette::ButtonText, QColor(230, 230, 230));
  dark.setColor(QPalette::Highlight, QColor(42, 130, 218));
  dark.setColor(QPalette::HighlightedText, Qt::white);
  QApplication::setPalette(dark);
  f.view->table()->selectRow(f.row_of(3));
  QCoreApplication::processEvents();
  f.view->grab().save(out + "/jobs_dark.png");
  QApplication::setPalette(light);
  std::cout << "wrote " << out.toStdString() << "/jobs_{light,dark}.png\n";
}

}  // namespace gui_test_jobs_view

// The jobs view: every background task (capture, spectra, metrics, report; distillation later) as a
// row with its kind, title, state, progress bar, elapsed time and a cancel button; below, the
// selected job's command line (the same work headless, selectable, with a Copy button) and its log.
// Double-clicking a finished job asks the window to open its results.
#pragma once
#include <QWidget>
#include <set>
#include <vector>

#include "attnscope/base/job.h"

class QTableWidget;
class QPlainTextEdit;
class QLabel;
class QLineEdit;
class QToolButton;

namespace attnscope::views {

class JobsView : public QWidget {
  Q_OBJECT
 public:
  explicit JobsView(QWidget* parent = nullptr);

  // Updates the rows in place (the window calls this on a timer while jobs run); keeps the selection.
  void set_jobs(const std::vector<JobStatus>& jobs);
  int selected_job() const;  // its id, 0 when none
  QTableWidget* table() const { return table_; }
  QString log_text() const;
  QString log_title() const;
  // The selected job's JobStatus::command as shown above its log ("" when none), and the button
  // that copies it to the clipboard.
  QString command_text() const;
  QLineEdit* command_box() const { return command_; }
  QToolButton* copy_command_button() const { return copy_command_; }

  // Table columns.
  enum Column { KindColumn, TitleColumn, StateColumn, ProgressColumn, ElapsedColumn, CancelColumn, ColumnCount };
  // The progress cell's fraction (0..1) is stored under this role; a delegate paints it as a bar.
  static constexpr int FractionRole = Qt::UserRole + 1;
  static constexpr int IdRole = Qt::UserRole + 2;

  // "12.3 s", "4 min 05 s", "2 h 03 min"
  static QString elapsed_text(double seconds);

 signals:
  void cancelRequested(int id);
  void openRequested(int id);

 private:
  QTableWidget* table_;
  QPlainTextEdit* log_;
  QLineEdit* command_ = nullptr;
  QToolButton* copy_command_ = nullptr;
  std::vector<JobStatus> jobs_;
  QLabel* log_title_ = nullptr;
  int log_job_ = 0;         // whose log is shown
  size_t log_lines_ = 0;    // how many of its lines
  std::set<int> cancel_clicked_;  // cancel asked: the button stays disabled until the job ends
  bool follow_newest_ = true;     // until the user picks a row, the newest job is the one shown
  bool selecting_ = false;        // the selection is being set by this view, not the user

  void fill_row(int row, const JobStatus& job);
  void rebuild_rows();
  void update_log();
  const JobStatus* find_job(int id) const;

 protected:
  void changeEvent(QEvent* event) override;
  void showEvent(QShowEvent* event) override;  // a palette change missed while hidden
  void apply_palette();
};

}  // namespace attnscope::views

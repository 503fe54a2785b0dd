// The jobs view: every background task (capture, spectra, metrics, report; distillation later) as a
// row with its kind, title, state, progress bar, elapsed time and a cancel button, and the log of
// the selected job below. Double-clicking a finished job asks the window to open its results.
#pragma once
#include <QWidget>
#include <set>
#include <vector>

#include "attnscope/job.h"

class QTableWidget;
class QPlainTextEdit;
class QLabel;

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
  std::vector<JobStatus> jobs_;
  QLabel* log_title_ = nullptr;
  int log_job_ = 0;         // whose log is shown
  size_t log_lines_ = 0;    // how many of its lines
  std::set<int> cancel_clicked_;  // cancel asked: the button stays disabled until the job ends

  void fill_row(int row, const JobStatus& job);
  void rebuild_rows();
  void update_log();
  const JobStatus* find_job(int id) const;

 protected:
  void changeEvent(QEvent* event) override;
};

}  // namespace attnscope::views

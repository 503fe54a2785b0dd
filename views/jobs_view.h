// The jobs view: every background task (capture, spectra, metrics, report; distillation later) as a
// row with its kind, title, state, progress bar, elapsed time and a cancel button, and the log of
// the selected job below. Double-clicking a finished job asks the window to open its results.
#pragma once
#include <QWidget>
#include <vector>

#include "attnscope/job.h"

class QTableWidget;
class QPlainTextEdit;

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

 signals:
  void cancelRequested(int id);
  void openRequested(int id);

 private:
  QTableWidget* table_;
  QPlainTextEdit* log_;
  std::vector<JobStatus> jobs_;
};

}  // namespace attnscope::views

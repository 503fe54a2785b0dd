// The workbench's document: what the window shows (the session's choices, the open model, the
// capture, the DoF spectra, the head metrics, the thumbnails and the selected head's maps) and the
// only place in app/gui/ that calls core's pipeline. Every long operation is a job on a core
// JobRunner (listed in the jobs view, with the attnscope command line that does the same work
// headless); its result comes back to the UI thread through a queued call and is announced by a
// signal. Nothing here blocks the UI thread on a job, and no exception leaves a public function or
// a slot: failures become error(title, message).
//
// The pipeline: open_model -> capture -> {spectra, metrics, maps of the selected head}. A capture
// writes into a fresh workspace folder under the cache (core's workspace.h: ~/.cache/attnscope/
// workspace/<time>/: text.txt when the text was typed, capture/, spectra.safetensors, runs/).
// Starting a stage again supersedes its running job: the old one is cancelled and its result,
// should it still arrive, is dropped. Opening a model starts a new document: nothing of the one
// before (capture, results, the Train tab's run, the session file) carries over.
#pragma once
#include <QObject>
#include <QString>
#include <QStringList>
#include <memory>
#include <optional>
#include <vector>

#include "attnscope/capture/capture.h"
#include "attnscope/distill/distill.h"
#include "attnscope/pipeline/linearize.h"
#include "attnscope/analysis/dof.h"
#include "attnscope/analysis/head_analysis.h"
#include "attnscope/analysis/head_detail.h"
#include "attnscope/base/job.h"
#include "attnscope/model/model.h"
#include "attnscope/run/run_dir.h"
#include "attnscope/run/run_metrics.h"
#include "attnscope/workbench/session.h"

class QTimer;

namespace attnscope::gui {

// What the DoF view shows for (lambda, budget, strategy): every head's DoF and convergence at lambda
// from the kept spectra and Algorithm 1's allocation. O(S H J): the slider path, on the UI thread.

class Workbench : public QObject {
  Q_OBJECT
 public:
  static constexpr int kThumbnailPixels = 48;

  explicit Workbench(QObject* parent = nullptr);
  // Cancels every job and waits for them, keeping the UI thread's events flowing meanwhile (a
  // report job may be waiting on it to draw a figure).
  ~Workbench() override;

  // ---- What is open (UI thread) ----
  const Session& session() const { return session_; }
  QString session_path() const { return session_path_; }  // "" until opened or saved
  std::shared_ptr<const LoadedModel> model() const { return model_; }
  std::shared_ptr<const CaptureStore> capture_store() const { return capture_; }
  std::shared_ptr<const DofSpectra> spectra() const { return spectra_; }
  const std::vector<HeadAnalysis>& analysis() const { return analysis_; }
  bool has_analysis() const { return has_analysis_; }
  const std::vector<std::vector<Matrix>>& thumbnails() const { return thumbnails_; }
  std::shared_ptr<const HeadDetail> head_detail() const { return head_detail_; }
  // The last set_dof_settings() result; empty before spectra exist.
  const std::optional<DofAllocation>& dof_state() const { return dof_state_; }
  // How many times set_dof_settings evaluated the DoF of every head (a new lambda or spectra); a
  // budget or strategy move only reallocates.
  int dof_evaluations() const { return dof_evaluations_; }
  // True once the current capture's spectra, metrics and selected head's maps are all in and no
  // stage is running (pipelineFinished() announces it).
  bool pipeline_finished() const;

  JobRunner& runner() { return *runner_; }
  std::vector<JobStatus> jobs() const;
  bool any_job_running() const;
  bool capture_running() const { return capture_job_ != 0; }
  bool spectra_running() const { return spectra_job_ != 0; }

  // Where captures go: ROOT/<time>/. Default core's default_workspace_root().
  void set_workspace_root(const QString& dir) { workspace_root_ = dir; }
  QString workspace_root() const { return workspace_root_; }
  // Removes workspace folders under `root` last modified more than `max_age_days` ago (the
  // window does this at start-up: a saved session holds copies, so the cache is only a cache).
  // Returns how many were removed.
  static int prune_workspaces(const QString& root, int max_age_days);
  // The workspace folders what the window shows lives in (the capture's, the run's): File >
  // Workspace… removes all but these.
  QStringList workspace_in_use() const;
  // The folder of the current capture's workspace ("" when the capture is not one of ours).
  QString workspace_dir() const { return workspace_dir_; }

  // ---- Choices for the next operations (no work starts) ----
  void set_texts(const QStringList& files, const QString& typed_text);
  void set_capture_options(const CaptureOptions& options);
  void set_dof_sampling(const DofSettings& settings);  // J, normalizer, seed of the next spectra
  void set_colour_scale(ColourScale scale);
  void set_metric(GridMetric metric);
  void set_view(View view);
  void set_train_settings(const TrainSettings& train);  // the Train form, for the session
  // Capture automatically once a model is open (the window's start-up; on by default).
  void set_auto_capture(bool on) { auto_capture_ = on; }

  // ---- Operations ----
  // Loads the model as a job ("model"); on success a new document (no capture, results, run or
  // session file; the texts and choices stay), modelChanged(), then a capture when auto-capture is
  // on and there is text. Returns the job id (0 when nothing started).
  int open_model(const QString& spec, const QString& tokenizer = {});
  // Captures the current texts with the current options into a new workspace; spectra, metrics
  // and the selected head's maps follow. Returns the job id, 0 (and error()) when it cannot start.
  int capture();
  int recompute_spectra();
  int recompute_metrics();
  // Selects a head and computes its maps in the background (newer requests supersede older ones).
  void select_head(int layer, int head);
  void set_seq(int seq);  // the text window (captured sequence) of the maps and thumbnails
  // The linear map of the maps and metrics: the feature map, its M and the hybrid's window W (0:
  // the map alone). A change recomputes the metrics and the selected head's maps.
  void set_feature_map(const QString& name, qint64 features, qint64 window, bool decayed = false);
  // DoF at lambda, convergence and Algorithm 1 under (budget, strategy), synchronously: O(S H J),
  // instant, so the sliders redraw as they move. Stored in the session; dofStateChanged().
  // Empty (and error()) without spectra or for a bad budget.
  std::optional<DofAllocation> set_dof_settings(double lambda, int64_t budget, AllocStrategy strategy);
  // The DoF view's state share (0: off): head types under a state budget, redone at once.
  std::optional<DofAllocation> set_state_share(double share);
  void set_multiple(int64_t multiple);  // dimensions rounded to a multiple of this
  // write_report into out_dir as a job (figures drawn on the UI thread). Returns the job id.
  int export_report(const QString& out_dir);

  // Opens a .attnscope file: its choices at once (sessionLoaded()), then the model, the capture
  // and spectra it names (recomputed, with a message, when they are gone), metrics and maps.
  bool open_session(const QString& path);
  // Writes the session. A capture still in the cache workspace is copied beside the file first
  // (PATH without .attnscope + ".data/"), so the session folder holds everything it names; that
  // copy runs as a job and sessionSaved() follows. Returns false (and error()) when it cannot
  // start.
  bool save_session(const QString& path);

  void cancel(int job_id);
  void cancel_all();

  // ---- Training: linearize, or distill only (SPEC 5-7; workbench_training.cpp) ----
  // The devices distill can use here: "cpu", and "cuda" when LibTorch sees a GPU.
  static QStringList distill_devices();
  // core's linearize() on the open model and the session's texts as a job ("linearize") into a new
  // run folder WORKSPACE/runs/linearize-MAP-<time>/, which becomes the current run: its own capture at
  // the form's sequence length, stage 1 (distill), the converted model, stage 2 (low-rank finetune)
  // and the held-out evaluation (OUT/linearize.json). `t` is the Train form (linearize_options_of);
  // with the DoF view's allocation it is written to an allocation file beside the run. Returns the
  // job id, 0 (and error()) when it cannot start.
  int start_linearize(const TrainSettings& t);
  // Distills on the current capture as a job ("distill") into a new run folder
  // WORKSPACE/runs/<time>/, which becomes the current run. `t` is the Train form: the map, loss,
  // steps, learning rates, batch, schedule, checkpoint interval, device, and M for every head or the
  // DoF view's allocation as it is shown (written to an allocation file beside the run). Loss
  // "direct" trains on the session's texts. Returns the job id, 0 (and error()) when it cannot start.
  int start_distill(const TrainSettings& t);
  // Continues the current run: a distill run from its last checkpoint (distill(..., resume = true)),
  // a linearize run at the stage it stopped in (resume_linearize).
  int resume_distill();
  // The current run's final model (RUN/model of a finished linearize run), "" when there is none.
  QString final_model() const;
  // Copies it to `out` as a job (core's save_model_copy: nothing at `out` unless all was copied).
  int save_final_model(const QString& out);
  // Makes an existing run folder (a distill or a linearize run) the current run: its metrics, state
  // and, for a finished linearize run, its report are read at once. error() for a job.json or
  // linearize.json that cannot be read.
  void open_run(const QString& run_dir);
  QString run_dir() const { return run_dir_; }
  bool linearize_run() const { return linearize_run_; }  // the current run is a linearize run
  // Stage 1's metrics (a distill run's metrics.jsonl; a linearize run's OUT/stage1/metrics.jsonl).
  const RunMetrics& training_metrics() const { return metrics_tail_.metrics(); }
  // Stage 2's (OUT/stage2/metrics.jsonl of a linearize run; empty otherwise).
  const FinetuneMetrics& finetune_metrics() const { return finetune_tail_.metrics(); }
  // OUT/linearize.json of a finished linearize run (empty before).
  const std::optional<LinearizeReport>& linearize_report() const { return linearize_report_; }
  bool training_running() const { return distill_job_ != 0; }
  // The current run's state (core's run_state, Running while its job runs here); none without a run.
  std::optional<RunState> run_state() const;
  bool can_resume() const;   // killed (cancelled or stopped), with a checkpoint (distill), and nothing of the run running
  // The step of the run's last complete checkpoint (where Resume continues), 0 when there is none;
  // Error naming the file when the checkpoint cannot be read.
  int64_t checkpoint_step() const;
  // The steps the current run asks for (job.json), 0 when unknown: stage 1's and stage 2's.
  int64_t run_steps() const { return run_steps_; }
  int64_t finetune_steps() const { return finetune_steps_; }
  std::string run_command() const { return run_command_; }  // its `attnscope linearize|distill ...`
  // attnscope_linear.py, copied into every converted model (default: the source tree's resources).
  void set_python_module(const QString& path) { python_module_ = path.toStdString(); }

  // ---- Command lines of what is shown (Copy as command) ----
  std::string maps_command() const;
  std::string metrics_command() const;
  std::string dof_command() const;
  std::string allocate_command() const;
  // The DoF view's state budget (StateBudget: the share, the capture's length and key/value heads,
  // the Train form's window); not given while the share is off or there is no capture.
  StateBudget state_budget() const;
  // The texts a capture would read (typed text: the workspace's text.txt, once written).
  std::vector<std::string> text_files() const;

 signals:
  void modelChanged();
  // A new model is being opened (not a session's): the views drop the current model's results;
  // modelOpenFailed() when it does not open (the current model stays, its results are shown again).
  void modelOpening(const QString& spec);
  void modelOpenFailed();
  void captureReady();
  void thumbnailsReady();
  void spectraReady();
  void analysisReady();
  void headDetailReady();
  void dofStateChanged();
  void jobsChanged();  // a job started or finished (the window polls progress in between)
  void sessionLoaded();
  void sessionSaved(const QString& path);
  void pipelineFinished();
  void trainingChanged();         // the current run, its state, its metrics or its report changed
  void message(const QString& text);  // for the status bar: not an error, worth saying
  void error(const QString& title, const QString& message);

 private:
  using Apply = std::function<void()>;
  // Starts a job whose work returns the UI-thread step that applies its result; that step runs
  // only when the job succeeded and `*current` still holds its id (else it was superseded). Job
  // failures become error(); cancellations are silent. `current` may be null.
  int start(JobKind kind, const std::string& title, const std::string& command,
            std::function<Apply(Job&)> work, int* current,
            std::function<void(JobState, bool wanted)> after = nullptr);
  void supersede(int* current);  // cancels the job *current names, and forgets it
  void fail(const QString& title, const std::exception& e);  // the message with its control's words
  void close_run();  // forgets the current run (a new model); its jobs are cancelled
  bool require_capture(const QString& what);

  void start_spectra();
  void start_metrics();
  void schedule_metrics();  // start_metrics after the debounce (see metrics_debounce_)
  void start_maps();
  void load_spectra_file(const std::string& path);
  void use_capture(std::shared_ptr<const CaptureStore> store, bool keep_spectra_path);
  void after_model_loaded();
  void check_pipeline();
  void stop_stages();
  // Forgets what was measured on the capture (spectra, DoF state, metrics, thumbnails, head view).
  void clear_results();  // cancels capture, spectra, metrics and maps jobs and forgets them
  QString new_workspace();
  void poll_metrics();  // reads what the run appended to metrics.jsonl; trainingChanged() when new
  void distill_ended();  // a training job ended: the last metrics (and report), then trainingChanged()
  void forget_run();     // no current run (its job, if any, is the caller's)
  void follow_run(const std::string& run, bool linearize);  // the current run: its folder and tails
  // A new training run (distill or linearize) in `run`, followed by the tab (curves, Resume, Open
  // run): forgets the old run, starts `work` as the tab's training job and the metrics timer.
  int start_run(JobKind kind, const std::string& title, const std::string& command, const std::string& run,
                int64_t steps, int64_t finetune_steps, std::function<void(Job&)> work);
  QString new_run_dir(const std::string& name);  // WORKSPACE/runs/NAME-<time>, not created

  std::unique_ptr<JobRunner> runner_;
  Session session_;
  std::shared_ptr<const LoadedModel> model_;
  std::shared_ptr<const CaptureStore> capture_;
  std::shared_ptr<const DofSpectra> spectra_;
  std::vector<HeadAnalysis> analysis_;
  bool has_analysis_ = false;
  // The capture's softmax-side head metrics, kept across feature-map, M and window changes (only
  // the linear side is computed again); a new capture gets a new one.
  std::shared_ptr<SoftmaxSideCache> softmax_cache_;
  // Feature-map, M and window changes stop the metrics job at once and start it again once this
  // timer has seen no change for kMetricsDebounceMs: one restart after a burst, not one per change.
  QTimer* metrics_debounce_ = nullptr;
  static constexpr int kMetricsDebounceMs = 400;
  std::vector<std::vector<Matrix>> thumbnails_;
  int thumbnails_seq_ = -1;
  std::shared_ptr<const HeadDetail> head_detail_;
  std::optional<DofAllocation> dof_state_;
  std::shared_ptr<const DofSpectra> dof_spectra_;  // the spectra dof_state_'s DoF came from
  int dof_evaluations_ = 0;

  QString session_path_;
  QString workspace_root_, workspace_dir_;
  std::string text_file_;  // the typed text saved for the current capture
  bool auto_capture_ = true;
  bool restoring_session_ = false;
  bool pipeline_announced_ = false;
  bool closing_ = false;  // in the destructor: no result is applied, no job starts

  // The job of each stage whose result is wanted (0: none).
  int model_job_ = 0, capture_job_ = 0, spectra_job_ = 0, metrics_job_ = 0, maps_job_ = 0, save_job_ = 0;
  bool maps_pending_ = false;  // a newer maps request waits for the running one to stop

  // Training: the current run folder, its metrics as read so far, and its job.
  QString run_dir_;
  bool linearize_run_ = false;
  MetricsTail metrics_tail_;    // stage 1
  FinetuneTail finetune_tail_;  // stage 2 (linearize runs)
  std::optional<LinearizeReport> linearize_report_;
  QTimer* metrics_timer_ = nullptr;  // tails metrics.jsonl while the job runs
  int64_t run_steps_ = 0, finetune_steps_ = 0;
  std::string run_command_;
  int distill_job_ = 0;  // the training job (distill, linearize or a resume): one at a time
  std::string python_module_;
};

}  // namespace attnscope::gui

#include "workbench.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QMetaObject>
#include <QStandardPaths>
#include <QTimer>
#include <algorithm>
#include <filesystem>

#include "attnscope/convert/converted_model.h"
#include "attnscope/allocation/allocation.h"
#include "attnscope/base/error.h"
#include "attnscope/base/file_tree.h"
#include "attnscope/pipeline/report.h"
#include "attnscope/base/text_file.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/io/text_source.h"
#include "attnscope/workbench/workspace.h"
#include "command_lines.h"
#include "control_names.h"
#include "ui_thread_figure_writer.h"
#include "qt_strings.h"

namespace fs = std::filesystem;

namespace attnscope::gui {

namespace {

std::string base_name(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  return name.empty() ? p.parent_path().filename().string() : name;
}

// True when `path` lies under `root` (both made absolute and normal).
bool is_under(const std::string& path, const std::string& root) {
  if (path.empty() || root.empty()) return false;
  const std::string p = fs::absolute(path).lexically_normal().string();
  std::string r = fs::absolute(root).lexically_normal().string();
  if (!r.empty() && r.back() != '/') r += '/';
  return p.rfind(r, 0) == 0;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || fs::equivalent(a, b, ec);
}

// A session's data folder: PATH without its .attnscope extension, plus ".data".
std::string data_dir_for(const std::string& session_path) {
  fs::path p(session_path);
  if (p.extension() == ".attnscope") p.replace_extension();
  return p.string() + ".data";
}

}  // namespace

Workbench::Workbench(QObject* parent) : QObject(parent), runner_(std::make_unique<JobRunner>()) {
  // ~/.cache/attnscope/workspace: core's, which `attnscope workspace` lists and cleans too.
  workspace_root_ = to_q(default_workspace_root());
  // The report's linear maps (PRF, M = 64) and mixers (N = 16): the heads view then shows
  // softmax | linear | difference from the start, and Export report measures the same.
  session_.analysis = ReportOptions::default_report_analysis();
  session_.metric = GridMetric::SoftmaxEntropy;
  // On a linear scale most of a long map is one colour; log shows where the weight goes at once.
  session_.colour_scale = ColourScale::Log;
  python_module_ = std::string(ATTNSCOPE_RESOURCES) + "/python/attnscope_linear.py";
  // A running distillation appends to metrics.jsonl every step: the loss curves follow it.
  metrics_timer_ = new QTimer(this);
  metrics_timer_->setInterval(300);
  connect(metrics_timer_, &QTimer::timeout, this, &Workbench::poll_metrics);
  metrics_debounce_ = new QTimer(this);
  metrics_debounce_->setSingleShot(true);
  metrics_debounce_->setInterval(kMetricsDebounceMs);
  connect(metrics_debounce_, &QTimer::timeout, this, &Workbench::start_metrics);
}

Workbench::~Workbench() {
  closing_ = true;
  runner_->cancel_all();
  // Joins every job's thread. A job waiting on the UI thread for a figure gives up once cancelled
  // (UiThreadFigureWriter), so this cannot deadlock; results posted meanwhile are discarded with
  // this object.
  runner_.reset();
}

// ---- jobs ----

int Workbench::start(JobKind kind, const std::string& title, const std::string& command,
                     std::function<Apply(Job&)> work, int* current, std::function<void(JobState, bool)> after) {
  if (closing_) return 0;
  auto apply = std::make_shared<Apply>();
  auto job = runner_->start(
      kind, title, command, [work = std::move(work), apply](Job& j) { *apply = work(j); },
      [this, apply, current, after, title](Job& j) {
        const JobStatus st = j.status();
        // The quantity a failure is about, for the control's words in the message (its text is
        // st.error already; anything but an Error has no quantity).
        std::string quantity;
        if (st.state == JobState::Failed) {
          try {
            j.rethrow();
          } catch (const Error& e) {
            quantity = e.quantity();
          } catch (...) {
          }
        }
        // Back on the UI thread; dropped with this object when it is gone by then.
        QMetaObject::invokeMethod(
            this,
            [this, apply, current, after, title, st, quantity] {
              if (closing_) return;
              const bool wanted = current == nullptr || *current == st.id;
              if (current && wanted) *current = 0;
              if (wanted && st.state == JobState::Succeeded && *apply) {
                try {
                  (*apply)();
                } catch (const std::exception& e) {
                  fail(to_q(title), e);
                }
              } else if (wanted && st.state == JobState::Failed) {
                emit error(tr("%1 failed").arg(to_q(title)), message_with_control(st.error, quantity));
              }
              if (after) {
                try {
                  after(st.state, wanted);
                } catch (const std::exception& e) {
                  fail(to_q(title), e);
                }
              }
              emit jobsChanged();
              check_pipeline();
            },
            Qt::QueuedConnection);
      });
  if (current) *current = job->id();
  emit jobsChanged();
  return job->id();
}

void Workbench::supersede(int* current) {
  if (*current == 0) return;
  if (auto job = runner_->find(*current)) job->cancel();
  *current = 0;
}

void Workbench::stop_stages() {
  supersede(&capture_job_);
  supersede(&spectra_job_);
  supersede(&metrics_job_);
  supersede(&maps_job_);
  maps_pending_ = false;
}

void Workbench::clear_results() {
  spectra_.reset();
  dof_state_.reset();
  analysis_.clear();
  has_analysis_ = false;
  thumbnails_.clear();
  thumbnails_seq_ = -1;
  head_detail_.reset();
}

void Workbench::fail(const QString& title, const std::exception& e) { emit error(title, message_with_control(e)); }

std::vector<JobStatus> Workbench::jobs() const {
  std::vector<JobStatus> out;
  for (const auto& j : runner_->jobs()) out.push_back(j->status());
  return out;
}

bool Workbench::any_job_running() const {
  for (const auto& j : runner_->jobs())
    if (!j->status().finished()) return true;
  return false;
}

void Workbench::cancel(int job_id) {
  if (auto job = runner_->find(job_id)) job->cancel();
  emit jobsChanged();
}

void Workbench::cancel_all() {
  runner_->cancel_all();
  maps_pending_ = false;
  emit jobsChanged();
}

bool Workbench::pipeline_finished() const {
  return capture_ && spectra_ && has_analysis_ && head_detail_ && model_job_ == 0 && capture_job_ == 0 &&
         spectra_job_ == 0 && metrics_job_ == 0 && maps_job_ == 0;
}

void Workbench::check_pipeline() {
  if (pipeline_announced_ || !pipeline_finished()) return;
  pipeline_announced_ = true;
  emit pipelineFinished();
}

// ---- choices ----

void Workbench::set_texts(const QStringList& files, const QString& typed_text) {
  session_.texts.clear();
  for (const QString& f : files) session_.texts.push_back(to_std(f));
  if (to_std(typed_text) != session_.text) text_file_.clear();  // written again at the next capture
  session_.text = to_std(typed_text);
}

void Workbench::set_capture_options(const CaptureOptions& options) { session_.capture = options; }
void Workbench::set_dof_sampling(const DofSettings& settings) { session_.dof = settings; }
void Workbench::set_colour_scale(ColourScale scale) { session_.colour_scale = scale; }
void Workbench::set_metric(GridMetric metric) { session_.metric = metric; }
void Workbench::set_view(View view) { session_.view = view; }
void Workbench::set_train_settings(const TrainSettings& train) { session_.train = train; }
void Workbench::set_multiple(int64_t multiple) {
  session_.multiple = std::max<int64_t>(1, multiple);
  set_dof_settings(session_.lambda, session_.budget, session_.strategy);
}

std::vector<std::string> Workbench::text_files() const {
  if (!session_.texts.empty()) return session_.texts;
  if (!text_file_.empty()) return {text_file_};
  return {};
}

// ---- model ----

int Workbench::open_model(const QString& spec_q, const QString& tokenizer_q) {
  const std::string spec = to_std(spec_q.trimmed()), tokenizer = to_std(tokenizer_q.trimmed());
  if (spec.empty()) {
    emit error("Open model", "No model given: choose a model folder, a llama2.c .bin file or a Hugging Face name.");
    return 0;
  }
  supersede(&model_job_);
  Session s = session_;
  s.model = spec;
  s.tokenizer = tokenizer;
  const bool restoring = restoring_session_;
  if (!restoring) emit modelOpening(spec_q.trimmed());
  return start(
      JobKind::Model, "open " + base_name(spec), info_command(s),
      [this, spec, tokenizer](Job& job) -> Apply {
        job.progress()(0, "loading " + spec);
        auto m = std::make_shared<const LoadedModel>(load_model(spec, tokenizer));
        job.progress()(1, "loaded " + m->path);
        return [this, m, spec, tokenizer] {
          model_ = m;
          session_.model = spec;
          session_.tokenizer = tokenizer;
          if (!restoring_session_) {
            // A new document: the session file and the Train tab's run belong to the model before,
            // and its budget and lambda start from this model's defaults (issue 26: a budget set for
            // head dim 32 gave a head-dim-8 model M = 401).
            session_path_.clear();
            close_run();
            session_.budget = default_budget(session_.train.linearize.stage1.feature_map, m->model->config().head_dim);
            session_.lambda = kDefaultLambda;
          }
          emit modelChanged();
          after_model_loaded();
        };
      },
      &model_job_, [this, restoring](JobState st, bool wanted) {
        if (wanted && st != JobState::Succeeded) {
          restoring_session_ = false;
          if (!restoring) emit modelOpenFailed();
        }
      });
}

void Workbench::after_model_loaded() {
  const bool restoring = restoring_session_;
  restoring_session_ = false;
  if (!restoring) {
    // A new model: what was measured belongs to the old one.
    stop_stages();
    capture_.reset();
    clear_results();
    session_.capture_dir.clear();
    session_.spectra.clear();
    workspace_dir_.clear();
    text_file_.clear();
    pipeline_announced_ = false;
    session_.layer = session_.head = session_.seq = 0;
    emit captureReady();  // the views clear
    if (auto_capture_ && (!session_.texts.empty() || !session_.text.empty())) capture();
    return;
  }
  // A session: its capture and spectra when they are still there, else computed again.
  if (!session_.capture_dir.empty()) {
    try {
      auto store = std::make_shared<const CaptureStore>(session_.capture_dir);
      use_capture(store, /*keep_spectra_path=*/true);
      if (!session_.spectra.empty() && fs::exists(session_.spectra)) {
        load_spectra_file(session_.spectra);
      } else {
        if (!session_.spectra.empty())
          emit message("The session's spectra " + to_q(session_.spectra) + " are gone: computing them again.");
        start_spectra();
      }
      start_metrics();
      start_maps();
      return;
    } catch (const std::exception& e) {
      emit message("The session's capture cannot be read (" + QString::fromUtf8(e.what()) + "): capturing again.");
    }
  }
  session_.capture_dir.clear();
  session_.spectra.clear();
  if (!session_.texts.empty() || !session_.text.empty()) capture();
}

// ---- capture ----

int Workbench::prune_workspaces(const QString& root, int max_age_days) {
  return int(attnscope::clean_workspace(to_std(root), {}, max_age_days).size());
}

QStringList Workbench::workspace_in_use() const {
  QStringList out;
  if (!workspace_dir_.isEmpty()) out << workspace_dir_;
  // The folder under the root that holds the run (or the capture, when it is not our own).
  fs::path root = fs::absolute(to_std(workspace_root_)).lexically_normal();
  if (root.filename().empty()) root = root.parent_path();  // "ROOT/" -> "ROOT"
  for (const std::string& used : {to_std(run_dir_), session_.capture_dir}) {
    if (used.empty()) continue;
    for (fs::path p = fs::absolute(used).lexically_normal(); p.has_parent_path() && p != p.parent_path(); p = p.parent_path())
      if (p.parent_path() == root) {
        out << to_q(p.string());
        break;
      }
  }
  out.removeDuplicates();
  return out;
}

QString Workbench::new_workspace() {
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss-zzz");
  QString dir = workspace_root_ + "/" + stamp;
  for (int i = 2; QFileInfo::exists(dir); ++i) dir = workspace_root_ + "/" + stamp + "-" + QString::number(i);
  if (!QDir().mkpath(dir)) throw Error(to_std(dir) + ": cannot create the workspace folder");
  return dir;
}

int Workbench::capture() {
  try {
    if (!model_) throw Error("No model is open: open a model first (File > Open model folder).");
    if (session_.texts.empty() && QString::fromStdString(session_.text).trimmed().isEmpty())
      throw Error("No sample text: add a text file or type some text in the editor.");
    CaptureOptions opt = session_.capture;
    opt.fewer_windows_ok = true;  // the window's T is a most: a short text gives the windows it has (issue 26)
    const int n_ctx = model_->model->config().n_ctx;
    if (opt.seq_len > n_ctx)
      attnscope::fail_value("sequence length", std::to_string(opt.seq_len) + " exceeds the model's context length " +
                                        std::to_string(n_ctx));
    stop_stages();
    const QString ws = new_workspace();
    std::vector<std::string> files = session_.texts;
    std::string typed_file;
    if (files.empty()) {
      // Typed text goes to a file, so the job's command line can name it.
      typed_file = to_std(ws + "/text.txt");
      write_text_file(typed_file, session_.text);
      files = {typed_file};
    }
    const std::string out = to_std(ws + "/capture");
    auto model = model_;
    // T is a most here (a short text gives the windows it has): the title says so.
    const std::string title =
        "capture up to " + std::to_string(opt.num_seqs) + " x " + std::to_string(opt.seq_len) + " tokens";
    return start(
        JobKind::Capture, title, capture_command(session_, files, out),
        [this, model, files, opt, out, ws, typed_file](Job& job) -> Apply {
          const auto docs = read_text_documents(files);
          auto store = std::make_shared<const CaptureStore>(capture_to_dir(*model, docs, opt, out, job.progress()));
          if (store->num_seqs() < opt.num_seqs)
            job.log(std::to_string(store->num_seqs()) + " windows of " + std::to_string(opt.seq_len) +
                    " tokens: the text is short (" + std::to_string(opt.num_seqs) + " at most)");
          return [this, store, ws, typed_file] {
            workspace_dir_ = ws;
            if (!typed_file.empty()) text_file_ = typed_file;
            use_capture(store, /*keep_spectra_path=*/false);
            start_spectra();
            start_metrics();
            start_maps();
          };
        },
        &capture_job_,
        [ws](JobState st, bool wanted) {
          // A failed, cancelled or superseded capture leaves nothing behind in the workspace.
          if (!(st == JobState::Succeeded && wanted)) {
            std::error_code ec;
            remove_tree(to_std(ws), ec);
          }
        });
  } catch (const std::exception& e) {
    fail("Capture", e);
    return 0;
  }
}

void Workbench::use_capture(std::shared_ptr<const CaptureStore> store, bool keep_spectra_path) {
  capture_ = std::move(store);
  softmax_cache_ = std::make_shared<SoftmaxSideCache>();
  session_.capture_dir = capture_->dir();
  if (!keep_spectra_path) session_.spectra.clear();
  clear_results();
  pipeline_announced_ = false;
  // The selection stays where it was when the new capture has that head and window.
  if (session_.layer >= capture_->num_layers()) session_.layer = 0;
  if (session_.head >= capture_->num_heads()) session_.head = 0;
  if (session_.seq >= capture_->num_seqs()) session_.seq = 0;
  emit captureReady();
}

bool Workbench::require_capture(const QString& what) {
  if (capture_) return true;
  emit error(what, "Nothing is captured yet: run Analysis > Capture first.");
  return false;
}

// ---- spectra ----

void Workbench::start_spectra() {
  if (!capture_) return;
  supersede(&spectra_job_);
  spectra_.reset();
  dof_state_.reset();
  try {
    if (workspace_dir_.isEmpty()) workspace_dir_ = new_workspace();  // a capture of a session
  } catch (const std::exception& e) {
    fail("DoF spectra", e);
    return;
  }
  const std::string out = to_std(workspace_dir_ + "/spectra.safetensors");
  const DofSettings settings = session_.dof;
  auto store = capture_;
  start(
      JobKind::Spectra, "DoF spectra (J = " + std::to_string(settings.samples) + ")",
      spectra_command(session_.capture_dir, settings, out),
      [this, store, settings, out](Job& job) -> Apply {
        auto sp = std::make_shared<const DofSpectra>(compute_spectra(*store, settings, job.progress()));
        job.progress()(1, "saving " + out);
        save_spectra(out, *sp);
        return [this, sp, out] {
          spectra_ = sp;
          session_.spectra = out;
          emit spectraReady();
          set_dof_settings(session_.lambda, session_.budget, session_.strategy);
        };
      },
      &spectra_job_);
}

void Workbench::load_spectra_file(const std::string& path) {
  supersede(&spectra_job_);
  auto store = capture_;
  start(
      JobKind::Spectra, "load DoF spectra", load_spectra_command(path),
      [this, path, store](Job& job) -> Apply {
        job.progress()(0, "reading " + path);
        auto sp = std::make_shared<const DofSpectra>(load_spectra(path));
        if (store && (sp->num_layers != store->num_layers() || sp->num_heads != store->num_heads()))
          attnscope::fail(path, "these spectra have " + std::to_string(sp->num_layers) + " x " + std::to_string(sp->num_heads) +
                         " heads, the capture " + std::to_string(store->num_layers()) + " x " +
                         std::to_string(store->num_heads()));
        return [this, sp, path] {
          spectra_ = sp;
          session_.spectra = path;
          emit spectraReady();
          set_dof_settings(session_.lambda, session_.budget, session_.strategy);
        };
      },
      &spectra_job_);
}

int Workbench::recompute_spectra() {
  if (!require_capture("Recompute spectra")) return 0;
  start_spectra();
  return spectra_job_;
}

StateBudget Workbench::state_budget() const {
  StateBudget b;
  if (!(session_.state_share > 0) || !capture_) return b;  // off, or nothing to count it at yet
  // At the capture's length, with the Train form's window for the map heads (none if it would not fit).
  b = {0, session_.state_share, capture_->seq_len(), session_.train.linearize.stage1.window, capture_->num_kv_heads(), 4};
  if (b.window >= b.context) b.window = 0;
  return b;
}

std::optional<DofAllocation> Workbench::set_state_share(double share) {
  session_.state_share = share;
  return set_dof_settings(session_.lambda, session_.budget, session_.strategy);
}

std::optional<DofAllocation> Workbench::set_dof_settings(double lambda, int64_t budget, AllocStrategy strategy) {
  session_.lambda = lambda;
  session_.budget = budget;
  session_.strategy = strategy;
  if (!spectra_) return std::nullopt;
  try {
    AllocOptions o;
    o.strategy = strategy;
    o.budget = budget;
    o.multiple = session_.multiple;
    o.state = state_budget();
    // A budget or strategy move keeps the DoF of every head: only the allocation is redone.
    const auto compute = [&](const AllocOptions& a) {
      if (dof_state_ && dof_state_->lambda == lambda && dof_spectra_ == spectra_) {
        dof_state_ = reallocate(*dof_state_, spectra_->head_dim, a);
      } else {
        dof_state_ = allocation_at(*spectra_, lambda, a);
        dof_spectra_ = spectra_;
        ++dof_evaluations_;
      }
    };
    try {
      compute(o);
    } catch (const Error& e) {
      // A share the maps alone exceed (or above the cache) is the slider's setting, not a failure:
      // the allocation without types, and the panel says why.
      if (e.quantity() != "state budget" || !o.state.given()) throw;
      o.state = {};
      compute(o);
      dof_state_->allocation.state_note = e.what();
    }
    emit dofStateChanged();
    return dof_state_;
  } catch (const std::exception& e) {
    fail("DoF and allocation", e);
    return std::nullopt;
  }
}

// ---- metrics and maps ----

void Workbench::schedule_metrics() {
  supersede(&metrics_job_);  // out of date now: stop it at its next head
  analysis_.clear();
  has_analysis_ = false;
  metrics_debounce_->start();  // (re)starts the wait
}

void Workbench::start_metrics() {
  metrics_debounce_->stop();
  if (!capture_) return;
  supersede(&metrics_job_);
  analysis_.clear();
  has_analysis_ = false;
  const AnalysisOptions opt = session_.analysis;
  auto store = capture_;
  auto cache = softmax_cache_;
  const std::string title =
      "metrics" + (opt.feature_map.empty() ? std::string(" (softmax)")
                   : " (" + opt.feature_map + (opt.window > 0 ? ", hybrid window " + std::to_string(opt.window) : "") + ")");
  start(
      JobKind::Metrics, title, gui::metrics_command(session_.capture_dir, opt),
      [this, store, opt, cache](Job& job) -> Apply {
        auto heads = std::make_shared<std::vector<HeadAnalysis>>(analyze_capture(*store, opt, job.progress(), cache.get()));
        return [this, heads] {
          analysis_ = std::move(*heads);
          has_analysis_ = true;
          emit analysisReady();
        };
      },
      &metrics_job_);
}

int Workbench::recompute_metrics() {
  if (!require_capture("Recompute metrics")) return 0;
  start_metrics();
  return metrics_job_;
}

void Workbench::start_maps() {
  if (!capture_ || closing_) return;
  if (maps_job_ != 0) {
    // The running request is out of date: stop it at its next step and start this one after it.
    maps_pending_ = true;
    if (auto job = runner_->find(maps_job_)) job->cancel();
    return;
  }
  auto store = capture_;
  const int layer = session_.layer, head = session_.head, seq = session_.seq;
  const AnalysisOptions opt = session_.analysis;
  const bool need_thumbs = thumbnails_seq_ != seq || thumbnails_.empty();
  const std::string title = "maps of layer " + std::to_string(layer) + " head " + std::to_string(head) +
                            ", text window " + std::to_string(seq);
  start(
      JobKind::Maps, title, gui::maps_command(session_.capture_dir, layer, head, seq, opt),
      [this, store, layer, head, seq, opt, need_thumbs](Job& job) -> Apply {
        const ProgressFn progress = job.progress();
        if (need_thumbs) {
          auto thumbs = std::make_shared<std::vector<std::vector<Matrix>>>(
              head_thumbnails(*store, seq, kThumbnailPixels, sub_progress(progress, 0, 0.5)));
          // The grid shows as soon as it is ready, even when the head's maps are superseded.
          QMetaObject::invokeMethod(
              this,
              [this, store, seq, thumbs] {
                if (closing_ || capture_ != store) return;
                thumbnails_ = std::move(*thumbs);
                thumbnails_seq_ = seq;
                emit thumbnailsReady();
              },
              Qt::QueuedConnection);
        }
        progress(0.5, "layer " + std::to_string(layer) + " head " + std::to_string(head));
        auto view = std::make_shared<const HeadDetail>(attnscope::head_detail(*store, layer, head, seq, opt));
        progress(1, "maps ready");  // a request superseded meanwhile ends here, cancelled
        return [this, view] {
          head_detail_ = view;
          emit headDetailReady();
        };
      },
      &maps_job_, [this](JobState, bool) {
        if (!maps_pending_) return;
        maps_pending_ = false;
        start_maps();
      });
}

void Workbench::select_head(int layer, int head) {
  if (layer == session_.layer && head == session_.head && (head_detail_ || maps_job_)) return;
  if (capture_ && (layer < 0 || head < 0 || layer >= capture_->num_layers() || head >= capture_->num_heads())) return;
  session_.layer = layer;
  session_.head = head;
  start_maps();
}

void Workbench::set_seq(int seq) {
  if (seq == session_.seq && (head_detail_ || maps_job_)) return;
  if (capture_ && (seq < 0 || seq >= capture_->num_seqs())) return;
  session_.seq = seq;
  start_maps();
}

void Workbench::set_feature_map(const QString& name, qint64 features, qint64 window, bool decayed) {
  const std::string map = to_std(name);
  const Decay decay = decayed ? Decay::Fixed : Decay::None;
  if (map == session_.analysis.feature_map && features == session_.analysis.features &&
      window == session_.analysis.window && decay == session_.analysis.decay)
    return;
  session_.analysis.feature_map = map;
  session_.analysis.features = features;
  session_.analysis.window = window;
  session_.analysis.decay = decay;
  if (!capture_) return;
  schedule_metrics();
  start_maps();
}

// ---- report ----

QString Workbench::final_model() const {
  if (run_dir_.isEmpty() || run_state() != RunState::Finished) return {};
  const QString model = run_dir_ + "/model";
  return QFileInfo::exists(model + "/config.json") ? model : QString();
}

int Workbench::save_final_model(const QString& out_q) {
  const QString model = final_model();
  if (model.isEmpty()) {
    emit error("Save model", "The run has no final model yet: a linearize run has one once it has finished.");
    return 0;
  }
  const std::string src = to_std(model), out = to_std(out_q);
  return start(
      JobKind::Convert, "save model -> " + base_name(out), "cp -rL " + shell_quote(src) + " " + shell_quote(out),
      [this, src, out](Job& job) -> Apply {
        save_model_copy(src, out, job.progress());
        return [this, out] { emit message("Model saved to " + to_q(out)); };
      },
      nullptr);
}

int Workbench::export_report(const QString& out_dir_q) {
  try {
    if (!model_) throw Error("No model is open: open a model first.");
    const std::string out = to_std(out_dir_q);
    std::vector<std::string> texts = text_files();
    if (texts.empty()) {
      if (QString::fromStdString(session_.text).trimmed().isEmpty())
        throw Error("No sample text: add a text file or type some text in the editor.");
      const QString ws = new_workspace();
      text_file_ = to_std(ws + "/text.txt");
      write_text_file(text_file_, session_.text);
      texts = {text_file_};
    }
    // What the job runs and its command line, from one ReportOptions: `attnscope report` parses that
    // command line into exactly these options.
    const ReportOptions o = report_options_of(session_, texts);
    return start(
        JobKind::Report, "report -> " + base_name(out), report_command(o, out),
        [this, o, out](Job& job) -> Apply {
          const UiThreadFigureWriter figures([&job] { return job.cancel_requested(); });
          const ReportResult r = write_report(o, out, &figures, job.progress());
          const QString index = to_q(r.dir + "/index.md");
          return [this, index] { emit message("Report written to " + index); };
        },
        nullptr);
  } catch (const std::exception& e) {
    fail("Export report", e);
    return 0;
  }
}

// ---- sessions ----

bool Workbench::open_session(const QString& path) {
  Session s;
  try {
    s = load_session(to_std(path));
  } catch (const std::exception& e) {
    fail("Open session", e);
    return false;
  }
  supersede(&model_job_);
  stop_stages();
  close_run();
  session_ = s;
  session_path_ = QFileInfo(path).absoluteFilePath();
  workspace_dir_.clear();
  text_file_.clear();
  capture_.reset();
  clear_results();
  pipeline_announced_ = false;
  emit sessionLoaded();
  // The Train tab's run: its metrics and report come from its folder.
  if (!s.run_dir.empty()) {
    if (fs::is_directory(s.run_dir))
      open_run(to_q(s.run_dir));
    else
      emit message("The session's run " + to_q(s.run_dir) + " is gone: the Train tab starts empty.");
  }
  restoring_session_ = true;
  if (open_model(to_q(s.model), to_q(s.tokenizer)) == 0) {
    restoring_session_ = false;
    return false;
  }
  return true;
}

bool Workbench::save_session(const QString& path_q) {
  const std::string path = to_std(QFileInfo(path_q).absoluteFilePath());
  try {
    if (session_.model.empty()) throw Error("No model is open: there is nothing to save yet.");
    session_.run_dir = to_std(run_dir_);
    const std::string root = to_std(workspace_root_);
    const bool capture_in_cache = is_under(session_.capture_dir, root);
    const bool spectra_in_cache = is_under(session_.spectra, root) && fs::exists(session_.spectra);
    const bool run_in_cache = is_under(session_.run_dir, root) && fs::is_directory(session_.run_dir);
    if (run_in_cache && training_running())
      throw Error("The Train tab's run is still running: wait for it (or cancel it) before saving, so that the session "
                  "holds the whole run.");
    const Session snapshot = session_;
    if (!capture_in_cache && !spectra_in_cache && !run_in_cache) {
      attnscope::save_session(path, snapshot);
      session_path_ = to_q(path);
      emit sessionSaved(session_path_);
      return true;
    }
    // The capture, spectra or run live in the cache, which is no place for a session to point
    // at: copy them beside the file first, so the session folder holds all it names.
    const std::string data = data_dir_for(path);
    supersede(&save_job_);
    start(
        JobKind::Session, "save session " + base_name(path), "",
        [this, path, data, snapshot, capture_in_cache, spectra_in_cache, run_in_cache](Job& job) -> Apply {
          Session s = snapshot;
          fs::create_directories(data);
          // A folder copied whole under a temporary name, then renamed over the target.
          auto copy_folder = [](const std::string& from, const std::string& target) {
            const std::string partial = target + ".partial";
            std::error_code ec;
            remove_tree(partial, ec);
            fs::create_directories(fs::path(target).parent_path());
            fs::copy(from, partial, fs::copy_options::recursive);
            remove_tree(target);
            fs::rename(partial, target);
          };
          auto copy_file = [](const std::string& from, const std::string& target) {
            const std::string partial = target + ".partial";
            fs::copy_file(from, partial, fs::copy_options::overwrite_existing);
            fs::rename(partial, target);
          };
          if (capture_in_cache) {
            job.progress()(0, "copying the capture to " + data);
            copy_folder(snapshot.capture_dir, data + "/capture");
            s.capture_dir = data + "/capture";
          }
          if (spectra_in_cache) {
            job.progress()(0.6, "copying the spectra");
            copy_file(snapshot.spectra, data + "/spectra.safetensors");
            s.spectra = data + "/spectra.safetensors";
          }
          if (run_in_cache) {
            job.progress()(0.7, "copying the run " + snapshot.run_dir);
            const std::string name = fs::path(snapshot.run_dir).filename().string();
            const std::string target = data + "/runs/" + name;
            copy_folder(snapshot.run_dir, target);
            // What the run names beside itself (the allocation it trained with, direct's text).
            for (const char* suffix : {".allocation.json", ".text.txt"})
              if (fs::is_regular_file(snapshot.run_dir + suffix)) copy_file(snapshot.run_dir + suffix, target + suffix);
            // The copy's job.json names the copies (capture, allocation, text), so that it resumes
            // and converts from the session folder once the cache is cleaned.
            if (fs::is_regular_file(target + "/job.json") && !is_linearize_run(target)) {
              DistillJob j = read_distill_job(target);
              auto moved = [&](std::string& p, const std::string& from, const std::string& to) {
                if (!p.empty() && !from.empty() && same_file(p, from)) p = to;
              };
              if (capture_in_cache) moved(j.options.capture, snapshot.capture_dir, s.capture_dir);
              moved(j.options.allocation, snapshot.run_dir + ".allocation.json", target + ".allocation.json");
              moved(j.options.text, snapshot.run_dir + ".text.txt", target + ".text.txt");
              j.command = distill_command(j.options, target);
              write_text_file(target + "/job.json", distill_job_json(j));
            }
            s.run_dir = target;
          }
          job.progress()(0.95, "writing " + path);
          attnscope::save_session(path, s);
          return [this, s, path, snapshot] {
            session_.capture_dir = s.capture_dir;
            session_.spectra = s.spectra;
            session_path_ = to_q(path);
            // The Train tab follows its run to the copy (unless another run was opened meanwhile).
            if (s.run_dir != snapshot.run_dir && to_std(run_dir_) == snapshot.run_dir) open_run(to_q(s.run_dir));
            emit sessionSaved(session_path_);
          };
        },
        &save_job_);
    return true;
  } catch (const std::exception& e) {
    fail("Save session", e);
    return false;
  }
}

// ---- command lines ----

std::string Workbench::maps_command() const {
  if (session_.capture_dir.empty()) return "";
  return gui::maps_command(session_.capture_dir, session_.layer, session_.head, session_.seq, session_.analysis);
}

std::string Workbench::metrics_command() const {
  if (session_.capture_dir.empty()) return "";
  return gui::metrics_command(session_.capture_dir, session_.analysis);
}

std::string Workbench::dof_command() const {
  if (session_.spectra.empty()) return "";
  return gui::dof_command(session_.spectra, session_.lambda);
}

std::string Workbench::allocate_command() const {
  if (session_.spectra.empty()) return "";
  return gui::allocate_command(session_.spectra, session_.lambda, session_.budget, session_.strategy,
                               session_.multiple, state_budget());
}

}  // namespace attnscope::gui

#include "moc_workbench.cpp"

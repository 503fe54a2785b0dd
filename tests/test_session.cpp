// The workbench session file: every field survives a round trip, paths are stored relative to the
// file and still resolve after the whole project folder moves, and bad files are refused naming
// the file and the key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnscope/base/error.h"
#include "attnscope/workbench/session.h"
#include "test_support.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_session {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {

void touch(const fs::path& p) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << "x";
}

// A project folder with a model, two texts, a capture and a spectra file, and a session in a
// subfolder of it that refers to all of them.
struct Project {
  fs::path root;
  Session session;
};

Project make_project(const std::string& tag) {
  Project p;
  p.root = fs::path(test::temp_dir(tag)) / "project";
  touch(p.root / "models/m/config.json");
  touch(p.root / "models/m/tokenizer.json");
  touch(p.root / "texts/a.txt");
  touch(p.root / "texts/b c.txt");  // a space in a name
  touch(p.root / "runs/cap/manifest.json");
  touch(p.root / "runs/spectra.safetensors");
  fs::create_directories(p.root / "sessions");
  Session& s = p.session;
  s.model = (p.root / "models/m").string();
  s.tokenizer = (p.root / "models/m/tokenizer.json").string();
  s.texts = {(p.root / "texts/a.txt").string(), (p.root / "texts/b c.txt").string()};
  s.text = "typed \"text\"\nwith a newline";
  s.capture.seq_len = 128;
  s.capture.num_seqs = 3;
  s.capture.seed = 18446744073709551615ull;  // the largest seed survives (no double in between)
  s.capture.pre_rope = true;
  s.capture_dir = (p.root / "runs/cap").string();
  s.spectra = (p.root / "runs/spectra.safetensors").string();
  s.dof.samples = 777;
  s.dof.normalize = DofNormalize::Samples;
  s.dof.seed = 5;
  s.analysis.feature_map = "hedgehog";
  s.analysis.features = 32;
  s.analysis.window = 12;  // a hybrid map (SPEC 5)
  s.analysis.seed = 9;
  s.analysis.mixer_state = 4;
  s.lambda = 0.0123456789012345;
  s.budget = 48;
  s.strategy = AllocStrategy::PerHead;
  s.multiple = 8;
  s.state_share = 0.25;
  s.layer = 2, s.head = 3, s.seq = 1;
  s.colour_scale = ColourScale::RowNormalized;
  s.metric = GridMetric::Kl;
  s.view = View::Training;  // the fifth view (issue 18, defect 3: a session saved on it did not reopen)
  s.run_dir = (p.root / "runs/learned-prf-1").string();
  s.train.linearize.stage1.feature_map = "hedgehog";
  s.train.linearize.stage1.loss = DistillLoss::Softmax;
  s.train.linearize.stage1.steps = 321;
  s.train.linearize.stage1.lr = 0.0125;
  s.train.linearize.stage1.lr_alpha = 0.375;
  s.train.linearize.stage1.batch = 7;
  s.train.linearize.stage1.schedule = LrSchedule::Cosine;
  s.train.linearize.stage1.checkpoint_every = 9;
  s.train.linearize.stage1.device = Device::Cuda;
  s.train.from_allocation = false;
  s.train.linearize.stage1.features = 48;
  s.train.linearize.stage1.window = 24;
  s.train.linearize.seq_len = 96;
  s.train.linearize.stage2.steps = 7;
  s.train.linearize.stage2.rank = 3;
  return p;
}

// Equal in everything but the paths (compared by the caller).
void expect_same_settings(const Session& a, const Session& b) {
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.capture.seq_len, b.capture.seq_len);
  EXPECT_EQ(a.capture.num_seqs, b.capture.num_seqs);
  EXPECT_EQ(a.capture.seed, b.capture.seed);
  EXPECT_EQ(a.capture.pre_rope, b.capture.pre_rope);
  EXPECT_EQ(a.dof.samples, b.dof.samples);
  EXPECT_EQ(a.dof.normalize, b.dof.normalize);
  EXPECT_EQ(a.dof.seed, b.dof.seed);
  EXPECT_EQ(a.analysis.feature_map, b.analysis.feature_map);
  EXPECT_EQ(a.analysis.features, b.analysis.features);
  EXPECT_EQ(a.analysis.window, b.analysis.window);
  EXPECT_EQ(a.analysis.seed, b.analysis.seed);
  EXPECT_EQ(a.analysis.mixer_state, b.analysis.mixer_state);
  EXPECT_EQ(a.lambda, b.lambda);  // exactly: JSON keeps a double's 17 digits
  EXPECT_EQ(a.budget, b.budget);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(a.multiple, b.multiple);
  EXPECT_DOUBLE_EQ(a.state_share, b.state_share);
  EXPECT_EQ(a.layer, b.layer);
  EXPECT_EQ(a.head, b.head);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.colour_scale, b.colour_scale);
  EXPECT_EQ(a.metric, b.metric);
  EXPECT_EQ(a.view, b.view);
  EXPECT_EQ(a.train.linearize.stage1.feature_map, b.train.linearize.stage1.feature_map);
  EXPECT_EQ(a.train.linearize.stage1.loss, b.train.linearize.stage1.loss);
  EXPECT_EQ(a.train.linearize.stage1.steps, b.train.linearize.stage1.steps);
  EXPECT_EQ(a.train.linearize.stage1.lr, b.train.linearize.stage1.lr);
  EXPECT_EQ(a.train.linearize.stage1.lr_alpha, b.train.linearize.stage1.lr_alpha);
  EXPECT_EQ(a.train.linearize.stage1.batch, b.train.linearize.stage1.batch);
  EXPECT_EQ(a.train.linearize.stage1.schedule, b.train.linearize.stage1.schedule);
  EXPECT_EQ(a.train.linearize.stage1.checkpoint_every, b.train.linearize.stage1.checkpoint_every);
  EXPECT_EQ(a.train.linearize.stage1.device, b.train.linearize.stage1.device);
  EXPECT_EQ(a.train.from_allocation, b.train.from_allocation);
  EXPECT_EQ(a.train.linearize.stage1.features, b.train.linearize.stage1.features);
  EXPECT_EQ(a.train.linearize.stage1.window, b.train.linearize.stage1.window);
  EXPECT_EQ(a.train.linearize.seq_len, b.train.linearize.seq_len);
  EXPECT_EQ(a.train.linearize.stage2.steps, b.train.linearize.stage2.steps);
  EXPECT_EQ(a.train.linearize.stage2.rank, b.train.linearize.stage2.rank);
}

std::string resolved(const fs::path& p) { return fs::weakly_canonical(p).string(); }

// Writes `j` as a session file and returns the message of load_session's Error ("" when none).
std::string load_error(const nlohmann::ordered_json& j, const std::string& tag = "bad") {
  const std::string file = test::temp_dir("session_" + tag) + "/bad.attnscope";
  std::ofstream(file) << j.dump();
  return test::error_of([&] { load_session(file); });
}

nlohmann::ordered_json minimal() { return {{"format", "attnscope.session"}, {"version", 1}}; }

}  // namespace

TEST(Session, RoundTripsEveryFieldAndSurvivesMovingTheFolder) {
  Project p = make_project("session_rt");
  const fs::path file = p.root / "sessions/work.attnscope";
  save_session(file.string(), p.session);

  const Session back = load_session(file.string());
  expect_same_settings(p.session, back);
  EXPECT_EQ(back.model, resolved(p.root / "models/m"));
  EXPECT_EQ(back.tokenizer, resolved(p.root / "models/m/tokenizer.json"));
  ASSERT_EQ(back.texts.size(), 2u);
  EXPECT_EQ(back.texts[1], resolved(p.root / "texts/b c.txt"));
  EXPECT_EQ(back.capture_dir, resolved(p.root / "runs/cap"));
  EXPECT_EQ(back.spectra, resolved(p.root / "runs/spectra.safetensors"));
  EXPECT_EQ(back.run_dir, resolved(p.root / "runs/learned-prf-1"));

  // Move the whole project: the session still finds everything at its new place.
  const fs::path moved = p.root.parent_path() / "elsewhere" / "renamed";
  fs::create_directories(moved.parent_path());
  fs::rename(p.root, moved);
  ASSERT_FALSE(fs::exists(p.root));
  const Session after = load_session((moved / "sessions/work.attnscope").string());
  expect_same_settings(p.session, after);
  EXPECT_EQ(after.model, resolved(moved / "models/m"));
  EXPECT_TRUE(fs::exists(after.model));
  EXPECT_EQ(after.tokenizer, resolved(moved / "models/m/tokenizer.json"));
  ASSERT_EQ(after.texts.size(), 2u);
  EXPECT_EQ(after.texts[0], resolved(moved / "texts/a.txt"));
  EXPECT_TRUE(fs::exists(after.texts[1]));
  EXPECT_EQ(after.capture_dir, resolved(moved / "runs/cap"));
  EXPECT_TRUE(fs::exists(after.spectra));
}

TEST(Session, PathsAreStoredRelativeToTheFile) {
  Project p = make_project("session_rel");
  const fs::path file = p.root / "sessions/work.attnscope";
  save_session(file.string(), p.session);
  const auto j = nlohmann::json::parse(test::read_file(file.string()));
  EXPECT_EQ(j["format"], "attnscope.session");
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["model"], "../models/m");
  EXPECT_EQ(j["tokenizer"], "../models/m/tokenizer.json");
  EXPECT_EQ(j["texts"], nlohmann::json::array({"../texts/a.txt", "../texts/b c.txt"}));
  EXPECT_EQ(j["capture"]["dir"], "../runs/cap");
  EXPECT_EQ(j["spectra"], "../runs/spectra.safetensors");
  EXPECT_EQ(j["strategy"], "per-head");
  EXPECT_EQ(j["dof"]["normalize"], "samples");
  EXPECT_EQ(j["selection"]["head"], 3);
  // The atomic writer leaves no temporary beside the file.
  EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
}

TEST(Session, CacheNamesAndEmptyPathsStayAsTheyAre) {
  const std::string dir = test::temp_dir("session_names");
  Session s;
  s.model = "EleutherAI/pythia-70m";  // a Hugging Face cache name, not a path here
  const std::string file = dir + "/s.attnscope";
  save_session(file, s);
  const auto j = nlohmann::json::parse(test::read_file(file));
  EXPECT_EQ(j["model"], "EleutherAI/pythia-70m");
  EXPECT_EQ(j["tokenizer"], "");
  EXPECT_EQ(j["capture"]["dir"], "");
  EXPECT_EQ(j["spectra"], "");
  EXPECT_TRUE(j["texts"].empty());
  const Session back = load_session(file);
  EXPECT_EQ(back.model, "EleutherAI/pythia-70m");
  EXPECT_EQ(back.tokenizer, "");
  EXPECT_EQ(back.capture_dir, "");
  EXPECT_EQ(back.spectra, "");
  EXPECT_TRUE(back.texts.empty());
  // The defaults come back as they were.
  const Session defaults;
  expect_same_settings(defaults, back);
}

TEST(Session, AMissingCaptureIsNotAnErrorAndComesBackAbsolute) {
  const std::string dir = test::temp_dir("session_missing");
  nlohmann::ordered_json j = minimal();
  j["capture"] = {{"dir", "runs/gone"}};
  j["spectra"] = "runs/gone.safetensors";
  j["model"] = "../models/gone";  // a relative path that has gone: absolute, so errors say where
  std::ofstream(dir + "/s.attnscope") << j.dump();
  const Session s = load_session(dir + "/s.attnscope");
  EXPECT_EQ(s.capture_dir, resolved(fs::path(dir) / "runs/gone"));
  EXPECT_EQ(s.spectra, resolved(fs::path(dir) / "runs/gone.safetensors"));
  EXPECT_EQ(s.model, resolved(fs::path(dir) / "../models/gone"));
  EXPECT_TRUE(fs::path(s.model).is_absolute());
}

TEST(Session, MalformedFilesAreRefusedNamingTheFile) {
  const std::string dir = test::temp_dir("session_malformed");
  const std::string file = dir + "/broken.attnscope";
  std::ofstream(file) << "{\"format\": \"attnscope.session\", \"version\": 1,";  // cut off
  std::string msg = test::error_of([&] { load_session(file); });
  EXPECT_NE(msg.find(file), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;

  msg = test::error_of([&] { load_session(dir + "/none.attnscope"); });
  EXPECT_NE(msg.find("none.attnscope"), std::string::npos) << msg;

  std::ofstream(file) << "[1, 2]";
  EXPECT_NE(test::error_of([&] { load_session(file); }).find("not an attnscope session"), std::string::npos);

  // Saving into a folder that does not exist names the file.
  const Session blank;
  msg = test::error_of([&] { save_session(dir + "/no/such/s.attnscope", blank); });
  EXPECT_NE(msg.find("no/such/s.attnscope"), std::string::npos) << msg;
}

TEST(Session, WrongFormatOrVersionIsRefused) {
  auto j = minimal();
  j["format"] = "attnscope-capture";
  EXPECT_NE(load_error(j).find("not an attnscope session"), std::string::npos);
  j = minimal();
  j.erase("format");
  EXPECT_NE(load_error(j).find("not an attnscope session"), std::string::npos);
  j = minimal();
  j["version"] = 2;
  std::string msg = load_error(j);
  EXPECT_NE(msg.find("bad.attnscope"), std::string::npos) << msg;
  EXPECT_NE(msg.find("version 2 is not supported"), std::string::npos) << msg;
  j["version"] = "1";
  EXPECT_NE(load_error(j).find("version \"1\" is not supported"), std::string::npos);
  EXPECT_EQ(load_error(minimal()), "") << "format and version alone are a valid session";
}

TEST(Session, WrongTypesAndValuesNameTheKey) {
  struct Case {
    const char* key;  // dotted: one level of nesting
    nlohmann::ordered_json value;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"budget", 0, "'budget' must be a positive integer"},
      {"budget", 64.5, "'budget' must be a positive integer"},
      {"budget", "64", "'budget' must be a positive integer"},
      {"multiple", -8, "'multiple' must be a positive integer"},
      {"state_share", 1.5, "'state_share' must be a share in 0..1"},
      {"state_share", "a quarter", "'state_share'"},
      {"lambda", 0, "'lambda' must be a positive finite number"},
      {"lambda", "2^-8", "'lambda' must be a positive finite number"},
      {"strategy", "dof+clip", "'strategy' is not valid: strategy 'dof+clip' is unknown"},
      {"strategy", 3, "'strategy' must be a string"},
      {"model", 5, "'model' must be a string"},
      {"texts", "a.txt", "'texts' must be an array of file names"},
      {"texts", nlohmann::ordered_json::array({"a.txt", 3}), "'texts' must be an array of file names"},
      {"capture.seq_len", 1, "'capture.seq_len' must be an integer in 2..1048576"},
      {"capture.num_seqs", true, "'capture.num_seqs' must be an integer in 1..1048576"},
      {"capture.seed", -1, "'capture.seed' must be a non-negative integer"},
      {"capture.pre_rope", 1, "'capture.pre_rope' must be true or false"},
      {"capture.dir", nullptr, "'capture.dir' must be a string"},
      {"dof.samples", 0, "'dof.samples' must be a positive integer"},
      {"dof.normalize", "frobenius", "'dof.normalize' is not valid"},
      {"analysis.feature_map", "performer", "'analysis.feature_map' 'performer' is not a feature map"},
      {"analysis.features", -1, "'analysis.features' must be a non-negative integer"},
      {"analysis.window", -1, "'analysis.window' must be an integer in 0..1048576, got -1"},
      {"analysis.window", 8.5, "'analysis.window' must be an integer in 0..1048576"},
      {"analysis.window", "8", "'analysis.window' must be an integer in 0..1048576"},
      {"analysis.window", 1 << 21, "'analysis.window' must be an integer in 0..1048576, got 2097152"},
      {"selection.layer", -1, "'selection.layer' must be a non-negative integer"},
      {"selection.seq", 1e10, "'selection.seq' must be a non-negative integer"},
      {"colour_scale", "rainbow", "'colour_scale' is not valid: colour scale 'rainbow' is unknown"},
      {"view", "plots", "'view' is not valid: view 'plots' is unknown (valid: heads, metrics, dof, jobs, training)"},
      {"metric", "softmax monotonicity", "'metric' is not valid: grid metric 'softmax monotonicity' is unknown"},
      {"train.loss", "mse", "'train.loss' is not valid: loss 'mse' is unknown"},
      {"train.schedule", "linear", "'train.schedule' is not valid: schedule 'linear' is unknown"},
      {"train.device", "tpu", "'train.device' is not valid: device 'tpu' is unknown"},
      // Issue 25: the Train form's values are read through linearize's option definitions (their
      // ranges and names), no longer by a second reader with ranges of its own.
      {"train.feature_map", "prf", "'train.feature_map' is not valid: feature map 'prf' is unknown"},
      {"train.steps", 0, "'train.steps' must be an integer in 1..1000000000, got 0"},
      {"train.lr", -0.1, "'train.lr' must be a finite number in (0, 1000], got -0.1"},
      {"train.dimensions", "dof", "'train.dimensions' 'dof' is not allocation or fixed"},
      {"train.window", -4, "'train.window' must be an integer in 0..1048576, got -4"},
      {"train.window", true, "'train.window' must be an integer in 0..1048576"},
      {"train.seq_len", -1, "'train.seq_len' must be 0 (the default) or an integer in 2..1048576, got -1"},
      {"train.finetune_steps", -2, "'train.finetune_steps' must be an integer in 0..1000000000, got -2"},
      {"train.finetune_steps", 1.5, "'train.finetune_steps' must be an integer in 0..1000000000"},
      {"train.rank", 0, "'train.rank' must be an integer in 1..4096, got 0"},
  };
  for (const Case& c : cases) {
    auto j = minimal();
    const std::string key = c.key;
    const size_t dot = key.find('.');
    if (dot == std::string::npos)
      j[key] = c.value;
    else
      j[key.substr(0, dot)][key.substr(dot + 1)] = c.value;
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find("bad.attnscope: "), std::string::npos) << key << ": " << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << key << ": " << msg;
  }
  // A section that is not an object.
  auto j = minimal();
  j["capture"] = 5;
  EXPECT_NE(load_error(j).find("'capture' must be a JSON object"), std::string::npos);
}

// Hybrid heads (SPEC 5): the heads view's softmax window is analysis.window, the Train form's is
// train.window and reaches distill as DistillOptions::window; a session of an earlier build (no
// "window" keys) opens with plain linear maps.
TEST(Session, HybridWindowsRoundTripAndReachDistill) {
  const std::string file = test::temp_dir("session_window") + "/w.attnscope";
  Session s;
  s.analysis.feature_map = "hedgehog";
  s.analysis.window = 16;
  s.train.linearize.stage1.window = 8;
  save_session(file, s);
  const auto j = nlohmann::json::parse(test::read_file(file));
  EXPECT_EQ(j["analysis"]["window"], 16);
  EXPECT_EQ(j["train"]["window"], 8);
  const Session back = load_session(file);
  EXPECT_EQ(back.analysis.window, 16);
  EXPECT_EQ(back.train.linearize.stage1.window, 8);
  EXPECT_EQ(distill_options_of(back.train).window, 8);
  // A fresh form is `attnscope linearize`'s defaults (issue 25): its 64-token window.
  EXPECT_EQ(distill_options_of(TrainSettings{}).window, 64);

  auto old = minimal();
  old["analysis"] = {{"feature_map", "elu"}};
  old["train"] = {{"feature_map", "hedgehog"}};
  const std::string older = test::temp_dir("session_window_old") + "/o.attnscope";
  std::ofstream(older) << old.dump();
  const Session o = load_session(older);
  EXPECT_EQ(o.analysis.window, 0);
  EXPECT_EQ(o.train.linearize.stage1.window, 64);  // linearize's default (issue 25: was the form's own 0)
  // Linearize's fields: a session without them opens with the defaults.
  EXPECT_EQ(o.train.linearize.seq_len, 0);
  EXPECT_EQ(o.train.linearize.stage2.steps, 200);
  EXPECT_EQ(o.train.linearize.stage2.rank, 8);
}

// The Train form as linearize's options (issue 15 item 6): every value the form has, by name; the
// DoF view's allocation gives its strategy, budget and lambda (issue 25: computed on the run's own
// capture, as the CLI does), the budget only when it is not the model's default.
TEST(Session, TheTrainFormMapsOntoLinearizeOptions) {
  TrainSettings t;
  t.linearize.stage1.feature_map = "hedgehog";
  t.linearize.stage1.window = 16;
  t.from_allocation = false;
  t.linearize.stage1.features = 24;
  t.linearize.stage1.loss = DistillLoss::Output;
  t.linearize.stage1.steps = 6;
  t.linearize.stage1.lr = 0.03;
  t.linearize.stage1.batch = 2;
  t.linearize.seq_len = 64;
  t.linearize.stage2.steps = 4;
  t.linearize.stage2.rank = 2;
  const LinearizeOptions o = linearize_options_of(t, AllocStrategy::Dof, 48, 0.125, 16);
  EXPECT_EQ(o.stage1.feature_map, "hedgehog");
  EXPECT_EQ(o.stage1.window, 16);
  EXPECT_EQ(o.stage1.features, 24);
  EXPECT_FALSE(o.stage1.strategy.has_value());
  EXPECT_TRUE(o.stage1.allocation.empty());
  EXPECT_EQ(o.stage1.loss, DistillLoss::Output);
  EXPECT_EQ(o.stage1.steps, 6);
  EXPECT_DOUBLE_EQ(o.stage1.lr, 0.03);
  EXPECT_EQ(o.stage1.batch, 2);
  EXPECT_EQ(o.seq_len, 64);
  EXPECT_EQ(o.stage2.steps, 4);
  EXPECT_EQ(o.stage2.rank, 2);
  t.from_allocation = true;
  const LinearizeOptions a = linearize_options_of(t, AllocStrategy::DofClip, 48, 0.125, 16);
  EXPECT_EQ(a.stage1.features, 0);
  EXPECT_EQ(a.stage1.strategy, AllocStrategy::DofClip);
  EXPECT_EQ(a.stage1.budget, 48);
  EXPECT_DOUBLE_EQ(a.stage1.lambda, 0.125);
  EXPECT_EQ(a.stage1.state_share, 0);
  // The DoF view's state share reaches stage 1 as --state-share (with the allocation only).
  EXPECT_DOUBLE_EQ(linearize_options_of(t, AllocStrategy::Dof, 48, 0.125, 16, 0.25).stage1.state_share, 0.25);
  // hedgehog's default budget at head dim 16 is 32: left to linearize, as on the command line.
  EXPECT_EQ(linearize_options_of(t, AllocStrategy::Dof, 32, 0.125, 16).stage1.budget, 0);
}

TEST(Session, StrategyNamesGoThroughTheAllocationParser) {
  for (const std::string& name : alloc_strategy_names()) {
    auto j = minimal();
    j["strategy"] = name;
    const std::string file = test::temp_dir("session_strategy") + "/s.attnscope";
    std::ofstream(file) << j.dump();
    const Session s = load_session(file);
    EXPECT_EQ(alloc_strategy_name(s.strategy), name);
  }
}

// Issue 18, defect 3: the window's views and grid metrics are name tables (names.h), read through
// them: every value round-trips, the five views include the Train tab's, an unknown name is refused
// naming every valid one.
TEST(Session, ViewAndGridMetricNamesRoundTrip) {
  EXPECT_EQ(view_names(), (std::vector<std::string>{"heads", "metrics", "dof", "jobs", "training"}));
  for (const std::string& n : view_names()) EXPECT_EQ(view_name(parse_view(n)), n);
  for (const std::string& n : grid_metric_names()) EXPECT_EQ(grid_metric_name(parse_grid_metric(n)), n);
  for (GridMetric m : {GridMetric::SoftmaxEntropy, GridMetric::SoftmaxNormalizedEntropy, GridMetric::LinearEntropy,
                       GridMetric::LinearMonotonicity, GridMetric::LinearDiscordant, GridMetric::Kl, GridMetric::Dof})
    EXPECT_NE(std::string(grid_metric_name(m)), "?");
  const std::string msg = test::error_of([] { parse_view("plots"); });
  EXPECT_NE(msg.find("view 'plots' is unknown (valid: heads, metrics, dof, jobs, training)"), std::string::npos) << msg;
}

}  // namespace test_session

// --dtype in every job that runs a model (compute_dtype.h): one option row in each job's table,
// the device's default (f32 on the CPU, bf16 on CUDA), and the jobs that load a model themselves
// (distill direct, finetune, converted-model evaluation) computing in the dtype they are given:
// bf16 moves their losses by bf16's rounding (measurably, and within a few percent of float32).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "attnscope/base/error.h"
#include "attnscope/convert/converted_model.h"
#include "attnscope/convert/converted_eval.h"
#include "attnscope/distill/distill.h"
#include "attnscope/distill/distill_options.h"
#include "attnscope/finetune/finetune.h"
#include "attnscope/io/text_source.h"
#include "attnscope/model/compute_dtype.h"
#include "attnscope/model/model.h"
#include "attnscope/pipeline/linearize.h"
#include "test_support.h"
#include "tiny_models.h"

namespace test_compute_dtype_jobs {

using namespace attnscope;

namespace {

std::string sample_text() { return test::source_dir() + "/resources/texts/brown_news_ca44.txt"; }
std::string python_module() { return test::source_dir() + "/resources/python/attnscope_linear.py"; }

// The --dtype row of an option table: its words are compute_dtype.h's, it reads and writes back
// every name, leaves an unset dtype off the command line, and names the quantity on a bad value.
template <class O>
void check_dtype_row(const OptionTable<O>& table, const char* job) {
  const Option<O>* row = nullptr;
  for (const auto& r : table)
    if (long_flag(r.flags) == "--dtype") row = &r;
  ASSERT_NE(row, nullptr) << job;
  EXPECT_STREQ(row->help, kComputeDtypeHelp) << job;
  EXPECT_STREQ(row->quantity, "compute dtype") << job;
  O o;
  EXPECT_EQ(row->get(o), "") << job << ": unset, the device's default, not written";
  for (const std::string name : {"f32", "bf16", "f16", "f64"}) {
    row->set(o, name);
    EXPECT_EQ(row->get(o), name) << job;
  }
  row->set(o, "bf16");
  EXPECT_EQ(*o.compute, at::kBFloat16) << job;
  try {
    row->set(o, "f8");
    ADD_FAILURE() << job << ": f8 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.quantity(), "compute dtype") << job;
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
}

// a and b differ (the dtype was used), by less than `rel` of a (bf16 rounding, not a broken model).
void expect_rounding_apart(double a, double b, double rel, const char* what) {
  EXPECT_TRUE(std::isfinite(a) && std::isfinite(b)) << what;
  EXPECT_NE(a, b) << what << ": the same in bf16 as in f32";
  EXPECT_LT(std::abs(a - b), rel * std::abs(a)) << what << ": " << a << " vs " << b;
}

}  // namespace

TEST(ComputeDtypeJobs, EveryJobTableHasTheOneDtypeRow) {
  check_dtype_row(distill_option_table(), "distill");
  check_dtype_row(finetune_option_table(), "finetune");
  check_dtype_row(linearize_option_table(), "linearize");
  EXPECT_EQ(default_compute_dtype(Device::Cpu), at::kFloat);
  EXPECT_EQ(default_compute_dtype(Device::Cuda), at::kBFloat16);
  EXPECT_EQ(compute_dtype_of(std::nullopt, Device::Cuda), at::kBFloat16);
  EXPECT_EQ(compute_dtype_of(at::kHalf, Device::Cuda), at::kHalf);
  EXPECT_EQ(compute_dtype_of(std::nullopt, Device::Cpu), at::kFloat);
}

// Direct distillation loads the model itself: with bf16 its held-out losses move by bf16's
// rounding; job.json records the dtype given and a reader gets it back.
TEST(ComputeDtypeJobs, DirectDistillationComputesInTheGivenDtype) {
  const std::string root = test::temp_dir("dtype_direct");
  DistillOptions o;
  o.model = test::tiny_gpt2_dir();
  o.text = sample_text();
  o.loss = DistillLoss::Direct;
  o.feature_map = "learned-prf";
  o.features = 8;
  o.seq_len = 32;
  o.steps = 2;
  o.batch = 2;
  o.seed = 2;
  const DistillResult f32 = distill(o, root + "/f32");
  o.compute = at::kBFloat16;
  const DistillResult bf16 = distill(o, root + "/bf16");
  expect_rounding_apart(f32.initial_val_loss, bf16.initial_val_loss, 0.05, "initial held-out loss");
  expect_rounding_apart(f32.val_loss, bf16.val_loss, 0.05, "held-out loss");
  const auto job = nlohmann::json::parse(test::read_file(root + "/bf16/job.json"));
  EXPECT_EQ(job["dtype"], "bf16");
  EXPECT_FALSE(nlohmann::json::parse(test::read_file(root + "/f32/job.json")).contains("dtype"));
  EXPECT_EQ(*read_distill_job(root + "/bf16").options.compute, at::kBFloat16);
}

// Finetune loads the converted model and the original itself: both losses move with bf16.
TEST(ComputeDtypeJobs, FinetuneComputesInTheGivenDtype) {
  const std::string conv = test::hedgehog_conversion(test::tiny_gpt2_dir(), "dtype_finetune");
  FinetuneOptions o;
  o.model = conv;
  o.texts = {sample_text()};
  o.rank = 2;
  o.steps = 2;
  o.seq_len = 32;
  o.batch = 2;
  o.seed = 5;
  o.python_module = python_module();
  const std::string root = test::temp_dir("dtype_finetune_runs");
  const FinetuneResult f32 = finetune(o, root + "/f32");
  o.compute = at::kBFloat16;
  const FinetuneResult bf16 = finetune(o, root + "/bf16");
  expect_rounding_apart(f32.original_val_loss, bf16.original_val_loss, 0.05, "original model's loss");
  expect_rounding_apart(f32.initial_val_loss, bf16.initial_val_loss, 0.05, "converted model's loss");
}

// The evaluation says what it computed in, and its losses are the model's in that dtype.
TEST(ComputeDtypeJobs, EvaluationRecordsTheModelsDtype) {
  const std::string conv = test::hedgehog_conversion(test::tiny_gpt2_dir(), "dtype_eval");
  LoadedModel m32 = load_model(conv), m16 = load_model(conv, "", at::kBFloat16);
  const std::vector<int64_t> ids = encode_documents(*m32.tokenizer, read_text_documents({sample_text()}));
  ConvertedEvalOptions eo;
  eo.seq_len = 32;
  eo.closeness_windows = 1;
  eo.speed = false;
  const ConvertedEvaluation e32 = evaluate_converted(*m32.model, ids, eo), e16 = evaluate_converted(*m16.model, ids, eo);
  EXPECT_EQ(e32.compute_dtype, "f32");
  EXPECT_EQ(e16.compute_dtype, "bf16");
  expect_rounding_apart(e32.converted_loss, e16.converted_loss, 0.05, "converted loss");
  EXPECT_NEAR(e16.converted_loss, m16.model->mean_loss(ids, 32), 1e-9);
}

}  // namespace test_compute_dtype_jobs

// The option tables of `attnscope bench generate|train|attention|dof|scale`: the catalogue's
// definitions (option_defs.h) bound to each benchmark's options.
#include "attnscope/analysis/dof_options.h"
#include "attnscope/attention/feature_map.h"
#include "attnscope/attention/map_family.h"
#include "attnscope/base/option_defs.h"
#include "attnscope/bench/attention_bench.h"
#include "attnscope/bench/dof_bench.h"
#include "attnscope/bench/scale_bench.h"
#include "attnscope/bench/speed_bench.h"
#include "attnscope/distill/distill_options.h"

namespace attnscope {

namespace {

// --device as the benchmarks take it: cpu, cuda or cuda:N.
template <class O>
Option<O> bench_device_row(std::string O::*field, const char* help) {
  Option<O> r = described(bind_checked(opt::device, field, check_device_spec), help);
  r.choices = {"cpu", "cuda"};
  return r;
}

}  // namespace

const OptionTable<GenerateBenchOptions>& generate_bench_option_table() {
  using G = GenerateBenchOptions;
  static const OptionTable<G> rows = {
      described(bind(opt::shape, &G::shape, model_shape_names()),
                "the model: gpt2-small (in memory) | llama-3.2-1b | llama-3-8b (random weights written as bench scale "
                "writes them, read back in float32; rotary, grouped-query)"),
      bind_list(opt::contexts, &G::contexts),
      bind_list(opt::sequences, &G::batches),
      bind(opt::tokens, &G::tokens),
      described(bind(opt::feature_map, &G::feature_map, feature_map_names()), "the converted model's map (untrained)"),
      described(bind(opt::features, &G::features), "feature dimension M per head"),
      described(bind(opt::window, &G::window, 0), "hybrid heads: the converted model's softmax window W beside the map (0: plain linear)"),
      described(bind(opt::vocab, &G::vocab), "vocabulary size (gpt2-small; a Llama shape has its own)"),
      bench_device_row(&G::device, "cpu, cuda or cuda:N"),
      described(bind(opt::seed, &G::seed), "weights, maps and prompt"),
      bind(opt::no_batch, &G::batch, false),
  };
  return rows;
}

const OptionTable<TrainBenchOptions>& train_bench_option_table() {
  using T = TrainBenchOptions;
  static const OptionTable<T> rows = {
      described(bind_list(opt::loss, &T::losses, distill_loss_names()), "losses to time, comma-separated: kl, softmax, l2, output, direct"),
      described(bind(opt::seq_len, &T::seq_len), "tokens per sample"),
      described(bind(opt::features, &T::features), "feature dimension M per head"),
      described(bind(opt::feature_map, &T::feature_map, trainable_map_names()), "trainable map"),
      described(bind(opt::batch, &T::batch), "samples per step"),
      described(bind(opt::steps, &T::steps), "timed steps (after one warm-up step)"),
      bench_device_row(&T::device, "cpu, cuda or cuda:N"),
      described(bind(opt::seed, &T::seed), "maps and inputs"),
  };
  return rows;
}

const OptionTable<AttentionBenchOptions>& attention_bench_option_table() {
  using A = AttentionBenchOptions;
  static const OptionTable<A> rows = [] {
    // --memory-limit-gb: the options hold bytes.
    Option<A> limit = option_detail::row<A>(opt::memory_limit_gb);
    limit.get = [](const A& o) { return number_arg(double(o.memory_limit_bytes) / double(int64_t(1) << 30)); };
    limit.set = [](A& o, const std::string& v) {
      o.memory_limit_bytes = int64_t(option_detail::parse_in_range(opt::memory_limit_gb, v) * double(int64_t(1) << 30));
    };
    return OptionTable<A>{
        bind_list(opt::lengths, &A::lengths),
        described(bind(opt::batch, &A::batch), "sequences"),
        bind(opt::bench_heads, &A::heads),
        bind(opt::head_dim, &A::head_dim),
        described(bind(opt::features, &A::features), "feature dimension M"),
        bind(opt::bench_dtype, &A::dtype, std::vector<std::string>{"float32", "float64", "bfloat16"}),
        bench_device_row(&A::device, "cpu, cuda or cuda:N"),
        bind(opt::backward, &A::backward, true),
        bind(opt::repeats, &A::repeats),
        limit,
        described(bind(opt::seed, &A::seed), "inputs"),
    };
  }();
  return rows;
}

const OptionTable<DofBenchOptions>& dof_bench_option_table() {
  using D = DofBenchOptions;
  static const OptionTable<D> rows = [] {
    const auto& dof = dof_option_table();
    const auto settings = [&](const char* flag, const char* help) {
      return described(nest(&D::settings, option_by_flag(dof, flag)), help);
    };
    return OptionTable<D>{
        described(bind(opt::capture, &D::capture_dir), "capture directory (attnscope capture)"),
        nest(&D::settings, described(bind(with_range(opt::dof_samples, whole_range(2, int64_t(1) << 16)), &DofSettings::samples),
                                     "vectors sampled per head")),
        described(bind(opt::layer, &D::layer), "layer to time"),
        settings("--lambda", "lambda the bounds are certified at"),
        settings("--tolerance", "relative bound width the fast path must reach"),
        settings("--top-k", "the fast path's largest Krylov subspace"),
        settings("--block", "Krylov block size"),
        settings("--normalize", "Gram normalizer"),
        settings("--seed", "seed for sampling the vectors"),
        settings("--device", "device of the batched layer: cpu, cuda or cuda:N"),
        bind(opt::no_eigvalsh, &D::eigvalsh, false),
    };
  }();
  return rows;
}

std::vector<std::string> scale_bench_step_names() { return {"info", "capture", "spectra", "metrics", "distill", "eval"}; }

const OptionTable<ScaleBenchOptions>& scale_bench_option_table() {
  using S = ScaleBenchOptions;
  static const OptionTable<S> rows = {
      bind_list(opt::shapes, &S::shapes, model_shape_names()),
      bind_list(opt::scale_steps, &S::steps, scale_bench_step_names()),
      bind(opt::dir, &S::dir),
      described(bind(opt::seq_len, &S::seq_len, 0), "capture window (default: 1024 for gpt2-small, 256 for Llama shapes)"),
      described(bind(opt::num_seqs, &S::num_seqs, 0), "capture windows (default: 8 for gpt2-small, 2 for Llama shapes)"),
      bind(opt::eval_chars, &S::eval_chars),
      described(bind(opt::timeout, &S::timeout), "seconds before a step is stopped and reported as such"),
      bind(opt::reuse, &S::reuse, true),
  };
  return rows;
}

}  // namespace attnscope

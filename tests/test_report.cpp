// The report pipeline in core: the objects it returns are the ones it wrote, a cancelled report
// leaves nothing behind and the earlier report intact, and a capture with NaN is refused naming
// the file, layer and head.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "attnscope/allocation/allocation_tables.h"
#include "attnscope/capture/capture.h"
#include "attnscope/base/error.h"
#include "attnscope/pipeline/report.h"
#include "attnscope/io/safetensors.h"
#include "attnscope/base/table.h"
#include "test_support.h"
#include "tiny_models.h"

// Everything in its own namespace, so the sources of a unity build do not clash.
namespace test_report {

using namespace attnscope;
namespace fs = std::filesystem;

namespace {


ReportOptions small_report() {
  ReportOptions o;
  o.model = test::source_dir() + "/resources/models/brown-gpt2-mini";
  o.texts = {test::source_dir() + "/resources/texts/brown_news_ca44.txt"};
  o.capture.seq_len = 32;
  o.capture.num_seqs = 2;
  o.dof.samples = 48;
  o.budget = 16;
  o.analysis.mixer_state = 0;
  return o;
}

}  // namespace

TEST(Report, ReturnsWhatItWroteAndReportsProgressInOrder) {
  const fs::path out = fs::path(test::temp_dir("report")) / "r";
  std::vector<double> fractions;
  const ReportResult r = write_report(small_report(), out.string(), nullptr,
                                      [&](double f, const std::string&) { fractions.push_back(f); });
  EXPECT_EQ(r.dir, fs::absolute(out).string());
  ASSERT_FALSE(fractions.empty());
  EXPECT_TRUE(std::is_sorted(fractions.begin(), fractions.end())) << "progress never goes backwards";
  EXPECT_DOUBLE_EQ(fractions.back(), 1.0);
  // The saved spectra re-evaluate to the same Table 2 the report returned and wrote.
  const DofSpectra saved = load_spectra((out / "spectra.safetensors").string());
  EXPECT_EQ(to_markdown(dof_grid_table(head_dofs(saved, 1.0 / 256), 1.0 / 256, head_convergence(saved, 1.0 / 256))),
            to_markdown(r.table2));
  EXPECT_EQ(test::read_file(out / "table2_dof.md"), to_markdown(r.table2));
  EXPECT_EQ(test::read_file(out / "table1_allocation.md"), to_markdown(r.table1));
  ASSERT_EQ(r.allocations.size(), 4u);
  EXPECT_EQ(r.heads.size(), size_t(saved.num_layers * saved.num_heads));
  // The most complex head has the largest DoF of the grid.
  const auto hd = head_dofs(saved, 1.0 / 256);
  for (const auto& row : hd)
    for (const DofValue& v : row) EXPECT_LE(v.value, hd[r.most_complex_layer][r.most_complex_head].value);
  EXPECT_TRUE(fs::exists(out / "maps" / ("most_complex_layer" + std::to_string(r.most_complex_layer) + "_head" +
                                        std::to_string(r.most_complex_head) + "_softmax.csv")));
}

TEST(Report, CancelledLeavesTheEarlierReportIntactAndNoDebris) {
  const fs::path root = test::temp_dir("report");
  const fs::path out = root / "r";
  write_report(small_report(), out.string(), nullptr);
  const std::string before = test::read_file(out / "index.md");
  ASSERT_FALSE(before.empty());
  // Cancel once the DoF stage has begun (the capture is already on disk in the temporary dir).
  EXPECT_THROW(write_report(small_report(), out.string(), nullptr,
                            [](double f, const std::string&) {
                              if (f > 0.35) throw Cancelled();
                            }),
               Cancelled);
  EXPECT_EQ(test::read_file(out / "index.md"), before);
  EXPECT_EQ(size_t(std::distance(fs::directory_iterator(root), fs::directory_iterator())), 1u);
}

TEST(Report, BadOptionsNameTheQuantity) {
  ReportOptions o = small_report();
  o.budget = 0;
  try {
    write_report(o, test::temp_dir("report") + "/r", nullptr);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.quantity(), "budget") << e.what();
  }
  o = small_report();
  o.capture.seq_len = 10000;  // capped at the context length: fine
  o.capture.num_seqs = 100000;  // more windows than the text has
  EXPECT_THROW(write_report(o, test::temp_dir("report") + "/r", nullptr), Error);
}

TEST(Capture, NonFiniteValuesAreRefusedNamingFileLayerAndHead) {
  LoadedModel m = load_model(test::tiny_gpt2_dir());
  std::vector<TextDocument> docs = {{"t", test::read_file(test::source_dir() + "/resources/texts/brown_news_ca44.txt")}};
  CaptureOptions co;
  co.seq_len = 16;
  co.num_seqs = 2;
  const std::string dir = test::temp_dir("nan") + "/cap";
  const CaptureStore store = capture_to_dir(m, docs, co, dir);
  ASSERT_GE(store.num_layers(), 2);
  ASSERT_GE(store.num_heads(), 2);
  // Poison one key of head 1 in layer 1 and write the file back.
  const std::string file = dir + "/layer_1.safetensors";
  NamedTensors t;
  {
    SafetensorsFile f(file);
    for (const char* name : {"q", "k", "v"}) t.push_back({name, f.tensor(name).clone()});
  }
  t[1].second[1][1][3][0] = std::nanf("");
  write_safetensors(file, t, {{"format", "attnscope-capture"}});
  EXPECT_NO_THROW(store.layer_tensor(0, "k"));
  EXPECT_NO_THROW(store.layer_tensor(1, "q"));
  try {
    store.layer_tensor(1, "k");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("layer_1.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("layer 1, head 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NaN"), std::string::npos) << msg;
  }
}

}  // namespace test_report

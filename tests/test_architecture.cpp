// The shape of core (docs/ARCHITECTURE.md, issue 25): the stage folders of core/src form no cycle
// of includes, and a header another folder includes is public (core/include/attnscope/...), never
// a private "folder/name.h" of core/src.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnscope/base/file_tree.h"
#include "test_support.h"

namespace attnscope {
namespace test_architecture {
namespace {

// The folder (stage) of a core source or header: core/src/STAGE/... or core/include/attnscope/STAGE/....
std::string stage_of(const std::string& path) {
  static const std::regex re(".*/core/(src|include/attnscope)/([a-z_]+)/[^/]+$");
  std::smatch m;
  return std::regex_match(path, m, re) ? m[2].str() : std::string();
}

struct Include {
  std::string file, stage;
  bool is_public;  // "attnscope/STAGE/..." (else a private "STAGE/..." of core/src)
};

std::vector<Include> includes_of(const std::string& file) {
  static const std::regex re(R"(^\s*#\s*include\s+"(attnscope/)?([a-z_]+)/[^"]+")");
  std::ifstream in(file);
  std::vector<Include> out;
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back({file, m[2].str(), m[1].matched});
  }
  return out;
}

// stage -> the stages it includes, with one file that does, for the message.
std::map<std::string, std::map<std::string, std::string>> include_graph() {
  std::map<std::string, std::map<std::string, std::string>> g;
  const std::string root = test::source_dir() + "/core";
  walk_files(root, [&](const TreeFile& f) {
    const std::string stage = stage_of(f.path);
    if (stage.empty()) return;
    g[stage];
    for (const Include& inc : includes_of(f.path))
      if (inc.stage != stage && inc.stage != "kernels") g[stage].emplace(inc.stage, f.path);
  });
  return g;
}

}  // namespace

TEST(Architecture, CoreStageFoldersFormNoCycle) {
  const auto g = include_graph();
  ASSERT_GT(g.size(), 10u) << "core's stage folders were not found under " << test::source_dir();
  // Depth-first search for a back edge; the path of folders that closes a cycle is the message.
  std::map<std::string, int> mark;  // 0 unseen, 1 on the path, 2 done
  std::vector<std::string> path;
  std::string cycle;
  std::function<void(const std::string&)> visit = [&](const std::string& s) {
    mark[s] = 1;
    path.push_back(s);
    for (const auto& [t, file] : g.at(s)) {
      if (!cycle.empty()) break;
      if (!g.count(t)) continue;
      if (mark[t] == 1) {
        for (const auto& p : path) cycle += p + " -> ";
        cycle += t + " (" + file + " includes " + t + ")";
      } else if (mark[t] == 0) {
        visit(t);
      }
    }
    path.pop_back();
    mark[s] = 2;
  };
  for (const auto& [s, edges] : g)
    if (mark[s] == 0 && cycle.empty()) visit(s);
  EXPECT_EQ(cycle, "") << "core/src's folders include each other in a cycle";
}

TEST(Architecture, AHeaderAnotherFolderIncludesIsPublic) {
  std::vector<std::string> private_crossings;
  for (const char* dir : {"/core", "/app", "/views"}) {
    walk_files(test::source_dir() + dir, [&](const TreeFile& f) {
      const std::string stage = stage_of(f.path);
      for (const Include& inc : includes_of(f.path)) {
        if (inc.is_public || inc.stage == stage) continue;
        // app/ and views/ include their own folders' headers by "cli/...", "gui/..."; core's private
        // headers are "STAGE/name.h" of core/src.
        if (std::string(dir) != "/core" && (inc.stage == "cli" || inc.stage == "gui")) continue;
        private_crossings.push_back(f.path + " includes a private header of " + inc.stage);
      }
    });
  }
  std::string all;
  for (const auto& p : private_crossings) all += p + "\n";
  EXPECT_TRUE(private_crossings.empty()) << all;
}

}  // namespace test_architecture
}  // namespace attnscope

// `attnscope workspace [--clean [--older-than DAYS]] [--root DIR] [--json]`: the workbench's capture
// cache (core's workspace.h): one line per folder with its size, age and what it holds, the total,
// and with --clean removes them (a saved session keeps its own copies in NAME.data/).
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>

#include "attnscope/base/table.h"
#include "attnscope/workbench/workspace.h"
#include "common.h"

namespace attnscope::cli {

namespace {

std::string when(int64_t s) {
  const std::time_t t = std::time_t(s);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", std::localtime(&t));
  return buf;
}

std::string holds(const WorkspaceFolder& f) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : ", ") + s; };
  if (f.capture) add("capture");
  if (f.spectra) add("spectra");
  if (f.runs) add(std::to_string(f.runs) + (f.runs == 1 ? " run" : " runs"));
  return out.empty() ? "-" : out;
}

}  // namespace

void register_workspace(CLI::App& app) {
  auto* cmd = app.add_subcommand("workspace", "List (or clean) the workbench's capture cache: size, age, contents");
  auto a = std::make_shared<WorkspaceOptions>();
  auto fmt = std::make_shared<FormatOptions>();
  add_option_table(cmd, workspace_option_table(), a);
  add_format_options(cmd, fmt, {OutputFormat::Json});
  cmd->callback([a, fmt] {
    const std::string root = a->root.empty() ? default_workspace_root() : a->root;
    const std::vector<WorkspaceFolder> folders =
        a->clean ? clean_workspace(root, {}, a->older_than) : list_workspace(root);
    const std::vector<WorkspaceFolder> left = a->clean ? list_workspace(root) : folders;
    if (fmt->format == OutputFormat::Json) {
      nlohmann::ordered_json j;
      j["root"] = root;
      auto list = nlohmann::ordered_json::array();
      for (const WorkspaceFolder& f : folders)
        list.push_back({{"path", f.path}, {"bytes", f.bytes}, {"modified_s", f.modified_s}, {"capture", f.capture},
                        {"spectra", f.spectra}, {"runs", f.runs}});
      j[a->clean ? "removed" : "folders"] = list;
      j["bytes"] = total_bytes(left);
      std::cout << j.dump(2) << "\n";
      return;
    }
    if (a->clean) {
      std::cout << "removed " << folders.size() << (folders.size() == 1 ? " folder" : " folders") << " ("
                << human_bytes(total_bytes(folders)) << ") from " << root << "; " << left.size() << " left ("
                << human_bytes(total_bytes(left)) << ")\n";
      return;
    }
    if (folders.empty()) {
      std::cout << root << ": empty\n";
      return;
    }
    Table t;
    t.header = {"folder", "size", "modified", "holds"};
    for (const WorkspaceFolder& f : folders) t.add_row({f.path, human_bytes(f.bytes), when(f.modified_s), holds(f)});
    std::cout << to_markdown(t) << "\n"
              << folders.size() << (folders.size() == 1 ? " folder, " : " folders, ") << human_bytes(total_bytes(folders))
              << " in " << root << " (attnscope workspace --clean removes them)\n";
  });
}

}  // namespace attnscope::cli

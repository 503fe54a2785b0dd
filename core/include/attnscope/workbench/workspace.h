// The workbench's workspace: a cache with one folder per capture under ROOT (text.txt for typed
// text, capture/, spectra.safetensors, runs/ of the Train tab), named by the time it was made. A
// saved session copies what it names beside itself (NAME.data/), so nothing here is the only copy
// of a session's data; the window and `attnscope workspace` list it, size it and clean it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "attnscope/base/options.h"

namespace attnscope {

// $XDG_CACHE_HOME/attnscope/workspace, else $HOME/.cache/attnscope/workspace (what the window uses).
std::string default_workspace_root();

struct WorkspaceFolder {
  std::string path;         // absolute
  uint64_t bytes = 0;       // every file under it
  int64_t modified_s = 0;   // the folder's modification time, seconds since the epoch (the window
                            // touches it whenever it writes there, a run deep inside included)
  bool capture = false;     // holds capture/
  bool spectra = false;     // holds spectra.safetensors
  int runs = 0;             // folders under runs/
};

// The folders directly under `root`, newest first; empty when root does not exist. Files directly
// under root are not the workspace's and are left out.
std::vector<WorkspaceFolder> list_workspace(const std::string& root);
uint64_t total_bytes(const std::vector<WorkspaceFolder>& folders);

// Removes the folders of `root` that were last modified more than `older_than_days` ago (0: all),
// except those named in `keep` (in use: the window's current capture). Returns what it removed.
// Throws Error naming a folder it cannot remove (what was removed before it stays removed).
std::vector<WorkspaceFolder> clean_workspace(const std::string& root, const std::vector<std::string>& keep = {},
                                             double older_than_days = 0);
// Removes one folder of the workspace; Error when `folder` is not directly under `root`.
void remove_workspace_folder(const std::string& root, const std::string& folder);

// `attnscope workspace`: list the folders of root (default_workspace_root() when ""), or remove them.
struct WorkspaceOptions {
  std::string root;
  bool clean = false;
  double older_than = 0;  // days; with clean
};
const OptionTable<WorkspaceOptions>& workspace_option_table();

// "1.3 GB", "420 MB", "12 kB", "512 B" (powers of 1000).
std::string human_bytes(uint64_t bytes);

}  // namespace attnscope

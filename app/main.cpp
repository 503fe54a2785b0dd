// attnscope: the command-line entry point. Each subcommand lives in cli/<name>.cpp and registers
// itself here; this file only parses, dispatches and maps errors to exit codes (0 ok, 1 error,
// 2 usage).
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "attnscope/base/error.h"
#include "attnscope/base/runtime.h"
#include "cli/common.h"

namespace {

// Core names the quantity a bad value was given for (error.h); the CLI adds the option that sets
// it, so the message speaks both the user's terms and the command line's. Every flag comes from
// the commands' option tables (their rows note it: add_option_table).
std::string with_option(const attnscope::Error& e) {
  const std::string flag = attnscope::cli::option_for_quantity(e.quantity());
  return flag.empty() ? e.what() : std::string(e.what()) + " (" + flag + ")";
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = attnscope::cli;
  attnscope::configure_runtime();
  cli::set_invocation(argc, argv);
  CLI::App app{"attnscope: inspect, measure and linearize the attention of transformer models"};
  app.set_version_flag("--version", ATTNSCOPE_VERSION);
  app.require_subcommand(1);
  cli::register_info(app);
  cli::register_logits(app);
  cli::register_convert(app);
  cli::register_generate(app);
  cli::register_eval(app);
  cli::register_capture(app);
  cli::register_pretrain(app);
  cli::register_dof(app);
  cli::register_allocate(app);
  cli::register_metrics(app);
  cli::register_maps(app);
  cli::register_report(app);
  cli::register_distill(app);
  cli::register_jobs(app);
  cli::register_bench(app);
  cli::register_compare(app);
  cli::register_finetune(app);
  cli::register_linearize(app);
  cli::register_workspace(app);
#ifdef ATTNSCOPE_HAVE_GUI
  cli::register_gui(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const attnscope::Error& e) {
    std::cerr << "attnscope: " << with_option(e) << "\n";
    return 1;
  } catch (const std::exception& e) {  // filesystem, c10 and other library errors
    std::cerr << "attnscope: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

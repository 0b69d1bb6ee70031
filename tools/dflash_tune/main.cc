// dflash-tune: the command-line front end of the kernel cache and the autotuner.
#include <iostream>

#include "cli_common.h"

int main(int argc, char** argv) {
  using namespace dflash::cli;
  CLI::App app{"dflash-tune: NVRTC autotuner and persistent kernel cache for DFlash drafter training"};
  app.require_subcommand(1);
  GlobalOptions g;
  app.add_option("--cache-dir", g.cache_dir,
                 "Cache directory (default: $DFLASH_CACHE_DIR, else $XDG_CACHE_HOME/dflash-tune, else "
                 "~/.cache/dflash-tune)");
  app.add_flag("--json", g.json, "Machine-readable output");
  app.add_flag("--verbose", g.verbose, "On an error, also print the low-level text behind it (SQLite's own)");
  app.fallthrough();  // global options may follow the subcommand
  Action run;
  AddCacheCommands(app, g, &run);
  AddTunerCommands(app, g, &run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitError;
  }
  if (!run) return Fail("no command given (see --help)");
  try {
    return run();
  } catch (const std::exception& e) {
    return Fail(std::string("internal error: ") + e.what());
  }
}

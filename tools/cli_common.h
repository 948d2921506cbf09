// What every kiln tool does the same way: CLI11 for the arguments (so --help lists every option),
// --verbose / --quiet over KILN_LOG_LEVEL for the kiln log, one-line errors.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "kiln/logging.h"

namespace kiln {

struct LogOptions {
  bool verbose = false;
  bool quiet = false;
};

inline void add_log_options(CLI::App& app, LogOptions& o) {
  app.add_flag("-v,--verbose", o.verbose, "Log debug detail too (overrides KILN_LOG_LEVEL)");
  app.add_flag("-q,--quiet", o.quiet, "Log warnings and errors only (overrides KILN_LOG_LEVEL)");
  app.footer("Environment: KILN_LOG_LEVEL=trace|debug|info|warn|error|off sets the log level (default info); "
             "KILN_PLUGIN_PATH=DIR[:DIR...] adds folders searched for an engine's plugin libraries; "
             "KILN_MAX_CPU_ISA=avx2|avx512_core|avx512_core_vnni|avx512_core_bf16|avx512_core_amx caps kiln's kernels (and oneDNN's "
             "unless DNNL_MAX_CPU_ISA is set, which alone caps both) to the instruction sets of a smaller CPU; "
             "KILN_THREAD_POOL=kiln runs every parallel region on kiln's own workers (default: on OpenMP's team, oneDNN's, while "
             "its threads are on time); KILN_OPENMP_TEAM=fixed|solo keeps OpenMP's team at its size / on one thread (A/B runs).");
}

// Names the log's lines after the tool ("[engine-build] ...") and applies --verbose / --quiet.
inline void apply_log_options(const char* tool, const LogOptions& o) {
  set_log_name(tool);
  if (o.verbose) set_log_level(LogLevel::kDebug);
  else if (o.quiet) set_log_level(LogLevel::kWarn);
}

// Parses argv; returns -1 to go on, or the exit code (0 after --help, 2 for a usage error, which
// is reported as one line).
inline int parse_command_line(CLI::App& app, const char* tool, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    for (char& c : what)
      if (c == '\n') c = ' ';
    std::fprintf(stderr, "%s: %s (see %s --help)\n", tool, what.c_str(), tool);
    return 2;
  }
}

}  // namespace kiln

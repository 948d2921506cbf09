// The shared run options (tools/run_options.h) on a CLI11 command line, so engine-build's and
// engine-run's --help list them with the tools' own options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "tools/run_options.h"

namespace kiln {

inline void add_run_options(CLI::App& app, RunOptions& o) {
  auto setter = [&o](const char* flag) {
    return [&o, flag](const std::string& v) {
      Status st = set_run_option(flag, v, &o);
      if (!st.ok()) throw CLI::ValidationError(flag, st.message());
    };
  };
  app.add_option("--plugin", o.load.allowed_plugins,
                 "A plugin library to load first; its folder is searched first for the engine's plugin libraries (repeatable)")
      ->type_name("LIB")->allow_extra_args(false);
  app.add_option("--plugin-dir", o.load.plugin_dirs,
                 "A folder searched for the engine's plugin libraries before KILN_PLUGIN_PATH and the engine's folder (repeatable)")
      ->type_name("DIR")->allow_extra_args(false);
  app.add_option_function<std::string>("--max-memory", setter("--max-memory"),
                                       "Cap on weights, arenas and state, e.g. 2G (also KILN_MAX_MEMORY); past it is a one-line error")
      ->type_name("SIZE");
  app.add_flag_callback("--lock-memory", [setter] { setter("--lock-memory")(""); },
                        "mlock the engine and every later allocation (no page of the model is swapped out)");
  app.add_option_function<std::string>("--threads", setter("--threads"),
                                       "kiln's thread pool and OpenMP team size, the calling thread included (default: the CPUs this "
                                       "process may use); an engine whose tactics were timed at another count gets a warning")
      ->type_name("N");
  app.add_option_function<std::string>("--pin-threads", setter("--pin-threads"),
                                       "Pin the calling thread to the first CPU and the pool's workers to the next ones")
      ->type_name("CPU[,CPU...]");
  app.add_option_function<std::string>("--realtime", setter("--realtime"),
                                       "Run kiln's threads SCHED_FIFO at PRIO (default 10; needs root or CAP_SYS_NICE)")
      ->type_name("[=PRIO]")->expected(0, 1)->default_str("");
}

}  // namespace kiln

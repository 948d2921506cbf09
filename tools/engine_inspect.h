// engine-run --inspect: what an engine file holds, printed for a person.
#pragma once

#include <string>
#include <vector>

#include "runtime/status.h"

namespace kiln {

Status inspect_engine(const std::string& path, const std::vector<std::string>& plugin_dirs);

}  // namespace kiln

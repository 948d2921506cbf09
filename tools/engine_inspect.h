// engine-run --inspect: what an engine file holds, printed for a person.
#pragma once

#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/status.h"

namespace kiln {

Status inspect_engine(const std::string& path, const LoadOptions& options);

}  // namespace kiln

// Version and source identity of the toolchain, recorded in every output it writes.
#pragma once

#include <string>

namespace oscar {

const char* version();     // semantic version, e.g. "0.1.0"
const char* git_commit();  // commit the build was configured from, or "unknown"

}  // namespace oscar

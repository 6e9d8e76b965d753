// The daemon's command-line flags (--port, --workers, ...; `batchd --help`)
// and what they say, as DaemonOptions. Every flag's default is
// DaemonOptions' (server/options/daemon_options.h), whose Validate() checks
// the values.
#ifndef BATCHD_SERVER_DAEMON_FLAGS_H_
#define BATCHD_SERVER_DAEMON_FLAGS_H_

#include <string>
#include <vector>

#include "server/options/daemon_options.h"

namespace batchd::server {

// The command line as DaemonOptions; `datasets` are the --dataset values.
// REQUIRES: absl::ParseCommandLine has run.
DaemonOptions OptionsFromFlags(std::vector<std::string> datasets);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DAEMON_FLAGS_H_

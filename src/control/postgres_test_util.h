// Tests of the control plane against a real PostgreSQL: a throwaway server per test process, and
// the switch that runs the control-plane suites on it.
//
// The server: Debian's binaries (/usr/lib/postgresql/<version>/bin, or $SOVAI_POSTGRES_BIN):
// initdb into a temp dir (trust authentication, superuser `sovai`, UTF-8, C locale, no fsync),
// pg_ctl start listening on a unix socket in that dir and on 127.0.0.1 at a free port. As root it
// runs as the `postgres` system user (initdb refuses root). Started at the first call (~1 s),
// shared by every test of the process, stopped and removed at exit; a watchdog stops it too when
// the process dies without exiting (a crash, a ctest timeout).
//
// The switch: with SOVAI_TEST_STATE=postgres, TestStateLocation(dir) gives each test a fresh,
// empty schema of that server (a postgres:// URL whose search_path is the schema) instead of
// `<dir>/control.db`. The fixtures of the control tests open their ControlDb (or ControlPlane) at
// that location, so one test binary runs against either engine; CMake registers the PostgreSQL
// run of each as `<binary>.postgres` (labels integration;postgres).
//
//   void SetUp() override {
//     ...
//     SOVAI_STATE_LOCATION_OR_SKIP(state_, dir_);   // a path or a URL
//     auto db = ControlDb::Open(state_);
//   }
//
// Errors: FailedPrecondition when the server binaries (or, as root, the `postgres` user) are
// missing: the macro skips the test and names why. Anything else (initdb or start failed) is an
// error with the server's log, and fails the test.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "base/status.h"

namespace sovai::control::testing {

// SOVAI_TEST_STATE=postgres.
bool PostgresStateRequested();

// The URL of a new, empty schema on the process's server, as the `--state` of a server would
// name it: "postgresql://sovai@/postgres?host=<socket dir>&port=<port>&options=-csearch_path..."
// (`tcp`: "postgres://sovai@127.0.0.1:<port>/postgres?options=...").
base::Result<std::string> NewPostgresStateUrl(bool tcp = false);

// Where a test's control state lives: `<dir>/control.db`, or with SOVAI_TEST_STATE=postgres a
// NewPostgresStateUrl().
base::Result<std::string> TestStateLocation(const std::string& dir);

}  // namespace sovai::control::testing

// Sets `location` (a std::string) to TestStateLocation(dir), or skips the test (GTEST_SKIP, with
// the reason) when PostgreSQL was asked for and cannot run here. For SetUp() or a test body.
#define SOVAI_STATE_LOCATION_OR_SKIP(location, dir)                                                \
  do {                                                                                             \
    auto sovai_state_location_ = ::sovai::control::testing::TestStateLocation(dir);                \
    if (!sovai_state_location_.ok() &&                                                             \
        sovai_state_location_.status().code() == ::sovai::base::StatusCode::kFailedPrecondition) { \
      GTEST_SKIP() << sovai_state_location_.status().message();                                    \
    }                                                                                              \
    ASSERT_TRUE(sovai_state_location_.ok()) << sovai_state_location_.status();                     \
    location = std::move(*sovai_state_location_);                                                  \
  } while (0)

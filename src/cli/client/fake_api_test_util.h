// What the CLI commands' tests share for their fake REST servers: a server on a loopback port
// whose every request goes to one handler, problem+json answers as the real API writes them, and
// a fixture that runs commands against such a fake.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "base/env.h"
#include "cli/client/commands.h"
#include "cli/client/config.h"
#include "cli/client/console.h"
#include "net/http.h"

namespace sovai::cli::client {

// Starts a server on 127.0.0.1 (a free port) answering every request with `handle`. Keep it as
// the last member of the fake that owns it, so that it stops before the state `handle` uses.
inline std::unique_ptr<net::Server> StartFakeApiServer(
    std::function<net::Response(net::Request&)> handle) {
  net::Router router;
  router.SetFallback(std::move(handle));
  auto server = std::make_unique<net::Server>(std::move(router));
  net::ServerOptions options;
  options.listen = "127.0.0.1:0";
  EXPECT_TRUE(server->Start(options).ok());
  return server;
}

inline std::string FakeApiUrl(const net::Server& server) { return "http://" + server.address(); }

// An RFC 9457 problem of type "urn:sovai:problem:<type>".
inline net::Response FakeProblem(int status, const std::string& type, const std::string& detail) {
  nlohmann::json body = {{"type", "urn:sovai:problem:" + type},
                         {"title", "x"},
                         {"status", status},
                         {"detail", detail}};
  net::Response res = net::Response::Json(status, body.dump());
  res.headers.Set("Content-Type", "application/problem+json");
  return res;
}

// A fixture for commands against the fake `Api` (which has url()): a temporary HOME, the login
// in SOVAI_URL and SOVAI_TOKEN only (no config file), and Run() through the real dispatch, with
// the output in console_.
template <typename Api>
class FakeApiCommandTest : public ::testing::Test {
 protected:
  explicit FakeApiCommandTest(std::string token) : token_(std::move(token)) {}

  void SetUp() override {
    char tmpl[] = "/tmp/sovai-cli-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    vars_ = {{"HOME", dir_}, {"SOVAI_URL", api_.url()}, {"SOVAI_TOKEN", token_}};
  }
  void TearDown() override { base::Env::Default().DeleteDirRecursive(dir_).IgnoreError(); }

  // Runs `sovai <args...>`.
  int Run(std::vector<std::string> args) {
    console_.Clear();
    CommandContext ctx{base::Env::Default(), console_, vars_, {}};
    std::string command = args.front();
    args.erase(args.begin());
    return RunClientCommand(command, args, ctx);
  }

  const std::string token_;
  Api api_;
  std::string dir_;
  EnvVars vars_;
  BufferConsole console_;
};

}  // namespace sovai::cli::client

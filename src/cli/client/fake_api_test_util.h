// What the CLI commands' tests share for their fake REST servers: a server on a loopback port
// whose every request goes to one handler, and problem+json answers as the real API writes them.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

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

}  // namespace sovai::cli::client

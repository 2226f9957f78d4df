// What the registry's tests share: a real object store in a temporary directory, a manual clock,
// an Authenticator of fixed tokens (the seam `sovai server` fills with control's identity), and
// a Registry served by a real net::Server on a loopback port.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "base/crypto.h"
#include "base/env.h"
#include "net/client.h"
#include "net/http.h"
#include "objstore/store.h"
#include "registry/auth.h"
#include "registry/registry.h"

namespace sovai::registry::testing {

class FixedAuthenticator final : public Authenticator {
 public:
  void Add(std::string secret, Caller caller) { callers_[std::move(secret)] = std::move(caller); }
  base::Result<Caller> Authenticate(std::string_view secret) override {
    auto it = callers_.find(std::string(secret));
    if (it == callers_.end()) return base::UnauthenticatedError("unknown API token");
    return it->second;
  }

 private:
  std::map<std::string, Caller> callers_;  // written before the server starts
};

inline std::string BasicAuth(std::string_view secret) {
  return "Basic " + base::Base64Encode("user:" + std::string(secret));
}

inline std::string Sha256Digest(std::string_view bytes) {
  return "sha256:" + base::HexEncode(base::Sha256(bytes));
}

class RegistryFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("sovai-registry-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(root_);
    objstore::StoreOptions so;
    so.root = root_.string();
    so.env = &env_;
    auto store = objstore::Store::Open(so);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(*store);
    auth_.Add("tok-alpha-op", {"tok_1", "alpha", true, false});
    auth_.Add("tok-alpha-read", {"tok_2", "alpha", false, false});
    auth_.Add("tok-beta-op", {"tok_3", "beta", true, false});
    auth_.Add("tok-admin", {"tok_4", "default", true, true});
    RegistryOptions ro;
    ro.reclaim_thread = false;
    ro.storage.upload_timeout_s = 600;
    auto reg = Registry::Create(*store_, auth_, env_, ro);
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    registry_ = std::move(*reg);
    net::Router router;
    registry_->AddRoutes(router);
    server_ = std::make_unique<net::Server>(std::move(router));
    net::ServerOptions opts;
    opts.error_renderer = ErrorRenderer();
    ASSERT_TRUE(server_->Start(opts).ok());
  }
  void TearDown() override {
    server_.reset();
    registry_.reset();
    store_.reset();
    std::filesystem::remove_all(root_);
  }

  net::ClientResponse Call(std::string method, std::string target, std::string body = "",
                           std::string secret = "tok-alpha-op",
                           std::vector<std::pair<std::string, std::string>> headers = {}) {
    net::HttpClient client({.port = server_->port()});
    net::ClientRequest req;
    req.method = std::move(method);
    req.target = std::move(target);
    req.body = std::move(body);
    if (!secret.empty()) req.headers.Set("Authorization", BasicAuth(secret));
    for (auto& [k, v] : headers) req.headers.Set(k, v);
    auto res = client.Send(req);
    EXPECT_TRUE(res.ok()) << res.status().ToString();
    return res.ok() ? *res : net::ClientResponse{};
  }

  // The first error code of a /v2/ error body, "" when none.
  static std::string Code(const net::ClientResponse& res) {
    auto doc = nlohmann::json::parse(res.body, nullptr, false);
    if (!doc.is_object() || !doc.contains("errors") || doc["errors"].empty()) return "";
    return doc["errors"][0].value("code", "");
  }

  // Pushes `bytes` as a blob of `repo` monolithically; returns its digest.
  std::string PushBlob(const std::string& repo, const std::string& bytes,
                       const std::string& secret = "tok-alpha-op") {
    std::string digest = Sha256Digest(bytes);
    auto res = Call("POST", "/v2/" + repo + "/blobs/uploads/?digest=" + digest, bytes, secret);
    EXPECT_EQ(res.status, 201) << res.body;
    return digest;
  }

  static std::string ImageManifest(const std::string& config_digest, size_t config_size,
                                   const std::string& layer_digest, size_t layer_size) {
    nlohmann::json m = {
        {"schemaVersion", 2},
        {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
        {"config",
         {{"mediaType", "application/vnd.oci.image.config.v1+json"},
          {"digest", config_digest},
          {"size", config_size}}},
        {"layers", nlohmann::json::array({{{"mediaType", "application/vnd.oci.image.layer.v1.tar"},
                                           {"digest", layer_digest},
                                           {"size", layer_size}}})}};
    return m.dump();
  }

  // Pushes a config, a layer and a manifest tagged `tag`; returns the manifest's digest.
  std::string PushImage(const std::string& repo, const std::string& tag,
                        const std::string& layer = "layer bytes") {
    std::string config = R"({"architecture":"amd64","os":"linux"})";
    std::string cd = PushBlob(repo, config);
    std::string ld = PushBlob(repo, layer);
    std::string manifest = ImageManifest(cd, config.size(), ld, layer.size());
    auto res = Call("PUT", "/v2/" + repo + "/manifests/" + tag, manifest, "tok-alpha-op",
                    {{"Content-Type", "application/vnd.oci.image.manifest.v1+json"}});
    EXPECT_EQ(res.status, 201) << res.body;
    return Sha256Digest(manifest);
  }

  base::ManualClock clock_;
  base::ManualClockEnv env_{base::Env::Default(), clock_};
  std::filesystem::path root_;
  std::unique_ptr<objstore::Store> store_;
  FixedAuthenticator auth_;
  std::unique_ptr<Registry> registry_;
  std::unique_ptr<net::Server> server_;
};

}  // namespace sovai::registry::testing

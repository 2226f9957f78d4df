// Test support: a real object store and S3 front end on 127.0.0.1:<any port>, wired as `sovai
// server` wires them, with one admin access key. For tests of code that talks S3 (the S3 client,
// volume sync, jobs). Not part of any library.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "exec/s3_client.h"
#include "net/http.h"
#include "objstore/s3_api.h"
#include "objstore/store.h"

namespace sovai::exec::testing {

inline constexpr char kS3TestRegion[] = "eu-west-local";
inline constexpr char kS3TestAdminUser[] = "admin";
inline constexpr char kS3TestAccessKey[] = "SVTESTADMIN000000001";
inline constexpr char kS3TestSecretKey[] = "test-secret-key-0123456789abcdefghijklmn";

class S3TestServer {
 public:
  // Opens the store under <dir>/objstore and starts serving.
  base::Status Start(const std::string& dir) {
    objstore::StoreOptions store_options;
    store_options.root = dir + "/objstore";
    store_options.region = kS3TestRegion;
    SOVAI_ASSIGN_OR_RETURN(store_, objstore::Store::Open(store_options));
    if (auto st = store_->PutAccessKey({kS3TestAccessKey, kS3TestSecretKey, kS3TestAdminUser})) {
      return base::InternalError(st->ToString());
    }
    api_ = std::make_unique<objstore::S3Api>(
        *store_,
        objstore::S3ApiOptions{.region = kS3TestRegion, .admin_users = {kS3TestAdminUser}});
    net::Router router;
    api_->Install(router);
    server_ = std::make_unique<net::Server>(std::move(router));
    net::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.error_renderer = objstore::S3Api::RenderServerError;
    return server_->Start(options);
  }

  std::string endpoint() const { return "http://" + server_->address(); }
  objstore::Store& store() { return *store_; }
  // Options of a client acting as the admin.
  S3ClientOptions ClientOptions() const {
    return {.endpoint = endpoint(),
            .region = kS3TestRegion,
            .access_key = kS3TestAccessKey,
            .secret_key = kS3TestSecretKey};
  }

 private:
  // Destroyed in reverse: the server stops before the API and the store it calls.
  std::unique_ptr<objstore::Store> store_;
  std::unique_ptr<objstore::S3Api> api_;
  std::unique_ptr<net::Server> server_;
};

}  // namespace sovai::exec::testing

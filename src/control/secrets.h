// Secrets at rest in control.db (the secret keys of datastores, datastores.h): sealed with
// AES-256-GCM under the server's master key, `<data-dir>/secrets.key`.
//
//   SecretBox box(env, base::JoinPath(data_dir, kSecretsKeyFile));
//   SOVAI_ASSIGN_OR_RETURN(SealedSecret sealed, box.Seal(secret, "datastore\0prj_1\0ext"));
//   ... store sealed.key_id and sealed.sealed in the row ...
//   SOVAI_ASSIGN_OR_RETURN(std::string secret, box.Open(sealed, "datastore\0prj_1\0ext"));
//
// The master key file holds exactly 32 random bytes, mode 0600; it is created on the first Seal
// (atomically: a reader never sees half a key) and never rewritten. Whoever holds control.db
// without it learns nothing of the secrets; back both up together (docs/api/datastores.md).
//
// A sealed secret is `nonce (12 bytes) || ciphertext || tag (16 bytes)`, with the id of the key
// that sealed it ("v1:" and 16 hex digits of a hash of the key), so that a key can be rotated
// later (rows name their key) and a replaced key file is reported as such, not as tampering.
// `context` is the AES-GCM associated data: a row's ciphertext opens only in its own row.
//
// Thread-safety: SecretBox is thread-safe; the free functions are pure.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "base/env.h"
#include "base/status.h"

namespace sovai::control {

inline constexpr char kSecretsKeyFile[] = "secrets.key";

struct SealedSecret {
  std::string key_id;  // "v1:0123456789abcdef": which master key sealed it
  std::string sealed;  // nonce || ciphertext || tag
};

// "v1:" + the first 16 hex digits of SHA-256("sovai secrets key id" NUL key): names a key without
// revealing it.
std::string MasterKeyId(std::string_view key);

// Seals `plaintext` under `key` (32 bytes; a bug otherwise) with a fresh random nonce.
SealedSecret SealWithKey(std::string_view key, std::string_view plaintext,
                         std::string_view context);
// Opens a sealed secret. Errors: FailedPrecondition when `secret.key_id` is not `key`'s id (the
// message names both ids); DataLoss when it is shorter than a nonce and a tag, or the tag does not
// verify (modified bytes, or another context).
base::Result<std::string> OpenWithKey(std::string_view key, const SealedSecret& secret,
                                      std::string_view context);

// Reads the master key at `path`. Errors: NotFound when there is none; DataLoss when it is not
// exactly 32 bytes; FailedPrecondition when group or others may read it ("chmod 600").
base::Result<std::string> ReadMasterKey(base::Env& env, const std::string& path);
// ReadMasterKey, or, when the file does not exist, 32 new random bytes written to `path`
// atomically with mode 0600 (temporary file, fsync, rename, fsync of the directory).
base::Result<std::string> LoadOrCreateMasterKey(base::Env& env, const std::string& path);

class SecretBox {
 public:
  SecretBox(base::Env& env, std::string key_path) : env_(env), key_path_(std::move(key_path)) {}
  SecretBox(const SecretBox&) = delete;
  SecretBox& operator=(const SecretBox&) = delete;

  // Seals under the master key, creating the key file on first use (LoadOrCreateMasterKey's
  // errors).
  base::Result<SealedSecret> Seal(std::string_view plaintext, std::string_view context);
  // Opens under the master key. Errors: FailedPrecondition when the key file is missing or is
  // another key than the one that sealed it (saying to restore it), ReadMasterKey's errors,
  // OpenWithKey's.
  base::Result<std::string> Open(const SealedSecret& secret, std::string_view context);

  const std::string& key_path() const { return key_path_; }

 private:
  // The key, read (or created, with `create`) once.
  base::Result<std::string> Key(bool create);

  base::Env& env_;
  const std::string key_path_;
  std::mutex mu_;                   // guards key_
  std::optional<std::string> key_;  // the master key once read or created
};

}  // namespace sovai::control

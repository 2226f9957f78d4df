#include "control/secrets.h"

#include "base/crypto.h"

namespace sovai::control {

namespace {

using base::Result;
using base::Status;

constexpr std::string_view kKeyIdVersion = "v1:";
constexpr size_t kKeyIdHexDigits = 16;

}  // namespace

std::string MasterKeyId(std::string_view key) {
  std::string input = "sovai secrets key id";
  input.push_back('\0');
  input.append(key);
  return std::string(kKeyIdVersion) +
         base::HexEncode(base::Sha256(input)).substr(0, kKeyIdHexDigits);
}

SealedSecret SealWithKey(std::string_view key, std::string_view plaintext,
                         std::string_view context) {
  std::string nonce = base::RandomBytes(base::kAesGcmNonceBytes);
  return SealedSecret{MasterKeyId(key),
                      nonce + base::Aes256GcmSeal(key, nonce, plaintext, context)};
}

Result<std::string> OpenWithKey(std::string_view key, const SealedSecret& secret,
                                std::string_view context) {
  const std::string id = MasterKeyId(key);
  if (secret.key_id != id) {
    return base::FailedPreconditionError("the secret was sealed with master key " + secret.key_id +
                                         ", but the key at hand is " + id);
  }
  if (secret.sealed.size() < base::kAesGcmNonceBytes + base::kAesGcmTagBytes) {
    return base::DataLossError("a sealed secret of " + std::to_string(secret.sealed.size()) +
                               " bytes is shorter than a nonce and a tag");
  }
  std::string_view sealed = secret.sealed;
  return base::Aes256GcmOpen(key, sealed.substr(0, base::kAesGcmNonceBytes),
                             sealed.substr(base::kAesGcmNonceBytes), context);
}

Result<std::string> ReadMasterKey(base::Env& env, const std::string& path) {
  SOVAI_ASSIGN_OR_RETURN(base::FileStat stat, env.Stat(path));
  if ((stat.mode & 077) != 0) {
    return base::FailedPreconditionError(path +
                                         " holds the master key of the stored secrets and is "
                                         "readable by group or others; run 'chmod 600 " +
                                         path + "'");
  }
  auto key = env.ReadFile(path, base::kAes256KeyBytes);
  if (!key.ok() && key.status().code() != base::StatusCode::kResourceExhausted) {
    return key.status();
  }
  if (!key.ok() || key->size() != base::kAes256KeyBytes) {
    return base::DataLossError(path + " is not a master key (" +
                               std::to_string(base::kAes256KeyBytes) +
                               " bytes); restore it from a backup of the data directory");
  }
  return std::move(*key);
}

Result<std::string> LoadOrCreateMasterKey(base::Env& env, const std::string& path) {
  auto key = ReadMasterKey(env, path);
  if (key.ok() || key.status().code() != base::StatusCode::kNotFound) return key;
  std::string fresh = base::RandomBytes(base::kAes256KeyBytes);
  SOVAI_RETURN_IF_ERROR(env.WriteFileAtomically(path, fresh, 0600).WithContext("creating " + path));
  return fresh;
}

Result<std::string> SecretBox::Key(bool create) {
  std::lock_guard lock(mu_);
  if (key_) return *key_;
  auto key = create ? LoadOrCreateMasterKey(env_, key_path_) : ReadMasterKey(env_, key_path_);
  if (!key.ok()) {
    if (key.status().code() == base::StatusCode::kNotFound) {
      return base::FailedPreconditionError(
          "the master key " + key_path_ +
          " is missing, so the stored secrets cannot be decrypted; restore it from a backup of "
          "the data directory, or delete and add the datastores again");
    }
    return key.status();
  }
  key_ = std::move(*key);
  return *key_;
}

Result<SealedSecret> SecretBox::Seal(std::string_view plaintext, std::string_view context) {
  SOVAI_ASSIGN_OR_RETURN(std::string key, Key(/*create=*/true));
  return SealWithKey(key, plaintext, context);
}

Result<std::string> SecretBox::Open(const SealedSecret& secret, std::string_view context) {
  SOVAI_ASSIGN_OR_RETURN(std::string key, Key(/*create=*/false));
  auto opened = OpenWithKey(key, secret, context);
  if (!opened.ok() && opened.status().code() == base::StatusCode::kFailedPrecondition) {
    return base::FailedPreconditionError(
        opened.status().message() + " (" + key_path_ +
        "); restore the key file it was sealed with, or delete and add the datastore again");
  }
  return opened;
}

}  // namespace sovai::control

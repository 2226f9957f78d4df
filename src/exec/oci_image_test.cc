#include "exec/oci_image.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/crypto.h"
#include "base/strings.h"
#include "exec/log_capture.h"
#include "exec/sandbox.h"
#include "exec/sandbox_test_util.h"
#include "exec/tar_test_util.h"

namespace sovai::exec {
namespace {

using base::StatusCode;
using nlohmann::json;
using testing::Gzip;
using testing::TarBuilder;

std::string Sha256Hex(std::string_view data) { return base::HexEncode(base::Sha256(data)); }

// --- Building image archives ---

struct ImageSpec {
  std::vector<std::string> layers;  // uncompressed layer tars
  std::vector<bool> gzip;           // per layer (missing: uncompressed)
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "LANG=C.UTF-8"};
  std::vector<std::string> entrypoint = {"/usr/bin/tool"};
  std::vector<std::string> cmd = {"--help"};
  std::string working_dir = "/opt/app";
  std::string architecture = std::string(HostImageArchitecture());
  std::optional<std::vector<std::string>> diff_ids;  // default: the layers' sha256
  std::string config_padding;                        // makes the config larger

  std::string Stored(size_t i) const {
    return i < gzip.size() && gzip[i] ? Gzip(layers[i]) : layers[i];
  }
  std::string Config() const {
    json ids = json::array();
    if (diff_ids) {
      for (const std::string& id : *diff_ids) ids.push_back(id);
    } else {
      for (const std::string& l : layers) ids.push_back("sha256:" + Sha256Hex(l));
    }
    json config = {{"architecture", architecture},
                   {"os", "linux"},
                   {"config",
                    {{"Env", env},
                     {"Entrypoint", entrypoint},
                     {"Cmd", cmd},
                     {"WorkingDir", working_dir},
                     {"User", "1000"}}},
                   {"rootfs", {{"type", "layers"}, {"diff_ids", ids}}}};
    if (!config_padding.empty()) config["comment"] = config_padding;
    return config.dump();
  }
};

// `docker save` output: Docker < 25 (`<id>/layer.tar`, `<config hex>.json`), or Docker >= 25
// (`blobs/sha256/<hex>` for both).
std::string DockerSave(const ImageSpec& spec, bool blobs_layout = false) {
  TarBuilder tar;
  std::string config = spec.Config();
  std::string config_name =
      blobs_layout ? "blobs/sha256/" + Sha256Hex(config) : Sha256Hex(config) + ".json";
  json layers = json::array();
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    std::string stored = spec.Stored(i);
    std::string name = blobs_layout ? "blobs/sha256/" + Sha256Hex(stored)
                                    : Sha256Hex("layer" + std::to_string(i)) + "/layer.tar";
    tar.File(name, stored);
    layers.push_back(name);
  }
  tar.File(config_name, config);
  json manifest =
      json::array({{{"Config", config_name}, {"RepoTags", {"test:latest"}}, {"Layers", layers}}});
  tar.File("manifest.json", manifest.dump());
  return tar.Finish();
}

// An OCI image layout in a tar. Blobs are kept by digest so that tests can tamper with them.
class OciBuilder {
 public:
  json AddBlob(std::string media_type, const std::string& content) {
    std::string hex = Sha256Hex(content);
    blobs_[hex] = content;
    return {{"mediaType", std::move(media_type)},
            {"digest", "sha256:" + hex},
            {"size", content.size()}};
  }
  // Config, layers and manifest of `spec`; returns the manifest's descriptor.
  json AddImage(const ImageSpec& spec) {
    json layers = json::array();
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      bool gz = i < spec.gzip.size() && spec.gzip[i];
      layers.push_back(AddBlob(gz ? "application/vnd.oci.image.layer.v1.tar+gzip"
                                  : "application/vnd.oci.image.layer.v1.tar",
                               spec.Stored(i)));
    }
    json manifest = {{"schemaVersion", 2},
                     {"mediaType", "application/vnd.oci.image.manifest.v1+json"},
                     {"config", AddBlob("application/vnd.oci.image.config.v1+json", spec.Config())},
                     {"layers", layers}};
    return AddBlob("application/vnd.oci.image.manifest.v1+json", manifest.dump());
  }
  void Tamper(const json& descriptor, std::string content) {
    blobs_[descriptor["digest"].get<std::string>().substr(7)] = std::move(content);
  }
  std::string Build(const json& manifests, std::string layout_version = "1.0.0") const {
    TarBuilder tar;
    tar.File("oci-layout", json{{"imageLayoutVersion", layout_version}}.dump());
    tar.File("index.json", json{{"schemaVersion", 2}, {"manifests", manifests}}.dump());
    tar.Dir("blobs/").Dir("blobs/sha256/");
    for (const auto& [hex, content] : blobs_) tar.File("blobs/sha256/" + hex, content);
    return tar.Finish();
  }

 private:
  std::map<std::string, std::string> blobs_;
};

std::string OciLayout(const ImageSpec& spec) {
  OciBuilder oci;
  json manifest = oci.AddImage(spec);
  return oci.Build(json::array({manifest}));
}

// The two layers that most tests unpack (see CheckStandardRootfs for the expected result).
ImageSpec StandardImage() {
  ImageSpec spec;
  spec.layers.push_back(TarBuilder()
                            .Dir("./", 0700)  // the root: stays 0755
                            .Dir("etc/", 0755, 1'500'000'000)
                            .File("etc/passwd", "root:x:0:0\n")
                            .File("etc/motd", "hello\n")
                            .Dir("opt/app/")  // "opt" is implicit
                            .File("opt/app/a", "a")
                            .Dir("opt/app/sub/")
                            .File("opt/app/sub/deep", "deep")
                            .File("usr/bin/tool", "#!/bin/sh\necho tool\n", 04755)
                            .File("usr/bin/secret", "s", 0600)
                            .File("usr/bin/shared", "w", 0666)
                            .File("usr/bin/gone", "g")
                            .Symlink("bin", "usr/bin")
                            .HardLink("usr/bin/tool2", "usr/bin/tool")
                            .Fifo("run/fifo")
                            .Dir("tmp/", 01777)
                            .Dir("root/", 0700)
                            .File("var/keep", "k")
                            .Symlink("var/abs", "/etc/passwd")
                            .Finish());
  spec.layers.push_back(TarBuilder()
                            .File("etc/.wh.motd", "")
                            .File("opt/app/c", "c")  // before the marker: kept all the same
                            .File("opt/app/.wh..wh..opq", "")
                            .Dir("opt/app/sub/")
                            .File("opt/app/sub/new", "new")
                            .File("etc/passwd", "root:x:0:0:v2\n", 0644, 1'650'000'000)
                            .File("var/.wh.missing", "")
                            .Dir("var/keep/")  // a file becomes a directory
                            .File("var/keep/inner", "i")
                            .Fifo("usr/bin/gone")  // a file becomes a (skipped) fifo
                            .Finish());
  spec.gzip = {false, true};
  return spec;
}

// --- Fixture ---

class OciImageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base != nullptr ? base : "/tmp") + "/sovai_img_test_XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
    ASSERT_TRUE(env_.CreateDirs(Path("images")).ok());
    ASSERT_TRUE(env_.CreateDirs(Path("outside")).ok());
    ASSERT_TRUE(env_.WriteFileAtomically(Path("outside/sentinel"), "sentinel\n").ok());
  }
  void TearDown() override { ASSERT_TRUE(env_.DeleteDirRecursive(dir_).ok()); }

  std::string Path(std::string_view rel) const { return base::JoinPath(dir_, rel); }
  std::string Rootfs() const { return Path("images/rootfs"); }
  std::string InRootfs(std::string_view rel) const { return base::JoinPath(Rootfs(), rel); }

  std::string WriteArchive(const std::string& bytes, std::string_view name = "archive.tar") {
    std::string path = Path(name);
    EXPECT_TRUE(env_.WriteFileAtomically(path, bytes).ok());
    return path;
  }
  base::Result<ImageInfo> Unpack(const std::string& archive, UnpackOptions options = {}) {
    return UnpackImage(WriteArchive(archive), Rootfs(), options);
  }

  // Nothing was left in images/ (no rootfs, no temporary), nothing changed outside.
  void ExpectNothingWritten() {
    EXPECT_EQ(*env_.ListDir(Path("images")), std::vector<std::string>{});
    EXPECT_EQ(*env_.ListDir(Path("outside")), std::vector<std::string>{"sentinel"});
    EXPECT_EQ(*env_.ReadFile(Path("outside/sentinel")), "sentinel\n");
    EXPECT_EQ(*env_.ListDir(dir_), (std::vector<std::string>{"archive.tar", "images", "outside"}));
  }

  // A one-layer docker-save image of `layer` must fail with `code` and `message`, leaving nothing.
  void ExpectRejected(const std::string& layer, StatusCode code, std::string_view message,
                      UnpackOptions options = {}) {
    ImageSpec spec;
    spec.layers = {layer};
    auto info = Unpack(DockerSave(spec), options);
    EXPECT_EQ(info.status().code(), code) << info.status();
    EXPECT_NE(info.status().message().find(message), std::string::npos) << info.status();
    ExpectNothingWritten();
  }

  struct stat Lstat(std::string_view rel) {
    struct stat st {};
    EXPECT_EQ(::lstat(InRootfs(rel).c_str(), &st), 0) << rel;
    return st;
  }
  bool Exists(std::string_view rel) {
    struct stat st;
    return ::lstat(InRootfs(rel).c_str(), &st) == 0;
  }
  std::string Content(std::string_view rel) { return env_.ReadFile(InRootfs(rel)).value_or("?"); }
  std::string LinkTarget(std::string_view rel) {
    char buf[4096];
    ssize_t n = ::readlink(InRootfs(rel).c_str(), buf, sizeof buf);
    return n < 0 ? "?" : std::string(buf, static_cast<size_t>(n));
  }

  void CheckStandardRootfs(const ImageInfo& info, std::string_view format) {
    const ImageSpec spec = StandardImage();
    EXPECT_EQ(info.format, format);
    EXPECT_EQ(info.config_digest, "sha256:" + Sha256Hex(spec.Config()));
    EXPECT_EQ(info.os, "linux");
    EXPECT_EQ(info.architecture, HostImageArchitecture());
    EXPECT_EQ(info.env, spec.env);
    EXPECT_EQ(info.entrypoint, spec.entrypoint);
    EXPECT_EQ(info.cmd, spec.cmd);
    EXPECT_EQ(info.working_dir, "/opt/app");
    EXPECT_EQ(info.user, "1000");
    EXPECT_EQ(info.layers, 2u);
    EXPECT_EQ(info.whiteouts, 3u);        // etc/motd, opt/app (opaque), var/missing
    EXPECT_EQ(info.skipped_special, 2u);  // run/fifo, usr/bin/gone
    // Layer 1: passwd 11, motd 6, a 1, deep 4, tool 20, secret 1, shared 1, gone 1, keep 1.
    // Layer 2: c 1, new 3, passwd 14, inner 1.
    EXPECT_EQ(info.bytes, 46u + 19u);

    // Whiteouts and the opaque directory.
    EXPECT_FALSE(Exists("etc/motd"));
    EXPECT_FALSE(Exists("etc/.wh.motd"));
    EXPECT_EQ(Content("etc/passwd"), "root:x:0:0:v2\n");
    EXPECT_FALSE(Exists("opt/app/a"));
    EXPECT_FALSE(Exists("opt/app/.wh..wh..opq"));
    EXPECT_EQ(Content("opt/app/c"), "c");
    EXPECT_FALSE(Exists("opt/app/sub/deep"));
    EXPECT_EQ(Content("opt/app/sub/new"), "new");
    EXPECT_FALSE(Exists("var/.wh.missing"));
    EXPECT_EQ(Content("var/keep/inner"), "i");
    EXPECT_FALSE(Exists("usr/bin/gone"));
    EXPECT_FALSE(Exists("run/fifo"));
    EXPECT_TRUE(S_ISDIR(Lstat("run").st_mode));

    // Modes: readable by everyone, no setuid, no group/other write; directories 0755.
    EXPECT_EQ(Lstat("usr/bin/tool").st_mode & 07777, 0755u);
    EXPECT_EQ(Lstat("usr/bin/secret").st_mode & 07777, 0644u);
    EXPECT_EQ(Lstat("usr/bin/shared").st_mode & 07777, 0644u);
    EXPECT_EQ(Lstat("etc/passwd").st_mode & 07777, 0644u);
    for (const char* d : {"", "etc", "opt", "tmp", "root", "var/keep", "run"}) {
      EXPECT_EQ(Lstat(d).st_mode & 07777, 0755u) << d;
    }
    // Links.
    EXPECT_TRUE(S_ISLNK(Lstat("bin").st_mode));
    EXPECT_EQ(LinkTarget("bin"), "usr/bin");
    EXPECT_EQ(LinkTarget("var/abs"), "/etc/passwd");  // stored as is
    EXPECT_EQ(Lstat("usr/bin/tool2").st_ino, Lstat("usr/bin/tool").st_ino);
    EXPECT_EQ(Content("usr/bin/tool2"), "#!/bin/sh\necho tool\n");
    // Modification times, directories' included (set after their content was written).
    EXPECT_EQ(Lstat("etc/passwd").st_mtim.tv_sec, 1'650'000'000);
    EXPECT_EQ(Lstat("opt/app/c").st_mtim.tv_sec, testing::kTestMtime);
    EXPECT_EQ(Lstat("etc").st_mtim.tv_sec, 1'500'000'000);
    EXPECT_EQ(Lstat("opt/app/sub").st_mtim.tv_sec, testing::kTestMtime);
    EXPECT_EQ(Lstat("bin").st_mtim.tv_sec, testing::kTestMtime);
    // Only the rootfs is left in images/.
    EXPECT_EQ(*env_.ListDir(Path("images")), std::vector<std::string>{"rootfs"});
  }

  base::Env& env_ = base::Env::Default();
  std::string dir_;
};

// --- Formats ---

TEST_F(OciImageTest, DockerSaveWithWhiteoutsAndOpaqueDirectory) {
  auto info = Unpack(DockerSave(StandardImage()));
  ASSERT_TRUE(info.ok()) << info.status();
  CheckStandardRootfs(*info, "docker-save");
}

TEST_F(OciImageTest, DockerSaveBlobsLayoutGzippedArchive) {
  // Docker >= 25 names members by digest; `docker save | gzip` compresses the whole archive.
  auto info = Unpack(Gzip(DockerSave(StandardImage(), /*blobs_layout=*/true)));
  ASSERT_TRUE(info.ok()) << info.status();
  CheckStandardRootfs(*info, "docker-save");
}

TEST_F(OciImageTest, OciLayoutWithWhiteoutsAndOpaqueDirectory) {
  auto info = Unpack(OciLayout(StandardImage()));
  ASSERT_TRUE(info.ok()) << info.status();
  CheckStandardRootfs(*info, "oci-layout");
}

TEST_F(OciImageTest, DockerSaveFollowsLayerSymlinksOfTheArchive) {
  // Older Docker stores a layer shared by two image IDs once and links the other to it.
  std::string layer = TarBuilder().File("hello", "world").Finish();
  std::string config = ImageSpec{.layers = {layer, layer}}.Config();
  std::string archive =
      TarBuilder()
          .File("aaaa/layer.tar", layer)
          .Symlink("bbbb/layer.tar", "../aaaa/layer.tar")
          .File("config.json", config)
          .File("manifest.json", json::array({{{"Config", "config.json"},
                                               {"Layers", {"aaaa/layer.tar", "./bbbb/layer.tar"}}}})
                                     .dump())
          .Finish();
  auto info = Unpack(archive);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->layers, 2u);
  EXPECT_EQ(Content("hello"), "world");
}

TEST_F(OciImageTest, ReplacementsBetweenLayers) {
  ImageSpec spec;
  spec.layers = {TarBuilder()
                     .Dir("d/")
                     .File("d/x", "x")
                     .File("f", "file")
                     .Symlink("s", "f")
                     .File("h", "hard")
                     .HardLink("h2", "h")
                     .Finish(),
                 TarBuilder()
                     .File("d", "now a file")  // a directory with content becomes a file
                     .Dir("f/")                // a file becomes a directory
                     .File("s", "now a file")  // a symlink becomes a file (not written through)
                     .File("h2", "new")        // a hard link is replaced, not written through
                     .Finish()};
  auto info = Unpack(DockerSave(spec));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(Content("d"), "now a file");
  EXPECT_TRUE(S_ISDIR(Lstat("f").st_mode));
  EXPECT_TRUE(S_ISREG(Lstat("s").st_mode));
  EXPECT_EQ(Content("h"), "hard");
  EXPECT_EQ(Content("h2"), "new");
}

TEST_F(OciImageTest, OciIndexChoosesThisPlatform) {
  OciBuilder oci;
  ImageSpec other = ImageSpec{.layers = {TarBuilder().File("which", "other").Finish()}};
  other.architecture = "s390x-test";
  ImageSpec mine = ImageSpec{.layers = {TarBuilder().File("which", "mine").Finish()}};
  json other_desc = oci.AddImage(other);
  other_desc["platform"] = {{"os", "linux"}, {"architecture", "s390x-test"}};
  json mine_desc = oci.AddImage(mine);
  mine_desc["platform"] = {{"os", "linux"}, {"architecture", HostImageArchitecture()}};
  json attestation = oci.AddImage(ImageSpec{.layers = {TarBuilder().Finish()}});
  attestation["platform"] = {{"os", "unknown"}, {"architecture", "unknown"}};
  // A nested index (as `docker buildx` writes for multi-platform images).
  json nested = oci.AddBlob(
      "application/vnd.oci.image.index.v1+json",
      json{{"schemaVersion", 2}, {"manifests", {attestation, other_desc, mine_desc}}}.dump());
  auto info = Unpack(oci.Build(json::array({nested})));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(Content("which"), "mine");
  ASSERT_TRUE(env_.DeleteDirRecursive(Rootfs()).ok());

  // Only another platform: a clear error.
  OciBuilder only_other;
  json desc = only_other.AddImage(other);
  desc["platform"] = {{"os", "linux"}, {"architecture", "s390x-test"}};
  info = Unpack(only_other.Build(json::array({desc})));
  EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition) << info.status();
  EXPECT_NE(info.status().message().find("linux/s390x-test"), std::string::npos) << info.status();
  ExpectNothingWritten();
}

TEST_F(OciImageTest, ConfigForAnotherArchitectureIsFailedPrecondition) {
  ImageSpec spec = ImageSpec{.layers = {TarBuilder().File("a", "a").Finish()}};
  spec.architecture = "riscv-test";
  auto info = Unpack(DockerSave(spec));
  EXPECT_EQ(info.status().code(), StatusCode::kFailedPrecondition) << info.status();
  EXPECT_NE(info.status().message().find("linux/riscv-test"), std::string::npos);
  ExpectNothingWritten();
}

// --- Integrity ---

TEST_F(OciImageTest, OciBlobsWhoseDigestDoesNotMatchAreDataLoss) {
  ImageSpec spec = StandardImage();
  for (int which = 0; which < 4; ++which) {
    SCOPED_TRACE(which);
    OciBuilder oci;
    json manifest = oci.AddImage(spec);
    // Find the blobs again through the manifest.
    OciBuilder probe;
    json layer0 = probe.AddBlob("", spec.Stored(0));
    json layer1 = probe.AddBlob("", spec.Stored(1));
    json config = probe.AddBlob("", spec.Config());
    std::string expected = "does not match its digest";
    switch (which) {
      case 0: {  // a layer, same size
        std::string tampered = spec.Stored(0);
        tampered[600] ^= 1;
        oci.Tamper(layer0, tampered);
        break;
      }
      case 1: {  // a gzip layer: another valid gzip stream of the same tar but one byte
        std::string tar = spec.layers[1];
        tar[0] = 'X';
        oci.Tamper(layer1, Gzip(tar));
        expected = "";  // size or digest: either is DataLoss
        break;
      }
      case 2: {
        std::string tampered = spec.Config();
        tampered[tampered.find("C.UTF-8")] = 'X';
        oci.Tamper(config, tampered);
        break;
      }
      case 3: {
        std::string text =
            json{{"schemaVersion", 2}, {"config", config}, {"layers", {layer0}}}.dump();
        text.resize(manifest["size"].get<size_t>(), ' ');
        oci.Tamper(manifest, text);
        break;
      }
    }
    auto info = Unpack(oci.Build(json::array({manifest})));
    EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
    EXPECT_NE(info.status().message().find(expected), std::string::npos) << info.status();
    ExpectNothingWritten();
  }
}

TEST_F(OciImageTest, DescriptorSizeMismatchIsDataLoss) {
  OciBuilder oci;
  json manifest = oci.AddImage(StandardImage());
  manifest["size"] = manifest["size"].get<uint64_t>() + 1;
  auto info = Unpack(oci.Build(json::array({manifest})));
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
  EXPECT_NE(info.status().message().find("descriptor says"), std::string::npos) << info.status();
  ExpectNothingWritten();
}

TEST_F(OciImageTest, DockerLayerNotMatchingItsDiffIdIsDataLoss) {
  ImageSpec spec = StandardImage();
  spec.diff_ids = {"sha256:" + Sha256Hex(spec.layers[0]), "sha256:" + std::string(64, '0')};
  auto info = Unpack(DockerSave(spec));
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
  EXPECT_NE(info.status().message().find("diff_id"), std::string::npos) << info.status();
  EXPECT_NE(info.status().message().find("image layer 2 of 2"), std::string::npos);
  ExpectNothingWritten();

  spec.diff_ids = {"sha256:" + Sha256Hex(spec.layers[0])};  // one for two layers
  info = Unpack(DockerSave(spec));
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
  ExpectNothingWritten();
}

TEST_F(OciImageTest, DockerConfigNotMatchingItsNameIsDataLoss) {
  ImageSpec spec = StandardImage();
  std::string archive = DockerSave(spec);
  std::string config = spec.Config();
  size_t at = archive.find(config);
  ASSERT_NE(at, std::string::npos);
  archive[at + config.find("C.UTF-8")] = 'X';  // same size, the checksum covers only headers
  auto info = Unpack(archive);
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
  ExpectNothingWritten();
}

// --- Hostile layers: rejected (or neutralised), nothing written outside ---

TEST_F(OciImageTest, PathsLeavingTheRootAreRejected) {
  ExpectRejected(TarBuilder().File("../../etc/passwd", "x").Finish(), StatusCode::kInvalidArgument,
                 "'..'");
  ExpectRejected(TarBuilder().File("a/../../outside/sentinel", "x").Finish(),
                 StatusCode::kInvalidArgument, "'..'");
  ExpectRejected(TarBuilder().File("/etc/passwd", "x").Finish(), StatusCode::kInvalidArgument,
                 "absolute");
  ExpectRejected(TarBuilder().Pax({{"path", "ok/../../../x"}}).File("innocent", "x").Finish(),
                 StatusCode::kInvalidArgument, "'..'");
  ExpectRejected(TarBuilder().File(std::string(120, 'a') + "/../../../../x", "x").Finish(),
                 StatusCode::kInvalidArgument, "'..'");  // a GNU long name
  ExpectRejected(TarBuilder().Dir("../").Finish(), StatusCode::kInvalidArgument, "'..'");
  ExpectRejected(TarBuilder().Symlink("../escape", "/").Finish(), StatusCode::kInvalidArgument,
                 "'..'");
  ExpectRejected(TarBuilder().File("./", "x").Finish(), StatusCode::kInvalidArgument, "root");
}

TEST_F(OciImageTest, SymlinksOfTheImageAreNeverFollowed) {
  std::string outside = Path("outside");
  std::string outside_rel = outside.substr(1);  // "tmp/sovai_img_test_X/outside"
  // "evil -> /", then a file through it aimed at the real outside directory.
  ExpectRejected(
      TarBuilder().Symlink("evil", "/").File("evil/" + outside_rel + "/x", "pwned").Finish(),
      StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().Symlink("evil", outside).File("evil/x", "pwned").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().Symlink("evil", outside).Dir("evil/sub/").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().Symlink("evil", outside).Symlink("evil/l", "/").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  // Relative symlinks that climb out.
  ExpectRejected(
      TarBuilder().Symlink("up", "../../outside").File("up/sentinel", "overwritten").Finish(),
      StatusCode::kInvalidArgument, "is a symlink");
  // Whiteouts and opaque markers through a symlink would delete outside.
  ExpectRejected(TarBuilder().Symlink("evil", outside).File("evil/.wh.sentinel", "").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().Symlink("evil", outside).File("evil/.wh..wh..opq", "").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().File(".wh..", "").Finish(), StatusCode::kInvalidArgument,
                 "names no file");
  ExpectRejected(TarBuilder().File("a/.wh...", "").Finish(), StatusCode::kInvalidArgument,
                 "names no file");
}

TEST_F(OciImageTest, HardLinksOutsideTheImageAreRejected) {
  std::string outside = Path("outside");
  ExpectRejected(TarBuilder().HardLink("shadow", "/etc/shadow").Finish(),
                 StatusCode::kInvalidArgument, "absolute");
  ExpectRejected(TarBuilder().HardLink("s", "../../outside/sentinel").Finish(),
                 StatusCode::kInvalidArgument, "'..'");
  ExpectRejected(TarBuilder().Symlink("evil", outside).HardLink("s", "evil/sentinel").Finish(),
                 StatusCode::kInvalidArgument, "is a symlink");
  ExpectRejected(TarBuilder().HardLink("s", "missing").Finish(), StatusCode::kInvalidArgument,
                 "does not exist");
  ExpectRejected(TarBuilder().Dir("d/").HardLink("s", "d").Finish(), StatusCode::kInvalidArgument,
                 "is a directory");
  // A hard link to a symlink links the symlink itself (never what it points to).
  ImageSpec spec;
  spec.layers = {TarBuilder()
                     .Symlink("evil", Path("outside/sentinel"))
                     .HardLink("h", "evil")
                     .File("h", "replaced")  // removes the link, never writes through it
                     .Finish()};
  auto info = Unpack(DockerSave(spec));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(Content("h"), "replaced");
  EXPECT_EQ(*env_.ReadFile(Path("outside/sentinel")), "sentinel\n");
}

TEST_F(OciImageTest, SymlinkReplacedByFileIsNeutralised) {
  // "evil -> outside/sentinel" then a regular file "evil": the link is replaced, never written
  // through.
  ImageSpec spec;
  spec.layers = {TarBuilder().Symlink("evil", Path("outside/sentinel")).Finish(),
                 TarBuilder().File("evil", "pwned").Symlink("dir", Path("outside")).Finish(),
                 TarBuilder().Dir("dir/").File("dir/sentinel", "pwned").Finish()};
  auto info = Unpack(DockerSave(spec));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_TRUE(S_ISREG(Lstat("evil").st_mode));
  EXPECT_EQ(Content("evil"), "pwned");
  EXPECT_TRUE(S_ISDIR(Lstat("dir").st_mode));
  EXPECT_EQ(*env_.ReadFile(Path("outside/sentinel")), "sentinel\n");
  EXPECT_EQ(*env_.ListDir(Path("outside")), std::vector<std::string>{"sentinel"});
}

// Random layers made of the pieces attacks use (links to outside, whiteouts, replacements,
// "..") never write, delete or link anything outside the rootfs, whatever their order, and either
// unpack completely or leave nothing.
TEST_F(OciImageTest, RandomHostileLayersNeverEscape) {
  const std::string outside = Path("outside");
  const std::vector<std::string> names = {
      "a", "b", "evil", "up", ".wh.a", ".wh.evil", ".wh..wh..opq", "sentinel", ".", ".."};
  const std::vector<std::string> link_targets = {
      "/", outside,  outside + "/sentinel", "../../outside", "../outside/sentinel",
      "a", "evil/a", "/etc/shadow",         "b/../.."};
  uint64_t state = 0x243f6a8885a308d3ull;
  auto next = [&](size_t n) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<size_t>(state % n);
  };
  auto random_path = [&] {
    std::string path = names[next(names.size())];
    for (size_t depth = next(3); depth > 0; --depth) path += "/" + names[next(names.size())];
    return path;
  };
  struct stat sentinel_before;
  ASSERT_EQ(::lstat((outside + "/sentinel").c_str(), &sentinel_before), 0);
  int succeeded = 0;
  for (int round = 0; round < 300; ++round) {
    ImageSpec spec;
    for (size_t layers = 1 + next(3); layers > 0; --layers) {
      TarBuilder tar;
      for (size_t entries = 1 + next(8); entries > 0; --entries) {
        std::string path = random_path();
        switch (next(5)) {
          case 0:
            tar.File(path, "pwned");
            break;
          case 1:
            tar.Dir(path + "/");
            break;
          case 2:
            tar.Symlink(path, link_targets[next(link_targets.size())]);
            break;
          case 3:
            tar.HardLink(path,
                         next(2) == 0 ? link_targets[next(link_targets.size())] : random_path());
            break;
          case 4:
            tar.Fifo(path);
            break;
        }
      }
      spec.layers.push_back(tar.Finish());
    }
    auto info = Unpack(DockerSave(spec));
    SCOPED_TRACE(round);
    if (info.ok()) {
      ++succeeded;
      ASSERT_TRUE(env_.DeleteDirRecursive(Rootfs()).ok());
    } else {
      EXPECT_TRUE(info.status().code() == StatusCode::kInvalidArgument ||
                  info.status().code() == StatusCode::kFailedPrecondition)
          << info.status();
    }
    ExpectNothingWritten();
    struct stat sentinel;
    ASSERT_EQ(::lstat((outside + "/sentinel").c_str(), &sentinel), 0);
    EXPECT_EQ(sentinel.st_ino, sentinel_before.st_ino);
    EXPECT_EQ(sentinel.st_nlink, 1u);  // never hard-linked into the image
    if (::testing::Test::HasFailure()) break;
  }
  EXPECT_GT(succeeded, 30);  // the generator also makes valid images
}

TEST_F(OciImageTest, CorruptLayersAreDataLoss) {
  std::string good = TarBuilder().File("a", std::string(2000, 'a')).File("b", "b").Finish();
  ExpectRejected(good.substr(0, 512 + 1000), StatusCode::kDataLoss, "truncated");
  ExpectRejected(good.substr(0, 100), StatusCode::kDataLoss, "truncated");
  ExpectRejected(TarBuilder().Raw({.name = "a", .checksum_delta = 7}, "x").Finish(),
                 StatusCode::kDataLoss, "checksum");
  // Size fields that lie, both ways.
  ExpectRejected(TarBuilder().Raw({.name = "a", .size = 100000}, "short").Finish(),
                 StatusCode::kDataLoss, "truncated");
  ExpectRejected(TarBuilder().Raw({.name = "a", .size = 3}, std::string(3000, 'z')).Finish(),
                 StatusCode::kDataLoss, "checksum");
  // A truncated gzip layer.
  ImageSpec spec;
  std::string gz = Gzip(good);
  spec.layers = {good};
  // Replace the stored layer by a truncated gzip of it (no diff_id check reached).
  TarBuilder tar;
  tar.File("l/layer.tar", gz.substr(0, gz.size() / 2));
  tar.File("c.json", spec.Config());
  tar.File("manifest.json",
           json::array({{{"Config", "c.json"}, {"Layers", {"l/layer.tar"}}}}).dump());
  auto info = Unpack(tar.Finish());
  EXPECT_EQ(info.status().code(), StatusCode::kDataLoss) << info.status();
  EXPECT_NE(info.status().message().find("gzip"), std::string::npos) << info.status();
  ExpectNothingWritten();
}

TEST_F(OciImageTest, GzipBombsStopAtTheLimits) {
  // 10 MiB of zeros in ~10 KiB of gzip, with a 1 MiB unpacked limit.
  std::string bomb = TarBuilder().File("bomb", std::string(10 << 20, '\0')).Finish();
  ImageSpec spec;
  spec.layers = {bomb};
  spec.gzip = {true};
  std::string archive = DockerSave(spec);
  EXPECT_LT(archive.size(), 100u << 10);
  auto info = Unpack(archive, {.max_unpacked_bytes = 1 << 20});
  EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << info.status();
  EXPECT_NE(info.status().message().find("max_unpacked_bytes"), std::string::npos) << info.status();
  ExpectNothingWritten();

  // A tiny tar followed by endless zeros (which still count: they are hashed for the diff_id).
  spec.layers = {TarBuilder().File("a", "a").Finish() + std::string(10 << 20, '\0')};
  info = Unpack(DockerSave(spec), {.max_layer_stream_bytes = 1 << 20});
  EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << info.status();
  EXPECT_NE(info.status().message().find("max_layer_stream_bytes"), std::string::npos)
      << info.status();
  ExpectNothingWritten();

  // A gzip-compressed archive that inflates beyond max_archive_bytes.
  std::string big_archive = Gzip(DockerSave(ImageSpec{.layers = {bomb}}));
  info = Unpack(big_archive, {.max_archive_bytes = 2 << 20});
  EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << info.status();
  EXPECT_NE(info.status().message().find("max_archive_bytes"), std::string::npos) << info.status();
  ExpectNothingWritten();
}

TEST_F(OciImageTest, LimitsAreResourceExhaustedNamingTheLimit) {
  ImageSpec three;
  three.layers = {TarBuilder().File("a", "a").Finish(), TarBuilder().File("b", "b").Finish(),
                  TarBuilder().File("c", "c").Finish()};
  ImageSpec many_entries;
  TarBuilder tar;
  for (int i = 0; i < 10; ++i) tar.File("f" + std::to_string(i), "x");
  many_entries.layers = {tar.Finish()};
  ImageSpec long_path;
  long_path.layers = {TarBuilder().File(std::string(100, 'p'), "x").Finish()};
  ImageSpec big_config;
  big_config.layers = {TarBuilder().File("a", "a").Finish()};
  big_config.config_padding = std::string(10000, 'c');
  struct Case {
    std::string archive;
    UnpackOptions options;
    std::string limit;
  };
  std::vector<Case> cases = {
      {DockerSave(three), {.max_layers = 2}, "max_layers"},
      {OciLayout(three), {.max_layers = 2}, "max_layers"},
      {DockerSave(many_entries), {.max_entries = 5}, "max_entries"},
      {DockerSave(long_path), {.max_path_bytes = 50}, "max_path_bytes"},
      {DockerSave(big_config), {.max_manifest_bytes = 4096}, "max_manifest_bytes"},
      {OciLayout(big_config), {.max_manifest_bytes = 4096}, "max_manifest_bytes"},
      {DockerSave(three), {.max_archive_bytes = 1024}, "max_archive_bytes"},
      {DockerSave(three), {.max_archive_members = 2}, "max_archive_members"},
  };
  for (const Case& c : cases) {
    auto info = Unpack(c.archive, c.options);
    EXPECT_EQ(info.status().code(), StatusCode::kResourceExhausted) << c.limit << info.status();
    EXPECT_NE(info.status().message().find(c.limit), std::string::npos) << info.status();
    ExpectNothingWritten();
  }
  // Exactly at the limits: fine.
  auto info = Unpack(DockerSave(many_entries), {.max_entries = 10});
  EXPECT_TRUE(info.ok()) << info.status();
}

TEST_F(OciImageTest, UnsupportedAndMalformedArchives) {
  ImageSpec zstd;
  zstd.layers = {std::string("\x28\xb5\x2f\xfd", 4) + "not really zstd"};
  zstd.diff_ids = std::vector<std::string>{"sha256:" + std::string(64, 'a')};
  struct Case {
    std::string archive;
    StatusCode code;
    std::string message;
  };
  OciBuilder sha512;
  json bad_digest = sha512.AddImage(ImageSpec{.layers = {TarBuilder().Finish()}});
  bad_digest["digest"] = "sha512:" + std::string(128, 'a');
  OciBuilder v2;
  json v2_manifest = v2.AddImage(ImageSpec{.layers = {TarBuilder().Finish()}});
  std::vector<Case> cases = {
      {DockerSave(zstd), StatusCode::kUnimplemented, "zstd"},
      {TarBuilder().File("README", "hi").Finish(), StatusCode::kInvalidArgument, "not an image"},
      {"definitely not a tar archive", StatusCode::kDataLoss, "tar"},
      {TarBuilder().File("manifest.json", "{not json").Finish(), StatusCode::kInvalidArgument,
       "manifest.json"},
      {TarBuilder().File("manifest.json", "{}").Finish(), StatusCode::kInvalidArgument,
       "non-empty array"},
      {TarBuilder()
           .File("manifest.json",
                 json::array({{{"Config", "c.json"}, {"Layers", {"missing.tar"}}}}).dump())
           .File("c.json", ImageSpec{}.Config())
           .Finish(),
       StatusCode::kNotFound, "missing.tar"},
      {sha512.Build(json::array({bad_digest})), StatusCode::kUnimplemented, "sha512"},
      {v2.Build(json::array({v2_manifest}), "2.0.0"), StatusCode::kUnimplemented, "2.0.0"},
      {v2.Build(json::array()), StatusCode::kInvalidArgument, "no image manifest"},
  };
  for (const Case& c : cases) {
    auto info = Unpack(c.archive);
    EXPECT_EQ(info.status().code(), c.code) << c.message << ": " << info.status();
    EXPECT_NE(info.status().message().find(c.message), std::string::npos) << info.status();
    ExpectNothingWritten();
  }
  // A missing archive.
  auto info = UnpackImage(Path("nope.tar"), Rootfs());
  EXPECT_EQ(info.status().code(), StatusCode::kNotFound) << info.status();
}

TEST_F(OciImageTest, ExistingRootfsIsAlreadyExists) {
  ASSERT_TRUE(env_.CreateDirs(InRootfs("keep")).ok());
  auto info = Unpack(DockerSave(StandardImage()));
  EXPECT_EQ(info.status().code(), StatusCode::kAlreadyExists) << info.status();
  EXPECT_EQ(*env_.ListDir(Path("images")), std::vector<std::string>{"rootfs"});
  EXPECT_EQ(*env_.ListDir(Rootfs()), std::vector<std::string>{"keep"});
  EXPECT_EQ(UnpackImage(WriteArchive("x"), "/", {}).status().code(), StatusCode::kInvalidArgument);
}

// --- Cache ---

TEST_F(OciImageTest, CacheUnpacksOnceAndReuses) {
  std::string archive = WriteArchive(DockerSave(StandardImage()));
  std::string cache = Path("cache");
  auto first = CachedRootfs(cache, "etag-123", archive);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->reused);
  EXPECT_EQ(first->rootfs, cache + "/etag-123/rootfs");
  EXPECT_EQ(*env_.ReadFile(first->rootfs + "/etc/passwd"), "root:x:0:0:v2\n");
  // Mark the rootfs: a second call must not unpack again.
  ASSERT_TRUE(env_.WriteFileAtomically(first->rootfs + "/marker", "m").ok());
  ASSERT_TRUE(env_.DeleteFile(archive).ok());  // not even needed any more
  auto second = CachedRootfs(cache, "etag-123", archive);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->reused);
  EXPECT_EQ(second->rootfs, first->rootfs);
  EXPECT_EQ(second->info, first->info);
  EXPECT_TRUE(env_.FileExists(first->rootfs + "/marker"));
  // Another key is another image.
  auto other = CachedRootfs(cache, "other", archive);
  EXPECT_EQ(other.status().code(), StatusCode::kNotFound) << other.status();
  EXPECT_FALSE(env_.FileExists(cache + "/other/rootfs"));
}

TEST_F(OciImageTest, ConcurrentCallersUnpackOnce) {
  std::string archive = WriteArchive(DockerSave(StandardImage()));
  std::string cache = Path("cache");
  constexpr int kThreads = 4;
  std::vector<base::Result<CachedImage>> results(kThreads, base::InternalError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] { results[i] = CachedRootfs(cache, "k", archive); });
  }
  for (std::thread& t : threads) t.join();
  int unpacked = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    if (!r->reused) ++unpacked;
    EXPECT_EQ(r->info, results[0]->info);
  }
  EXPECT_EQ(unpacked, 1);
  EXPECT_EQ(*env_.ListDir(cache + "/k"),
            (std::vector<std::string>{"image.json", "lock", "rootfs"}));
}

TEST_F(OciImageTest, CacheRecoversFromACrash) {
  std::string archive = WriteArchive(DockerSave(StandardImage()));
  std::string key_dir = Path("cache/k");
  // A crashed unpack left a temporary directory and file, and a rootfs without image.json.
  ASSERT_TRUE(env_.CreateDirs(key_dir + "/.rootfs.sovai-unpack.0123456789abcdef/etc").ok());
  ASSERT_TRUE(env_.WriteFileAtomically(key_dir + "/.rootfs.sovai-archive.0123", "x").ok());
  ASSERT_TRUE(env_.CreateDirs(key_dir + "/rootfs/half").ok());
  auto image = CachedRootfs(Path("cache"), "k", archive);
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_FALSE(image->reused);
  EXPECT_FALSE(env_.FileExists(image->rootfs + "/half"));
  EXPECT_EQ(*env_.ListDir(key_dir), (std::vector<std::string>{"image.json", "lock", "rootfs"}));
  auto info = ImageInfoFromJson(*env_.ReadFile(key_dir + "/image.json"));
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(*info, image->info);
}

TEST_F(OciImageTest, CacheFailureLeavesNoRootfs) {
  ImageSpec spec = StandardImage();
  spec.diff_ids = {"sha256:" + std::string(64, '1'), "sha256:" + std::string(64, '2')};
  std::string bad = WriteArchive(DockerSave(spec), "bad.tar");
  auto image = CachedRootfs(Path("cache"), "k", bad);
  EXPECT_EQ(image.status().code(), StatusCode::kDataLoss) << image.status();
  EXPECT_EQ(*env_.ListDir(Path("cache/k")), std::vector<std::string>{"lock"});
  image = CachedRootfs(Path("cache"), "k", WriteArchive(DockerSave(StandardImage())));
  ASSERT_TRUE(image.ok()) << image.status();
  EXPECT_FALSE(image->reused);
}

TEST_F(OciImageTest, CacheKeysAreChecked) {
  std::string archive = WriteArchive(DockerSave(StandardImage()));
  for (std::string key :
       {std::string(), std::string("."), std::string(".."), std::string("a/b"),
        std::string("\"etag\""), std::string("sha256:abc"), std::string(129, 'k')}) {
    auto image = CachedRootfs(Path("cache"), key, archive);
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument) << key;
  }
  EXPECT_FALSE(env_.FileExists(Path("cache")));
  EXPECT_TRUE(CachedRootfs(Path("cache"), std::string(128, 'k'), archive).ok());
}

TEST(ImageInfoJsonTest, RoundTrips) {
  ImageInfo info{.format = "oci-layout",
                 .config_digest = "sha256:" + std::string(64, 'a'),
                 .os = "linux",
                 .architecture = "amd64",
                 .env = {"A=1", "B=two words"},
                 .entrypoint = {"/bin/sh", "-c"},
                 .cmd = {"echo \"hi\""},
                 .working_dir = "/w",
                 .user = "1000:1000",
                 .layers = 3,
                 .files = 100,
                 .bytes = 1ull << 40,
                 .whiteouts = 2,
                 .skipped_special = 1};
  auto back = ImageInfoFromJson(ImageInfoToJson(info));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, info);
  EXPECT_EQ(ImageInfoFromJson("{\"format\": 1}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ImageInfoFromJson("[]").status().code(), StatusCode::kInvalidArgument);
}

// --- End to end: an image made of host files, run in the sandbox ---

// Resolves "." and ".." of an absolute path lexically.
std::string Normalize(std::string_view path) {
  std::vector<std::string> parts;
  for (std::string_view p : base::Split(path, '/', true)) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.emplace_back(p);
  }
  return "/" + base::Join(parts, "/");
}

// Adds the host file `path` to `tar` with every symlink on the way to it (kept as symlinks, their
// targets added too), so that the image resolves it as the host does.
void AddHostPath(TarBuilder& tar, std::set<std::string>& added, const std::string& path,
                 int depth = 0) {
  ASSERT_LT(depth, 40) << path;
  std::vector<std::string_view> parts = base::Split(path, '/', true);
  std::string current;
  for (size_t i = 0; i < parts.size(); ++i) {
    current += "/" + std::string(parts[i]);
    struct stat st;
    ASSERT_EQ(::lstat(current.c_str(), &st), 0) << current;
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = ::readlink(current.c_str(), buf, sizeof buf);
      ASSERT_GT(n, 0);
      std::string target(buf, static_cast<size_t>(n));
      if (added.insert(current).second) tar.Symlink(current.substr(1), target);
      std::string resolved = target[0] == '/' ? target : base::DirName(current) + "/" + target;
      for (size_t j = i + 1; j < parts.size(); ++j) resolved += "/" + std::string(parts[j]);
      AddHostPath(tar, added, Normalize(resolved), depth + 1);
      return;
    }
    if (!added.insert(current).second) continue;
    if (S_ISDIR(st.st_mode)) {
      tar.Dir(current.substr(1) + "/", 0755);
    } else {
      auto data = base::Env::Default().ReadFile(current, 256ull << 20);
      ASSERT_TRUE(data.ok()) << data.status();
      tar.File(current.substr(1), *data, st.st_mode & 0777);
    }
  }
}

class ImageSandboxIntegrationTest : public OciImageTest {};

TEST_F(ImageSandboxIntegrationTest, RunsAShellFromAnUnpackedImage) {
  SandboxOptions sandbox_options;
  auto sandbox = Sandbox::Create(env_, sandbox_options);
  if (std::string skip = testing::SandboxSkipReason(sandbox.status()); !skip.empty()) {
    GTEST_SKIP() << skip;
  }
  ASSERT_TRUE(sandbox.ok()) << sandbox.status();
  // /bin/sh and the libraries ldd says it needs.
  auto ldd = base::RunAndCapture(env_, {.argv = {"ldd", "/bin/sh"}}, "", 30'000);
  if (!ldd.ok() || !ldd->exit.success()) GTEST_SKIP() << "needs ldd to find /bin/sh's libraries";
  std::vector<std::string> files = {"/bin/sh"};
  for (std::string_view line : base::Split(ldd->stdout_text, '\n', true)) {
    for (std::string_view token : base::Split(base::Trim(line), ' ', true)) {
      if (token[0] == '/') files.emplace_back(token);
    }
  }
  TarBuilder layer;
  std::set<std::string> added;
  for (const std::string& f : files) AddHostPath(layer, added, f);
  layer.Dir("etc/").File("etc/os-release", "ID=sovai-image-test\n");
  ImageSpec spec;
  spec.layers = {layer.Finish()};
  spec.gzip = {true};
  spec.entrypoint = {"/bin/sh", "-c"};
  spec.cmd = {"echo hi"};
  auto info = Unpack(OciLayout(spec));
  ASSERT_TRUE(info.ok()) << info.status();

  SandboxSpec run;
  run.rootfs = Rootfs();
  run.argv = info->entrypoint;
  // Only sh is in the image: builtins read the file.
  run.argv.push_back(
      "echo hi; while read -r l; do echo \"$l\"; done < /etc/os-release; "
      "test -e /usr/share/doc || echo only-image");
  run.work_dir = Path("work");
  run.log_path = Path("job.log");
  auto workload = (*sandbox)->Launch(run);
  ASSERT_TRUE(workload.ok()) << workload.status();
  auto exit = (*workload)->Wait();
  ASSERT_TRUE(exit.ok()) << exit.status();
  std::string out;
  auto text = env_.ReadFile(run.log_path);
  ASSERT_TRUE(text.ok()) << text.status();
  for (std::string_view line : base::Split(*text, '\n', true)) {
    auto record = ParseLogRecord(line);
    ASSERT_TRUE(record.ok()) << record.status();
    out += record->line + "\n";
  }
  EXPECT_TRUE(exit->success()) << exit->ToString() << "\n" << out;
  EXPECT_EQ(out, "hi\nID=sovai-image-test\nonly-image\n");
}

}  // namespace
}  // namespace sovai::exec
